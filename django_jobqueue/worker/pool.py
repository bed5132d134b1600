"""``--pool processes``: each slot runs its jobs in a child process of its own.

The worker process keeps everything that touches claims: the claiming loop,
the heartbeat, the acks (through the completer), the watchdog. A slot's thread
sends its child one job at a time and waits for the verdict (``child.py``), so
CPU-bound jobs use every core, and a job that must be stopped by force can be:
its child is killed and a fresh one takes the slot.

Children are forked from a fork server that set Django up once
(``preload.py``), so a new one is ready in milliseconds. A child is replaced
between jobs when it ran ``--max-jobs-per-child`` jobs, when its resident
memory passed ``--max-memory-per-child`` MB, when a job in it was interrupted
or timed out (its state may be anything), and when it died.
"""

from __future__ import annotations

import logging
import signal
import threading
from dataclasses import dataclass
from typing import Any

from ..models import Job
from .attempt import Attempt, Verdict
from .control import RunControl, StopReason
from .outcomes import Action
from .progress import ProgressReport

logger = logging.getLogger(__name__)

# Imported by the fork server: its import sets Django up there, once.
FORK_SERVER_MODULE = "django_jobqueue.worker.boot"
# Seconds a new child may take to say it is ready (a fork server's first start sets Django up).
START_TIMEOUT = 120.0
# Seconds a child told to exit between jobs gets before it is killed.
RETIRE_TIMEOUT = 5.0
MB = 1024 * 1024


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

    def __init__(self, child: Child, claim: tuple[int, int]) -> None:
        self.child = child
        self.claim = claim

    def tell(self, reason: StopReason) -> None:
        self.child.tell(self.claim, reason)

    def force(self, reason: StopReason) -> bool:
        self.child.kill(f"{reason}: still running after --cancel-grace")
        return False


class Child:
    """One slot's child process, as the worker sees it; also the slot's ``Runner``."""

    def __init__(self, name: str, worker_id: str, using: str, verbosity: int, limits: ChildLimits) -> None:
        self.name = name
        self.worker_id = worker_id
        self.using = using
        self.verbosity = verbosity
        self.limits = limits
        self.pid: int | None = None
        self.jobs_run = 0
        self.resident = 0  # bytes, after its last job
        self.killed_for = ""  # why the worker killed it, if it did
        self.spoiled = ""  # why it must not run another job, if so
        self._process: Any = None
        self._jobs: Any = None
        self._control: Any = None
        self._control_lock = threading.Lock()

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

    def attempt(self, job: Job, control: RunControl, report: ProgressReport) -> Attempt:
        """Run ``job`` in the child; return its attempt, or one that says the child died.

        The job's ``ctx.progress()`` reports, as the child sends them, go to ``report``.
        """
        try:
            self._jobs.send(job)
        except (OSError, ValueError) as exc:
            # The child died between jobs: this one never started, so it is handed back, its
            # attempt not counted, and the slot gets a new child.
            self.spoiled = f"it exited ({self._exit_status()})"
            error = f"child process {self.pid} was gone before the job was sent ({exc})"
            return Attempt(Verdict(Action.NACK, error=error), unsent=True)
        control.attach(ChildTarget(self, control.claim))
        answer = self._answer(report)
        if answer is None:
            return self._died()
        if answer.progress is not None:
            report(answer.progress)
        self.jobs_run += 1
        self.resident = answer.rss
        if control.reason is StopReason.TIMEOUT:
            self.spoiled = "a job in it timed out"
        attempt: Attempt = answer.attempt
        if job.task_backend:
            attempt.task_run = _task_run(job)
        return attempt

    def _answer(self, report: ProgressReport) -> Any:
        """The child's ``Answer`` to the job sent, its progress notes passed to ``report`` meanwhile.

        None if the child died first.
        """
        from multiprocessing.connection import wait

        from .child import ProgressNote

        while True:
            ready = wait([self._jobs, self._process.sentinel])
            if self._jobs not in ready:
                return None
            try:
                message = self._jobs.recv()
            except (EOFError, OSError):
                return None
            if not isinstance(message, ProgressNote):
                return message
            report(message.value)  # kept in memory: the progress writer's thread writes it

    def tell(self, claim: tuple[int, int], reason: StopReason) -> None:
        """Tell the job of ``claim``, if it still runs in the child, to stop for ``reason``."""
        with self._control_lock:
            try:
                self._control.send((claim, str(reason)))
            except (OSError, ValueError):
                pass  # the child is gone: nothing runs to tell

    def kill(self, why: str) -> None:
        """Kill the child at once (SIGKILL): its job's effects stop wherever they were."""
        if self._process is not None and self._process.exitcode is None:
            self.killed_for = why
            self._process.kill()

    def worn_out(self) -> str:
        """Why the child must be replaced before its next job, or ""."""
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

    def retire(self) -> None:
        """Let the child exit between jobs (killed if it does not within a few seconds)."""
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
    from .tasks import TaskRun

    try:
        return TaskRun(job)
    except Exception:
        return None  # the child found no Task either: its verdict says so
