"""``--pool processes``: each slot runs its jobs in a child process of its own.

The worker process keeps everything that touches claims: the claiming loop,
the heartbeat, the acks (through the completer), the watchdog. A slot's thread
sends its child a batch of jobs in one message, then waits for each job's
answer in turn, as the child runs them one at a time (``child.py``), and runs
each through the executor as for a single job: CPU-bound jobs use every core,
short jobs cost no round trip each, and a job that must be stopped by force
can be: its child is killed and a fresh one takes the slot. A job that runs
long (``LOOK_MS``) gives the jobs behind it back to the slots; a signal hands
them back to the queue.

Children are forked from a fork server that set Django up once
(``preload.py``), so a new one is ready in milliseconds. A child is replaced
between batches when it ran ``--max-jobs-per-child`` jobs (a batch never
takes it past them), when its resident memory passed
``--max-memory-per-child`` MB, when a job in it was interrupted or timed out
(its state may be anything), and when it died.
"""

from __future__ import annotations

import logging
import signal
import threading
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC
from typing import Any

from ....models import Job
from ....queue.rows import JOB_FIELDS
from ...run.control import RunControl, StopReason
from ...run.outcomes import Action, Attempt, Verdict
from ...run.progress import ProgressReport
from .pipes import (
    DONE,
    EXACT_TIMESTAMPS,
    NOTE,
    REVOKE,
    SKIPPED,
    STOP,
    Claim,
    Messages,
    datetime_indexes,
)

logger = logging.getLogger(__name__)

# Imported by the fork server: its import sets Django up there, once.
FORK_SERVER_MODULE = "django_jobqueue.worker.pools.processes.boot"
# Seconds a new child may take to say it is ready (a fork server's first start sets Django up).
START_TIMEOUT = 120.0
# Seconds a child told to exit between jobs gets before it is killed.
RETIRE_TIMEOUT = 5.0
MB = 1024 * 1024
# Milliseconds a child's job may run before the worker looks again at the rest of its batch: a job
# that runs this long is no short one, and the jobs behind it go to other slots (or are handed back
# once the worker is signalled) rather than wait for it.
LOOK_MS = 100
# Each Job field's name, in the order job_values sends their values and the child rebuilds them.
_ATTNAMES = [field.attname for field in JOB_FIELDS]
_DATETIME_INDEXES = datetime_indexes(JOB_FIELDS)
# The answer of a job the child skipped.
_SKIPPED = object()
# The verdict of most answers (frozen: shared).
_ACKED = Verdict(Action.ACK)


class ChildStartError(RuntimeError):
    """A child process could not start: its error, as the child reported it."""


@dataclass(frozen=True)
class ChildLimits:
    """When a child is replaced between jobs (None: never for that reason)."""

    max_jobs: int | None = None
    max_memory_mb: int | None = None


def pool_context() -> Any:
    """The multiprocessing context children start from: a fork server.

    Raise ``ChildStartError`` where there is none (Windows): children are
    also interrupted with ``SIGUSR1``, which only POSIX systems have.
    """
    # multiprocessing is imported here, and in Child, rather than with this module: once it is
    # imported, every log record looks up the current process's name (logging.logMultiprocessing),
    # a cost on each job's line that a thread pool's worker would pay for nothing.
    import multiprocessing

    if "forkserver" not in multiprocessing.get_all_start_methods() or not hasattr(signal, "SIGUSR1"):
        raise ChildStartError("--pool processes needs a POSIX system (Linux, macOS): use --pool threads")
    context = multiprocessing.get_context("forkserver")
    context.set_forkserver_preload([FORK_SERVER_MODULE])
    return context


class ChildTarget:
    """A job running in a child: told to stop through its control pipe, stopped by force with a kill."""

    def __init__(self, child: Child, claim: Claim) -> None:
        self.child = child
        self.claim = claim

    def tell(self, reason: StopReason) -> None:
        self.child.tell(self.claim, reason)

    def force(self, reason: StopReason) -> bool:
        self.child.kill(f"{reason}: still running after --cancel-grace")
        return False


def job_values(job: Job) -> list[Any]:
    """What travels to the child for ``job``: its fields' values, in ``queue.rows``' order.

    Its datetimes in UTC go as POSIX timestamps (``child.job_from_values``
    turns them back): a float pickles in a sixth of a datetime's time, and
    up to ``EXACT_TIMESTAMPS`` it comes back to the same microsecond.
    """
    fields = job.__dict__
    try:
        values = [fields[name] for name in _ATTNAMES]
    except KeyError:  # a deferred field: not from a claim, but still a Job
        values = [getattr(job, name) for name in _ATTNAMES]
    for index in _DATETIME_INDEXES:
        value = values[index]
        if value is not None and value.tzinfo is UTC and 0 <= (stamp := value.timestamp()) < EXACT_TIMESTAMPS:
            values[index] = stamp
    return values


class Child:
    """One slot's child process, as the worker sees it; also the slot's ``Runner``.

    The slot sends it a batch (``send``), then runs each job of the batch
    through the executor, in order, as for any ``Runner``: ``attempt`` waits
    for that job's answer, which the child sends as soon as the job ends.
    """

    def __init__(
        self,
        name: str,
        worker_id: str,
        using: str,
        verbosity: int,
        limits: ChildLimits,
        signalled: threading.Event | None = None,
    ) -> None:
        self.name = name
        self.worker_id = worker_id
        self.using = using
        self.verbosity = verbosity
        self.limits = limits
        self.signalled = signalled  # the worker was signalled: revoke what the child has not started
        self.pid: int | None = None
        self.jobs_run = 0
        self.resident = 0  # bytes, after its last job
        self.killed_for = ""  # why the worker killed it, if it did
        self.spoiled = ""  # why it must not run another batch, if so
        # Told how long each job ran in the child (prefetch.Depth.note).
        self.on_seconds: Callable[[float], None] | None = None
        # Takes a job of the batch that the child skipped: for another slot, or handed back at once.
        self.on_unstarted: Callable[[Job], None] | None = None
        # Called once a batch when the worker was signalled (the slots hand back the jobs waiting).
        self.on_signalled: Callable[[], None] | None = None
        self._process: Any = None
        self._jobs: Any = None
        self._control: Any = None
        self._control_lock = threading.Lock()
        self._messages: Messages | None = None
        # The batch: its jobs not answered yet, in order; those the child skipped; those handed back.
        self._unanswered: dict[Claim, Job] = {}
        self._skipped: set[Claim] = set()
        self._taken_back: set[Claim] = set()
        self._awaited: Claim | None = None  # the job whose answer the slot waits for
        self._revoked = False  # the jobs behind the awaited one were revoked: it ran long
        self._signal_seen = False
        self._gone = ""  # why the rest of the batch cannot run: the child died or could not be sent it

    def start(self) -> None:
        """Start the process and wait until it is ready; raise ``ChildStartError`` if it is not."""
        from multiprocessing.connection import wait

        from .child import main

        context = pool_context()
        self._jobs, child_jobs = context.Pipe()
        child_control, self._control = context.Pipe(duplex=False)
        self._process = context.Process(
            target=main,
            args=(child_jobs, child_control, self.worker_id, self.using, self.verbosity),
            name=self.name,
            daemon=True,
        )
        self._process.start()
        child_jobs.close()
        child_control.close()
        ready = wait([self._jobs, self._process.sentinel], timeout=START_TIMEOUT)
        if self._jobs not in ready:
            self.kill("did not start")
            raise ChildStartError(f"child {self.name} did not start within {START_TIMEOUT:g}s")
        try:
            kind, detail = self._jobs.recv()
        except (EOFError, OSError):
            self._process.join(RETIRE_TIMEOUT)
            status = self._exit_status()
            raise ChildStartError(f"child {self.name} exited while starting ({status})") from None
        if kind != "ready":
            self._process.join(RETIRE_TIMEOUT)
            raise ChildStartError(f"child {self.name} could not start: {detail}")
        self.pid = detail
        self._messages = Messages(self._jobs, self._process.sentinel)

    def send(self, jobs: list[Job]) -> None:
        """Send ``jobs`` to the child in one message; ``attempt`` then waits for each one's answer."""
        # Known before they are sent, so that a revoke covers them all.
        self._unanswered = {(job.pk, job.claim_token): job for job in jobs}
        self._skipped = set()
        self._taken_back = set()
        self._revoked = False
        self._signal_seen = False
        self._gone = ""
        try:
            self._jobs.send([job_values(job) for job in jobs])
        except (OSError, ValueError) as exc:
            # The child died between batches: none of these started, so they are handed back,
            # their attempts not counted, and the slot gets a new child.
            self.spoiled = f"it exited ({self._exit_status()})"
            self._gone = f"child process {self.pid} was gone before the job was sent ({exc})"

    def taken_back(self, job: Job) -> bool:
        """Whether ``job`` of the batch was skipped by the child and taken back (``on_unstarted``)."""
        return (job.pk, job.claim_token) in self._taken_back

    def attempt(self, job: Job, control: RunControl, report: ProgressReport) -> Attempt:
        """Wait for ``job``'s answer (its batch was sent); return its attempt, or one that says why none came.

        The job's ``ctx.progress()`` reports, as the child sends them, go to ``report``.
        """
        claim = control.claim
        if self._gone or claim in self._skipped:
            # It never started: handed back, its attempt not counted.
            self._unanswered.pop(claim, None)
            return Attempt(Verdict(Action.NACK, error=self._gone or "its child skipped it"), unsent=True)
        control.attach(ChildTarget(self, claim))
        message = self._answer(claim, report)
        self._unanswered.pop(claim, None)
        if message is None:
            return self._died()
        if message is _SKIPPED:
            return Attempt(Verdict(Action.NACK, error="its child skipped it"), unsent=True)
        if message[0] == DONE:
            _kind, result, rss, seconds = message
            attempt = Attempt(_ACKED if result is None else Verdict(Action.ACK, result=result))
        else:
            _kind, answer, seconds = message
            rss, attempt = answer.rss, answer.attempt
            if answer.progress is not None:
                report(answer.progress)
        self.jobs_run += 1
        self.resident = rss
        if self.on_seconds is not None:
            self.on_seconds(seconds)
        if control.reason is StopReason.TIMEOUT:
            self.spoiled = "a job in it timed out"
        if job.task_backend:
            attempt.task_run = _task_run(job)
        return attempt

    def _answer(self, claim: Claim, report: ProgressReport) -> Any:
        """The child's answer to the job of ``claim``, its progress notes passed to ``report`` meanwhile.

        ``_SKIPPED`` if the child skipped it, None if the child died first.
        """
        while True:
            message = self._next_message(claim)
            if message is None:
                return None
            kind = message[0]
            if kind == NOTE:
                report(message[1])  # kept in memory: the progress writer's thread writes it
            elif kind == SKIPPED:
                if self._skipped_now(claim, message[1]):
                    return _SKIPPED
            else:
                return message

    def _next_message(self, claim: Claim) -> Any:
        """The child's next message, waited for while ``claim``'s job runs; None if the child died first."""
        assert self._messages is not None  # started
        self._awaited = claim
        return self._messages.next(LOOK_MS, self._ran_long)

    def _skipped_now(self, claim: Claim, skipped: list[Claim]) -> bool:
        """Take back at once the jobs the child says it skipped; True if the awaited ``claim`` is one."""
        self._skipped.update(skipped)
        awaited = False
        for each in skipped:
            if each == claim:
                awaited = True  # handed back by the executor, as the answer to its attempt
                continue
            job = self._unanswered.pop(each, None)
            if job is not None and self.on_unstarted is not None:
                self._taken_back.add(each)
                self.on_unstarted(job)
        return awaited

    def _ran_long(self) -> None:
        """The awaited job ran ``LOOK_MS`` more: revoke the jobs behind it; all of them once signalled.

        The child reports those it has not started (``SKIPPED``), which the
        slot gives to other slots, or hands back once the worker is signalled.
        """
        if self.signalled is not None and self.signalled.is_set() and not self._signal_seen:
            self._signal_seen = True
            if self.on_signalled is not None:
                self.on_signalled()
            self._revoke(list(self._unanswered))
        elif not self._revoked:
            self._revoked = True
            if self.on_seconds is not None:
                self.on_seconds(LOOK_MS / 1000)  # a long job: no more prefetching for now
            self._revoke([claim for claim in self._unanswered if claim != self._awaited])

    def _revoke(self, claims: list[Claim]) -> None:
        if not claims:
            return
        with self._control_lock:
            try:
                self._control.send((REVOKE, claims))
            except (OSError, ValueError):
                pass  # the child is gone: its death ends the wait

    def tell(self, claim: Claim, reason: StopReason) -> None:
        """Tell the job of ``claim``, if it runs in the child or has yet to, to stop for ``reason``."""
        with self._control_lock:
            try:
                self._control.send((STOP, claim, str(reason)))
            except (OSError, ValueError):
                pass  # the child is gone: nothing runs to tell

    def kill(self, why: str) -> None:
        """Kill the child at once (SIGKILL): its job's effects stop wherever they were."""
        if self._process is not None and self._process.exitcode is None:
            self.killed_for = why
            self._process.kill()

    def worn_out(self) -> str:
        """Why the child must be replaced before its next batch, or ""."""
        if self.spoiled:
            return self.spoiled
        if self._process is None or not self._process.is_alive():
            return "it exited"
        if self.limits.max_jobs is not None and self.jobs_run >= self.limits.max_jobs:
            return f"it ran {self.jobs_run} jobs (--max-jobs-per-child {self.limits.max_jobs})"
        if self.limits.max_memory_mb is not None and self.resident > self.limits.max_memory_mb * MB:
            return (
                f"its resident memory is {self.resident / MB:.0f} MB "
                f"(--max-memory-per-child {self.limits.max_memory_mb})"
            )
        return ""

    def jobs_left(self) -> int | None:
        """How many more jobs the child may run (``--max-jobs-per-child``); None: no limit."""
        if self.limits.max_jobs is None:
            return None
        return max(0, self.limits.max_jobs - self.jobs_run)

    def retire(self) -> None:
        """Let the child exit between batches (killed if it does not within a few seconds)."""
        if self._process is None:
            return
        try:
            self._jobs.send(None)
        except (OSError, ValueError):
            pass
        self._process.join(RETIRE_TIMEOUT)
        if self._process.exitcode is None:
            self.kill("did not exit when retired")
            self._process.join(RETIRE_TIMEOUT)
        self._close()

    def _died(self, how: str = "") -> Attempt:
        self._process.join(RETIRE_TIMEOUT)
        status = how or self._exit_status()
        self.spoiled = f"it died ({status})"
        died = f"its child process {self.pid} {status}" if not self.killed_for else self.killed_for
        # The child ran its batch in order: the jobs after this one never started.
        self._gone = f"child process died before the job started: {died}"
        return Attempt(Verdict(Action.NACK, error=f"child process died: {died}"), died=died)

    def _exit_status(self) -> str:
        code = self._process.exitcode if self._process is not None else None
        if code is None:
            return "is still running"
        if code < 0:
            return f"was killed by signal {-code}"
        return f"exited with status {code}"

    def _close(self) -> None:
        for end in (self._jobs, self._control):
            if end is not None:
                end.close()
        if self._process is not None and self._process.exitcode is not None:
            self._process.close()
        self._process = None


def _task_run(job: Job) -> Any:
    """The parent's ``TaskRun`` of a Django Task job, for the signals that follow its outcome."""
    from ...run.tasks import TaskRun

    try:
        return TaskRun(job)
    except Exception:
        return None  # the child found no Task either: its verdict says so
