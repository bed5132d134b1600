"""Stopping a running job: why it was told to stop, and how it is told.

Every attempt a worker runs has a ``RunControl``: its deadline (from the job's
``timeout``), and once the job must stop, the reason. The watchdog
(``watchdog.py``) decides when; the control tells the job through its
``Target``, which depends on the pool:

- **threads**: ``ctx.cancelled`` turns True; on a timeout, ``JobTimeout`` is
  also raised in the job's thread at its next line (an ``async def`` job's
  task is cancelled instead: ``asyncio.CancelledError`` where it awaits). Still running
  ``--cancel-grace`` seconds later: a cancelled job gets ``JobCancelled``
  raised; a timed-out one is given up: its outcome is written and its slot
  stays taken until the thread returns.
- **processes**: the child's ``ctx.cancelled`` turns True; on a timeout,
  ``JobTimeout`` is also raised in it, even inside a ``sleep``. Still running
  ``--cancel-grace`` seconds later: the child is killed and a new one takes
  the slot.

The first reason wins, and nothing is told once the attempt's outcome is
settled: the slot's own settling and the watchdog's giving up go through one
lock, so exactly one of them writes the outcome.
"""

from __future__ import annotations

import asyncio
import ctypes
import enum
import threading
import time
from typing import TYPE_CHECKING, Any, Protocol

from ...exceptions import JobCancelled, JobInterrupted, JobTimeout
from .outcomes import Outcome

if TYPE_CHECKING:
    from ...models import Job
    from .pending import PendingProgress


class StopReason(enum.StrEnum):
    """Why a running job was told to stop."""

    TIMEOUT = "timeout"  # it ran past its timeout: a failure, retried with backoff
    CANCELLED = "cancelled"  # an operator cancelled it: nothing more is written
    LOST = "lost"  # its claim is no longer this worker's (expired and re-claimed)
    SHUTDOWN = "shutdown"  # the worker stopped and handed its claim back


# What a job told to stop for each reason gets raised, where the pool can raise one.
RAISED = {StopReason.TIMEOUT: JobTimeout}
FORCED = {
    StopReason.CANCELLED: JobCancelled,
    StopReason.LOST: JobCancelled,
    StopReason.SHUTDOWN: JobCancelled,
}


class Target(Protocol):
    """Where a job runs, as far as stopping it goes: a slot's thread, or a child process."""

    def tell(self, reason: StopReason) -> None:
        """The job must stop: let it know (and interrupt it, where the pool does so at once)."""

    def force(self, reason: StopReason) -> bool:
        """The job did not stop in time: stop it by force. Return True if it cannot be, and still runs."""


class RunControl:
    """One attempt in progress: its deadline, and why and when it was told to stop."""

    def __init__(self, job: Job, timeout: float | None, grace: float) -> None:
        self.job = job
        # The attempt's key in the worker's maps, read about five times a job: computed once
        # (``job.pk`` is a property of Django's).
        self.claim: tuple[int, int] = (job.pk, job.claim_token)
        self.timeout = timeout
        self.started = time.monotonic()
        self.deadline = None if timeout is None else self.started + timeout
        self.grace = grace
        self.reason: StopReason | None = None
        self.stopped_at = 0.0
        self.forced = False
        # Who wrote the outcome: "" while nobody has, "slot", or "watchdog" for a thread given up.
        self.settled_by = ""
        self.settled_at = 0.0  # when, on the monotonic clock
        self.outcome = Outcome.PENDING  # what the watchdog wrote, when it gave the attempt up
        # What the job reported through ctx.progress(), from its first report on (progress.py).
        self.progress: PendingProgress | None = None
        self._target: Target | None = None
        self._lock = threading.Lock()

    @property
    def stopping(self) -> bool:
        """Whether the job was told to stop: what ``ctx.cancelled`` reads."""
        return self.reason is not None

    def attach(self, target: Target) -> None:
        """Run the job on ``target``; a job told to stop before it started is told at once."""
        with self._lock:
            self._target = target
            reason = self.reason if not self.settled_by else None
        if reason is not None:
            target.tell(reason)

    def stop(self, reason: StopReason) -> bool:
        """Tell the job to stop for ``reason``; False if it already was, or its outcome is settled."""
        with self._lock:
            if self.reason is not None or self.settled_by:
                return False
            self.reason = reason
            self.stopped_at = time.monotonic()
            target = self._target
        if target is not None:
            target.tell(reason)
        return True

    def due(self) -> float | None:
        """The monotonic time the watchdog must next act on this attempt, or None."""
        if self.settled_by or self.forced:
            return None
        if self.reason is None:
            return self.deadline
        return self.stopped_at + self.grace

    def force(self) -> bool:
        """The grace is over: stop the job by force. Return True if it still runs and cannot be stopped."""
        with self._lock:
            if self.settled_by or self.forced or self.reason is None:
                return False
            self.forced = True
            target, reason = self._target, self.reason
        return target is not None and target.force(reason)

    def settle_if_running(self, by: str) -> bool:
        """Claim the writing of the outcome if nobody has and the job was never told to stop."""
        with self._lock:
            if self.settled_by or self.reason is not None:
                return False
            self.settled_by = by
            self.settled_at = time.monotonic()
            return True

    def settle(self, by: str) -> tuple[bool, StopReason | None]:
        """Claim the writing of the outcome: (whether ``by`` is the first, and why the job was stopped)."""
        with self._lock:
            first = not self.settled_by
            if first:
                self.settled_by = by
                self.settled_at = time.monotonic()
            return first, self.reason


class TaskOwner(Protocol):
    """What stops the job's code that a thread runs: told of the task an ``async def`` job runs as."""

    def adopt(self, loop: asyncio.AbstractEventLoop, task: asyncio.Task[Any]) -> None: ...


# The owner of the job's code each thread runs now (a slot's ThreadTarget, a child's), while it does.
_running_here = threading.local()


def running_here(owner: TaskOwner | None) -> None:
    """This thread runs the job's code under ``owner`` now (None: no longer)."""
    _running_here.owner = owner


def owner_here() -> TaskOwner | None:
    """The owner of the job's code this thread runs now, if any."""
    return getattr(_running_here, "owner", None)


def _set_async_exc(thread_id: int, exc_type: type[BaseException] | None) -> None:
    # CPython's documented C API: raise exc_type in that thread at its next bytecode; None drops
    # an exception set so and not yet raised.
    ctypes.pythonapi.PyThreadState_SetAsyncExc(
        ctypes.c_ulong(thread_id), ctypes.py_object(exc_type) if exc_type is not None else None
    )


class ThreadTarget:
    """A job running in a slot's own thread (the thread pool).

    An exception is raised in the thread only while it runs the job's code
    (between ``enter`` and ``leave``), and at most once: ``leave`` drops one
    that was set but not yet raised, so it can never surface in the worker's
    own code after the job returned. What the thread runs outside Python (a
    ``sleep``, a socket read, a C extension's loop) sees it only once that
    call returns.
    """

    def __init__(self) -> None:
        self.thread_id = threading.get_ident()
        self._lock = threading.Lock()
        self._inside = False
        self._sent = False
        # The task of an ``async def`` job this thread awaits (attempt.run_to_end), and its loop.
        self._task: tuple[asyncio.AbstractEventLoop, asyncio.Task[Any]] | None = None

    def adopt(self, loop: asyncio.AbstractEventLoop, task: asyncio.Task[Any]) -> None:
        """The job's code is a coroutine awaited as ``task`` of ``loop``: stop it by cancelling the task.

        The thread itself only waits for the task (asgiref's ``async_to_sync``);
        an exception raised in it would leave the coroutine running.
        """
        with self._lock:
            self._task = (loop, task)

    @property
    def sent(self) -> bool:
        """Whether an exception was raised (or set to be raised) in the job."""
        return self._sent

    def enter(self) -> None:
        with self._lock:
            self._inside = True
        running_here(self)

    def leave(self) -> None:
        running_here(None)
        with self._lock:
            self._inside = False
            if self._sent and self._task is None:
                _set_async_exc(self.thread_id, None)

    def __enter__(self) -> ThreadTarget:
        self.enter()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.leave()

    def raise_in_job(self, exc_type: type[JobInterrupted]) -> bool:
        """Raise ``exc_type`` in the job's thread; False if it left the job's code or was already sent one."""
        with self._lock:
            if not self._inside or self._sent:
                return False
            self._sent = True
            if self._task is None:
                _set_async_exc(self.thread_id, exc_type)
                return True
            loop, task = self._task
        try:
            loop.call_soon_threadsafe(task.cancel, f"django_jobqueue: {exc_type.__name__}")
        except RuntimeError:
            pass  # its loop is closed: the coroutine has ended
        return True

    def tell(self, reason: StopReason) -> None:
        raised = RAISED.get(reason)
        if raised is not None:
            self.raise_in_job(raised)

    def force(self, reason: StopReason) -> bool:
        if reason is StopReason.TIMEOUT:
            # Raised at the deadline and still running: the thread is stuck outside Python.
            return True
        self.raise_in_job(FORCED[reason])
        return False
