"""Run one claimed job and tell the queue how it went.

What the job's run comes to (its verdict) is ``attempt.py``'s outcome table;
here it is written to the queue and logged.

An atomic job (``@job(atomic=True)``) has acked in its own transaction
before its attempt returns (``attempt.py``): its outcome is ``done``, or
``lost`` if the fence refused the ack and everything rolled back, and nothing
more is written. Any other job told to stop while it ran (``control.py``)
ends so, whatever it returned: ``cancelled`` (nothing written: the row already says so) or ``lost``
(its claim is another's); a timed-out one is a failure, ``JobTimeout: timed
out after N s``, retried with backoff or dead-lettered like any other. A job
whose child process died under it (killed from outside) is ``lost`` as if
the worker had died: its claim expires and is rescued, the attempt counted.

A nack is ``retry`` while attempts remain and ``dead`` on the last one. If the
claim was lost meanwhile (expired and re-claimed, or the job cancelled), the
queue refuses the write and the outcome is ``lost``. If the write itself fails
(the database went away), under ``runworker`` the slot sits out with the job
still claimed until it can connect, and writes it then (``outage.Shortage``);
a job whose first query could not open a connection is handed back instead,
its attempt not counted. Elsewhere the outcome is ``unrecorded``: the error is
logged and the job, still claimed, is handed out again once its claim expires.

The log line, on the ``django_jobqueue`` logger; a retry says when the next
attempt is due, a dead job where it went::

    job send_otp id=42 attempt=1/5 duration=0.013s outcome=done
    job send_otp id=43 attempt=2/5 duration=0.004s outcome=retry next_attempt_in=1.274s error='ValueError: …'
    job send_otp id=43 attempt=5/5 duration=0.005s outcome=dead moved_to=dead_letters error='ValueError: …'

A job handed back at shutdown logs how long it had been running (0 if it
never started).

The line's fields also ride on the record as ``job_fields`` (a dict), which
``runworker --log-format json`` prints as one object (``worker/logformat.py``). Each
outcome is also told to the executor's ``observer`` (``runworker
--metrics-port``: ``services/metrics.py``), if it has one.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from contextlib import nullcontext
from dataclasses import replace
from typing import Any, Protocol

from django.db import connections

from ...models import Job
from ...queue import QueueClient, is_lock_timeout
from ..completer import Answer, Completer, Report
from ..outage import DATABASE_ERRORS, Shortage, close_connection, failed_to_connect, is_connection_error
from .attempt import run_job, timeout_verdict
from .connections import close_all_connections, close_held_connections, job_queried, watch_queries
from .control import RunControl, StopReason, ThreadTarget
from .job_line import log_outcome, log_unrecorded
from .outcomes import Action, Attempt, Outcome, Verdict
from .progress import DirectProgress, ProgressReport, ProgressSink, reporter
from .watchdog import Attempts, Watchdog

logger = logging.getLogger("django_jobqueue.worker.executor")

# Seconds before a slot writes again an outcome whose row another transaction held past the lock timeout.
HELD_ROW_RETRY = 0.5

# Seconds a job told to stop gets before it is stopped by force (runworker's --cancel-grace).
DEFAULT_CANCEL_GRACE = 5.0


class OutcomeObserver(Protocol):
    """Told of every outcome the executor logs, and of each ack a slot wrote itself."""

    def job_finished(self, job: Job, outcome: Outcome, duration: float, timed_out: bool) -> None: ...

    def slot_acked(self) -> None: ...


class Runner(Protocol):
    """Runs a job's code elsewhere than the calling thread: a child process (``processes/children.py``)."""

    def attempt(self, job: Job, control: RunControl, report: ProgressReport) -> Attempt: ...


class Executor:
    """Runs claimed jobs of one worker, each in the calling thread or through a slot's ``Runner``."""

    def __init__(
        self,
        client: QueueClient,
        worker_id: str,
        completer: Completer | None = None,
        shortage: Shortage | None = None,
        watchdog: Watchdog | None = None,
        cancel_grace: float = DEFAULT_CANCEL_GRACE,
        progress: ProgressSink | None = None,
        *,
        tends_connections: bool = True,
    ) -> None:
        self.client = client
        # A slot closes its connections around each job as Django does around a request; the
        # testing kit runs jobs on the test's own connection, inside its transaction, and must not.
        self.tends_connections = tends_connections
        self.worker_id = worker_id
        # Acks go through the completer's batches when there is one (runworker), else one by one:
        # see _ack.
        self.completer = completer
        # The attempts in progress, by claim: when each started, and whether it was told to stop.
        # The watchdog's own registry when there is one, so that each attempt is kept once.
        self.attempts = watchdog.attempts if watchdog is not None else Attempts()
        # runworker's: a slot that cannot reach the database waits there instead of giving up.
        self.shortage = shortage
        # runworker's: keeps time limits and tells cancelled jobs to stop. Without one, a job
        # runs to its end whatever its timeout.
        self.watchdog = watchdog
        self.cancel_grace = cancel_grace
        self.observer: OutcomeObserver | None = None  # runworker --metrics-port's: counts each outcome
        # runworker's ProgressWriter writes the jobs' ctx.progress() reports; without one, each
        # job's own thread does (progress.py).
        self.progress = progress if progress is not None else DirectProgress(client, worker_id)

    def run(self, job: Job, runner: Runner | None = None) -> Outcome:
        """Run ``job``, record its outcome in the queue, log one line; return the outcome.

        The job runs in the calling thread, or through ``runner``. The outcome
        is ``PENDING`` when the ack went to the completer without waiting: the
        job stays claimed until the completer writes it, and the line is logged
        then.
        """
        if self.tends_connections:
            close_held_connections()  # as Django does per request: honour CONN_MAX_AGE, drop broken ones
        control = self.begin(job)
        try:
            if runner is not None:
                attempt = runner.attempt(job, control, reporter(control, self.progress))
                try:
                    return self._finish(job, control, attempt, queried=False)
                finally:
                    if self.tends_connections:  # what writing a retry or a dead letter opened: CONN_MAX_AGE
                        close_held_connections()
            return self._run_here(job, control)
        finally:
            self.end(control)

    def begin(self, job: Job) -> RunControl:
        """Start ``job``'s attempt: its clock, and its place among the attempts in progress."""
        control = RunControl(job, job.timeout, self.cancel_grace)
        if self.watchdog is not None:
            self.watchdog.watch(control)
        else:
            self.attempts.add(control)
        return control

    def end(self, control: RunControl) -> None:
        """The attempt of ``control`` is over: forget it."""
        self.attempts.remove(control)

    def finish_later(self, job: Job, control: RunControl, attempt: Attempt) -> Callable[[], Outcome] | None:
        """Settle a coroutine job's ``attempt`` here if that writes nothing; else what a thread must call.

        Called on the event loop of ``--pool asyncio``, where nothing may wait on
        the database: a plain ack (never told to stop, no progress, no Django
        Task) goes to the completer, and None is returned (``PENDING``).
        """
        completer = self.completer
        plain_ack = (
            attempt.verdict.action is Action.ACK
            and attempt.task_run is None
            and attempt.settled is None
            and control.progress is None
        )
        if completer is None or not plain_ack or not control.settle_if_running("slot"):
            return lambda: self.finish(job, control, attempt)
        duration = time.monotonic() - control.started
        if completer.submit(job, attempt.verdict.result, self._reporter(job, duration)):
            return None
        # The completer has stopped (a job that outlived the shutdown): its thread writes the ack.
        return lambda: self.finish(job, control, attempt, settled=True)

    def finish(self, job: Job, control: RunControl, attempt: Attempt, *, settled: bool = False) -> Outcome:
        """Write what ``attempt``, run elsewhere (on the loop), came to; ``settled``: by ``finish_later``."""
        try:
            return self._finish(job, control, attempt, queried=False, settled=settled)
        finally:
            if self.tends_connections:
                close_held_connections()

    def _run_here(self, job: Job, control: RunControl) -> Outcome:
        # Whether the job queries the queue's database (connections.py).
        probe = watch_queries()
        target = ThreadTarget()
        control.attach(target)
        with connections[self.client.using].execute_wrapper(probe) if probe else nullcontext():
            attempt = run_job(
                job,
                self.worker_id,
                self.client,
                lambda: control.stopping,
                guard=target,
                report=reporter(control, self.progress),
            )
        try:
            return self._finish(job, control, attempt, job_queried(probe, self.client.using))
        finally:
            if target.sent:
                # Interrupted anywhere, even inside a database driver: its connections may be
                # mid-conversation, and the next job must not inherit them.
                close_all_connections()
            close_held_connections()

    def _finish(
        self, job: Job, control: RunControl, attempt: Attempt, queried: bool, settled: bool = False
    ) -> Outcome:
        """Write what ``attempt`` came to, unless the job was stopped for a reason that decides it.

        ``settled``: this slot already owns the outcome, the job never told to stop.
        """
        first, reason = (True, None) if settled else control.settle("slot")
        now = time.monotonic()
        duration = now - control.started
        if not first:
            logger.warning(
                "job %s id=%s attempt=%s: its thread returned %.3fs after the attempt was given up "
                "(%.3fs after it started)",
                job.name,
                job.pk,
                job.attempts,
                now - control.settled_at,
                duration,
            )
            return control.outcome
        if attempt.settled is not None and (attempt.settled is Outcome.DONE or reason is None):
            # An atomic job acked in its own transaction (or saw the ack refused): what that
            # transaction did is the outcome, whatever the watch learnt of the row meanwhile.
            self._log(job, duration, attempt.settled, "")
            return attempt.settled
        if reason is StopReason.CANCELLED or reason is StopReason.LOST:
            # The row is no longer this claim's: nothing to write.
            outcome = Outcome.CANCELLED if reason is StopReason.CANCELLED else Outcome.LOST
            self._log(job, duration, outcome, attempt.died)
            return outcome
        if reason is StopReason.SHUTDOWN:
            return Outcome.RELEASED  # handed back, and logged, when the worker stopped
        self._write_last_progress(control)
        if attempt.unsent:
            return self.hand_back(job)
        if reason is StopReason.TIMEOUT:
            verdict = timeout_verdict(job, control, attempt)
        elif attempt.died:
            # Killed from outside mid-job: as if this worker had died. Its claim, no longer
            # beaten, expires and is rescued like a dead worker's, the attempt counted.
            self._log(job, duration, Outcome.LOST, attempt.died)
            return Outcome.LOST
        else:
            verdict = attempt.verdict
        return self._write(job, self._with_backoff(job, verdict), attempt, duration, queried)

    def _write(self, job: Job, verdict: Verdict, attempt: Attempt, duration: float, queried: bool) -> Outcome:
        raised = attempt.raised
        unstarted = attempt.unstarted or (raised is not None and failed_to_connect(raised, self.client.using))
        if self.shortage is not None and unstarted:
            # The job's first query could not open a connection: it never really ran.
            return self._hand_back_when_connected(job, verdict.error)
        task_run = attempt.task_run
        # A Django Task's slot waits for its ack: the task_finished signal it sends tells the outcome.
        wait = task_run is not None
        outcome, again = self._record(job, verdict, duration, queried, wait)
        while again and self._sat_out(f"job {job.pk}'s outcome could not be recorded"):
            outcome, again = self._record(job, verdict, duration, queried, wait)
        if outcome is not Outcome.PENDING:
            self._log(job, duration, outcome, verdict.error, verdict.delay, timed_out=verdict.timed_out)
            if task_run is not None:
                task_run.finish(outcome, verdict.result, verdict.error, verdict.traceback)
        return outcome

    def give_up(self, control: RunControl, on_settled: Callable[[], None]) -> bool:
        """Write the timeout of a job whose thread is still stuck after its grace; False if it returned.

        Called from a thread of its own: the slot's thread is the one stuck.
        ``on_settled`` runs once this call owns the outcome, before it is
        written. The slot stays taken until the thread returns (the caller
        keeps counting it).
        """
        first, _reason = control.settle("watchdog")
        if not first:
            return False
        on_settled()
        self._write_last_progress(control)
        job = control.job
        duration = time.monotonic() - control.started
        verdict = self._with_backoff(job, timeout_verdict(job, control, None))
        outcome, _again = self._record(job, verdict, duration, queried=True, wait=False)
        control.outcome = outcome
        self._log(job, duration, outcome, verdict.error, verdict.delay, timed_out=True)
        return True

    def _write_last_progress(self, control: RunControl) -> None:
        """Write the attempt's last ``ctx.progress()`` report while its claim still holds the row."""
        if control.progress is not None:
            self.progress.finish(control.progress)

    def hand_back(self, job: Job) -> Outcome:
        """Give a claimed job back without running it, its attempt not counted."""
        control = self.attempts.get((job.pk, job.claim_token))
        duration = 0.0 if control is None else time.monotonic() - control.started
        try:
            released = self.client.release(job, worker_id=self.worker_id)
        except DATABASE_ERRORS as exc:
            close_connection(self.client.using)
            self._log(job, duration, Outcome.UNRECORDED, f"release failed: {type(exc).__name__}: {exc}")
            return Outcome.UNRECORDED
        outcome = Outcome.RELEASED if released else Outcome.LOST
        self._log(job, duration, outcome, "")
        return outcome

    def attempts_of(self, jobs: list[Job]) -> list[RunControl]:
        """The attempts in progress of ``jobs`` (those whose code runs now)."""
        return [control for job in jobs if (control := self.attempts.get((job.pk, job.claim_token)))]

    def _hand_back_when_connected(self, job: Job, error: str) -> Outcome:
        """Release ``job`` once this slot can open a connection: the attempt is not counted."""
        outcome = Outcome.UNRECORDED
        while outcome is Outcome.UNRECORDED and self._sat_out(f"job {job.pk} could not open one: {error}"):
            outcome = self.hand_back(job)
        return outcome

    def _sat_out(self, reason: str) -> bool:
        """Wait until this thread can connect again; False at once outside ``runworker``."""
        return self.shortage is not None and self.shortage.sit_out(reason)

    def _with_backoff(self, job: Job, verdict: Verdict) -> Verdict:
        """Fix a retry's backoff here rather than in ``nack``, so that its line can say when it is due."""
        if verdict.action is not Action.NACK or verdict.delay is not None or job.attempts >= job.max_attempts:
            return verdict
        return replace(verdict, delay=self.client.backoff(job.attempts))

    def _record(
        self, job: Job, verdict: Verdict, duration: float, queried: bool, wait: bool
    ) -> tuple[Outcome, bool]:
        """Tell the queue ``verdict``; return the outcome, and whether to write it again.

        The outcome is ``UNRECORDED`` if the database failed. Under runworker a
        slot writes it again once it reconnects, when the failure was the
        connection's; a write the database refuses (a constraint, a trigger)
        would be refused again, so the claim is left to expire instead. A lock
        wait that timed out is written again at once: on MySQL an enqueue that
        names the job in ``depends_on`` holds its row until it commits, and
        meanwhile the heartbeat names the claim held, so that no tick hands it
        back (docs/guarantees.md).
        """
        waits = 0
        while True:
            try:
                return self._tell_queue(job, verdict, duration, queried, wait), False
            except DATABASE_ERRORS as exc:
                if is_lock_timeout(self.client.using, exc):
                    if not waits:
                        logger.warning(
                            "job %s id=%s: another transaction holds its row; its outcome waits for it",
                            job.name,
                            job.pk,
                        )
                    waits += 1
                    time.sleep(HELD_ROW_RETRY)  # a lock timeout set short must not make this a busy loop
                    continue
                close_connection(self.client.using)
                again = self.shortage is not None and is_connection_error(self.client.using, exc)
                log_unrecorded(job, exc, retried=again)
                return Outcome.UNRECORDED, again

    def _tell_queue(self, job: Job, verdict: Verdict, duration: float, queried: bool, wait: bool) -> Outcome:
        """Write ``verdict``'s ack, nack or dead letter; raise what the database raised."""
        if verdict.action is Action.ACK:
            return self._ack(job, verdict.result, duration, queried, wait)
        if verdict.action is Action.FAIL:
            failed = self.client.fail(
                job,
                worker_id=self.worker_id,
                error=verdict.error,
                traceback=verdict.traceback,
                timed_out=verdict.timed_out,
            )
            return Outcome.DEAD if failed else Outcome.LOST
        nacked = self.client.nack(
            job,
            worker_id=self.worker_id,
            error=verdict.error,
            traceback=verdict.traceback,
            delay=verdict.delay,
            timed_out=verdict.timed_out,
        )
        if not nacked:
            return Outcome.LOST
        return Outcome.DEAD if job.attempts >= job.max_attempts else Outcome.RETRY

    def _ack(self, job: Job, result: Any, duration: float, queried: bool, wait: bool) -> Outcome:
        """Ack ``job`` with ``result``: the one place that decides how an ack is written.

        A job that queried the queue's database acks on the connection it
        used, as nacks and fails do. Any other ack goes to the completer, to
        ride on the claimer's next round trip (or on the completer's own once
        the claimer stops), so that the slot needs no connection: unless
        ``wait``, the slot goes on at once and the outcome is ``PENDING``, its
        line logged once the ack is written; with ``wait``, the slot waits for
        that. Without a completer, or once it has stopped, the slot writes the
        ack itself.

        Raise what the database raised.
        """
        completer = self.completer
        if completer is not None and not queried:
            if not wait:
                if completer.submit(job, result, self._reporter(job, duration)):
                    return Outcome.PENDING
            else:
                answer = Answer()
                if completer.submit(job, result, answer.report):
                    return answer.wait()
        acked = self.client.ack(job, worker_id=self.worker_id, result=result)
        if self.observer is not None:
            self.observer.slot_acked()
        return Outcome.DONE if acked else Outcome.LOST

    def _reporter(self, job: Job, duration: float) -> Report:
        """Log ``job``'s line once the completer has written its ack."""

        def report(outcome: Outcome, error: BaseException | None) -> None:
            if error is not None:
                log_unrecorded(job, error)
            self._log(job, duration, outcome, "")

        return report

    def _log(
        self,
        job: Job,
        duration: float,
        outcome: Outcome,
        error: str,
        next_attempt_in: float | None = None,
        *,
        timed_out: bool = False,
    ) -> None:
        if self.observer is not None:
            self.observer.job_finished(job, outcome, duration, timed_out)
        log_outcome(job, self.worker_id, duration, outcome, error, next_attempt_in)
