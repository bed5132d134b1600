"""Run one claimed job and tell the queue how it went.

This is the one place that catches broad exceptions: whatever a job raises
becomes one row of the outcome table below, and nothing a job does can take a
worker thread down.

==============================================  ==========================  =================
what the job did                                what the queue is told      outcome logged
==============================================  ==========================  =================
returned a JSON value (or None)                 ``ack(result)``             ``done``
returned a value JSON cannot carry              ``fail(error)``             ``dead``
raised ``Retry(delay=…)``                       ``nack(delay=…)``           ``retry`` / ``dead``
raised ``Fail(message)``                        ``fail(message)``           ``dead``
raised an exception its ``@job(fail_on=…)``     ``fail(error)``             ``dead``
names
could not be called: payload does not fit       ``fail(error)``             ``dead``
its signature
raised anything else                            ``nack(delay=backoff)``     ``retry`` / ``dead``
==============================================  ==========================  =================

A job that ran is never run again because of what it returned: a return value
JSON cannot carry (a ``datetime``, a model instance) sends it to the dead
letters at once with a ``JobPayloadError`` naming the value, whether results
are kept or not. Its effects happened once; retrying the dead letter is an
operator's decision.

A payload whose keys do not fit the function's keyword arguments (a missing
or unknown argument) can never succeed, so it is dead-lettered without calling
the function; enqueueing refuses such a payload already where the function is
registered, so this meets jobs enqueued elsewhere or before a deploy changed
the signature.

"Anything else" includes a name nobody registered (``no job registered as
'x'``): nacked, not failed, because the next deploy of a rolling update may
bring the code; once its attempts are spent it lands in the dead letters like
any failure, and the error says so instead of promising a retry.

A job of Django's Tasks framework (marked by the backend, see ``tasks.py``)
goes through the same table. Its task is found by its module path rather than
the registry, and a path that leads to anything but a ``Task`` is refused with
``Fail`` before anything is called; a missing module is nacked like an unknown
name.

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
"""

from __future__ import annotations

import logging
import threading
import time
import traceback
from collections.abc import Callable
from contextlib import nullcontext
from dataclasses import dataclass, replace
from typing import Any

from django.db import connections
from django.db.backends.signals import connection_created

from .. import registry
from ..exceptions import Fail, Retry, UnknownJobError
from ..models import Job
from ..queue import QueueClient
from ..queue.validation import encode_result, to_seconds
from .completer import Answer, Completer, Report
from .context import JobContext
from .outage import CONNECTION_ERRORS, DATABASE_ERRORS, Shortage, close_connection, failed_to_connect
from .outcomes import Action, Outcome

logger = logging.getLogger(__name__)

# Characters of an error's first line in its log line; a message may be megabytes long.
LOGGED_ERROR_CHARS = 500
# An outcome's log level; any other is a WARNING.
OUTCOME_LOG_LEVELS = {Outcome.DONE: logging.INFO, Outcome.RELEASED: logging.INFO, Outcome.DEAD: logging.ERROR}


@dataclass(frozen=True)
class Verdict:
    """What to tell the queue about one run."""

    action: Action
    result: Any = None
    error: str = ""
    traceback: str = ""
    delay: Any = None


class PayloadMismatch(Exception):  # noqa: N818 - never raised by a job's own code, only by _call
    """A job's payload does not fit its function's keyword arguments: no attempt can succeed."""


def verdict_for(
    exc: BaseException, *, qualified: bool = False, fail_on: tuple[type[BaseException], ...] = ()
) -> Verdict:
    """The outcome table's rows for a job that raised ``exc``.

    ``qualified`` names the exception with its module, as a traceback does (a
    Django Task's ``TaskError`` needs the class's path). ``fail_on`` is the
    job's ``@job(fail_on=…)``: those exceptions go to the dead letters at once.
    """
    trace = "".join(traceback.format_exception(exc))
    if isinstance(exc, PayloadMismatch):
        return Verdict(Action.FAIL, error=f"JobPayloadError: {message_of(exc)}")
    if isinstance(exc, Retry):
        try:
            delay = None if exc.delay is None else to_seconds(exc.delay, "Retry's delay")
        except ValueError as bad_delay:
            return Verdict(Action.NACK, error=f"Retry with a bad delay, backoff used instead: {bad_delay}")
        return Verdict(Action.NACK, error=f"Retry: {message_of(exc)}", traceback=trace, delay=delay)
    if isinstance(exc, Fail):
        return Verdict(Action.FAIL, error=f"Fail: {message_of(exc)}", traceback=trace)
    error = f"{_exception_name(exc, qualified)}: {message_of(exc)}"
    action = Action.FAIL if isinstance(exc, fail_on) else Action.NACK
    return Verdict(action, error=error, traceback=trace)


def verdict_for_result(result: Any, task_run: Any = None, *, qualified: bool = False) -> Verdict:
    """The outcome table's rows for a job that returned ``result``: an ack, or a dead letter if unstorable.

    Never a retry: the job ran, and running it again would repeat its effects
    for the sake of a value.
    """
    try:
        if task_run is not None:
            result = task_run.normalize(result)
        encode_result(result)
    except Exception as exc:
        error = (
            f"{_exception_name(exc, qualified)}: {message_of(exc)} "
            "(the job ran and returned this; it is not run again for its return value)"
        )
        return Verdict(Action.FAIL, error=error, traceback="".join(traceback.format_exception(exc)))
    return Verdict(Action.ACK, result=result)


def message_of(exc: BaseException) -> str:
    """``str(exc)``, or a placeholder if the exception's own ``__str__`` raises.

    Raised here, that error would end the slot's thread while the worker went
    on claiming jobs for it that nothing runs.
    """
    try:
        return str(exc)
    except Exception:
        return "<exception str() failed>"


def _exception_name(exc: BaseException, qualified: bool) -> str:
    kind = type(exc)
    if not qualified or kind.__module__ in ("builtins", "__main__"):
        return kind.__name__
    return f"{kind.__module__}.{kind.__qualname__}"


class _ThreadConnections(threading.local):
    """What a thread knows of its own database connections, from ``connection_created``."""

    def __init__(self) -> None:
        self.holding = False  # it may hold an open connection
        self.opened: list[str] = []  # aliases it opened since its current job started


_this_thread = _ThreadConnections()


def _note_connection(sender: Any, connection: Any, **kwargs: Any) -> None:
    _this_thread.holding = True
    _this_thread.opened.append(connection.alias)


connection_created.connect(_note_connection, dispatch_uid="django_jobqueue.worker.executor")


def close_held_connections() -> None:
    """Django's ``close_old_connections``, skipped in a thread that holds none.

    A slot calls it around every job, as Django does around every request:
    connections past ``CONN_MAX_AGE``, or broken, are closed. Most jobs open
    none, and looking through Django's per-thread connections costs more than
    such a job does.
    """
    if not _this_thread.holding:
        return
    still_open = False
    for connection in connections.all(initialized_only=True):
        connection.close_if_unusable_or_obsolete()
        still_open = still_open or connection.connection is not None
    _this_thread.holding = still_open


class QueryProbe:
    """An execute wrapper that notes whether a job ran a query on a connection."""

    def __init__(self) -> None:
        self.queried = False

    def __call__(self, execute: Callable[..., Any], sql: Any, params: Any, many: bool, context: Any) -> Any:
        self.queried = True
        return execute(sql, params, many, context)


class Executor:
    """Runs claimed jobs of one worker, each in the calling thread."""

    def __init__(
        self,
        client: QueueClient,
        worker_id: str,
        completer: Completer | None = None,
        shortage: Shortage | None = None,
    ) -> None:
        self.client = client
        self.worker_id = worker_id
        # Acks go through the completer's batches when there is one (runworker), else one by one:
        # see _ack.
        self.completer = completer
        # When each running claim's job started, for the duration logged if it is handed back.
        self._started: dict[tuple[int, int], float] = {}
        # runworker's: a slot that cannot reach the database waits there instead of giving up.
        self.shortage = shortage

    def run(self, job: Job) -> Outcome:
        """Run ``job``, record its outcome in the queue, log one line; return the outcome.

        The outcome is ``PENDING`` when the ack went to the completer without
        waiting: the job stays claimed until the completer writes it, and the
        line is logged then.
        """
        close_held_connections()  # as Django does per request: honour CONN_MAX_AGE, drop broken ones
        started = time.monotonic()
        claim = (job.pk, job.claim_token)
        self._started[claim] = started
        try:
            return self._run(job, started)
        finally:
            self._started.pop(claim, None)

    def _run(self, job: Job, started: float) -> Outcome:
        # Whether the job queries the queue's database: a thread that holds no connection
        # learns it from the connection the job opens; one that holds one watches its queries.
        probe = QueryProbe() if _this_thread.holding else None
        _this_thread.opened = []
        verdict, task_run, unstarted = self._attempt(job, probe)
        verdict = self._with_backoff(job, verdict)
        duration = time.monotonic() - started
        if unstarted:
            # The job's first query could not open a connection: it never really ran.
            outcome = self._hand_back_when_connected(job, verdict.error)
            close_held_connections()
            return outcome
        queried = probe.queried if probe else self.client.using in _this_thread.opened
        # A Django Task's slot waits for its ack: the task_finished signal it sends tells the outcome.
        wait = task_run is not None
        outcome, again = self._record(job, verdict, duration, queried, wait)
        while again and self._sat_out(f"job {job.pk}'s outcome could not be recorded"):
            outcome, again = self._record(job, verdict, duration, queried, wait)
        if outcome is not Outcome.PENDING:
            self._log(job, duration, outcome, verdict.error, verdict.delay)
            if task_run is not None:
                task_run.finish(outcome, verdict.result, verdict.error, verdict.traceback)
        close_held_connections()
        return outcome

    def hand_back(self, job: Job) -> Outcome:
        """Give a claimed job back without running it, its attempt not counted."""
        started = self._started.get((job.pk, job.claim_token))
        duration = 0.0 if started is None else time.monotonic() - started
        try:
            released = self.client.release(job, worker_id=self.worker_id)
        except DATABASE_ERRORS as exc:
            close_connection(self.client.using)
            self._log(job, duration, Outcome.UNRECORDED, f"release failed: {type(exc).__name__}: {exc}")
            return Outcome.UNRECORDED
        outcome = Outcome.RELEASED if released else Outcome.LOST
        self._log(job, duration, outcome, "")
        return outcome

    def _hand_back_when_connected(self, job: Job, error: str) -> Outcome:
        """Release ``job`` once this slot can open a connection: the attempt is not counted."""
        outcome = Outcome.UNRECORDED
        while outcome is Outcome.UNRECORDED and self._sat_out(f"job {job.pk} could not open one: {error}"):
            outcome = self.hand_back(job)
        return outcome

    def _sat_out(self, reason: str) -> bool:
        """Wait until this thread can connect again; False at once outside ``runworker``."""
        return self.shortage is not None and self.shortage.sit_out(reason)

    def _attempt(self, job: Job, probe: QueryProbe | None) -> tuple[Verdict, Any, bool]:
        """Run the job once; return its verdict, for a Django Task its ``TaskRun``, and
        whether it never really ran because its first query could not open a connection."""
        task_run = None
        spec = None
        try:
            with connections[self.client.using].execute_wrapper(probe) if probe else nullcontext():
                if job.task_backend:
                    # A Django Task (the one job found by its path, and only if it is a Task).
                    from .tasks import TaskRun

                    task_run = TaskRun(job)
                    result = task_run.call()
                else:
                    spec = self._spec(job)
                    result = self._call(job, spec)
        except BaseException as exc:  # noqa: B036 - the outcome table: nothing a job raises escapes
            fail_on = spec.fail_on if spec is not None else ()
            verdict = verdict_for(exc, qualified=bool(job.task_backend), fail_on=fail_on)
            if isinstance(exc, UnknownJobError):
                verdict = replace(verdict, error=f"{verdict.error} ({_what_next(job)})")
            unstarted = self.shortage is not None and failed_to_connect(exc, self.client.using)
            return verdict, task_run, unstarted
        return verdict_for_result(result, task_run, qualified=bool(job.task_backend)), task_run, False

    def _spec(self, job: Job) -> registry.JobSpec:
        spec = registry.lookup(job.name)
        if spec is None:
            raise UnknownJobError(f"no job registered as {job.name!r} on worker {self.worker_id}")
        return spec

    def _call(self, job: Job, spec: registry.JobSpec) -> Any:
        problem = spec.payload_problem(job.payload)
        if problem is not None:
            raise PayloadMismatch(problem)
        func: Callable[..., Any] = spec.func
        if spec.takes_context:
            return func(JobContext(job, self.worker_id, self.client), **job.payload)
        return func(**job.payload)

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
        would be refused again, so the claim is left to expire instead.
        """
        try:
            if verdict.action is Action.ACK:
                return self._ack(job, verdict.result, duration, queried, wait), False
            if verdict.action is Action.FAIL:
                failed = self.client.fail(
                    job, worker_id=self.worker_id, error=verdict.error, traceback=verdict.traceback
                )
                return (Outcome.DEAD if failed else Outcome.LOST), False
            nacked = self.client.nack(
                job,
                worker_id=self.worker_id,
                error=verdict.error,
                traceback=verdict.traceback,
                delay=verdict.delay,
            )
        except DATABASE_ERRORS as exc:
            close_connection(self.client.using)
            again = self.shortage is not None and isinstance(exc, CONNECTION_ERRORS)
            self._log_unrecorded(job, exc, retried=again)
            return Outcome.UNRECORDED, again
        if not nacked:
            return Outcome.LOST, False
        return (Outcome.DEAD if job.attempts >= job.max_attempts else Outcome.RETRY), False

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
        return Outcome.DONE if acked else Outcome.LOST

    def _reporter(self, job: Job, duration: float) -> Report:
        """Log ``job``'s line once the completer has written its ack."""

        def report(outcome: Outcome, error: BaseException | None) -> None:
            if error is not None:
                self._log_unrecorded(job, error)
            self._log(job, duration, outcome, "")

        return report

    def _log_unrecorded(self, job: Job, exc: BaseException, *, retried: bool = False) -> None:
        logger.error(
            "job %s id=%s: could not record its outcome (%s: %s); %s",
            job.name,
            job.pk,
            type(exc).__name__,
            str(exc).strip(),
            "written again once the slot reaches the database"
            if retried
            else "it is run again when its claim expires",
        )

    def _log(
        self, job: Job, duration: float, outcome: Outcome, error: str, next_attempt_in: float | None = None
    ) -> None:
        level = OUTCOME_LOG_LEVELS.get(outcome, logging.WARNING)
        first_line = error.splitlines()[0] if error.strip() else ""
        if len(first_line) > LOGGED_ERROR_CHARS:  # the stored error keeps more
            first_line = first_line[:LOGGED_ERROR_CHARS] + "..."
        suffix = f" error={first_line!r}" if first_line else ""
        if outcome is Outcome.DEAD:
            suffix = f" moved_to=dead_letters{suffix}"
        elif outcome is Outcome.RETRY and next_attempt_in is not None:
            suffix = f" next_attempt_in={next_attempt_in:.3f}s{suffix}"
        logger.log(
            level,
            "job %s id=%s attempt=%s/%s duration=%.3fs outcome=%s%s",
            job.name,
            job.pk,
            job.attempts,
            job.max_attempts,
            duration,
            outcome,
            suffix,
        )


def _what_next(job: Job) -> str:
    """For an unknown name's error: whether the job is tried again."""
    if job.attempts < job.max_attempts:
        return "retried later: a newer deploy may have it"
    return "no attempts left: moved to the dead letters"
