"""A coroutine job as the watchdog sees it: a task of the loop, stopped by cancelling it.

Whatever the reason (its time limit, a cancel, a lost claim, the worker's
shutdown) the job's task is cancelled at once: ``asyncio.CancelledError`` is
raised where it awaits, and its ``finally`` blocks run. Still running
``--cancel-grace`` seconds later, it caught the cancel and went on (or it
blocks the loop): that is logged, a timed-out job is given up (its outcome
written, ``executor.give_up``), any other is cancelled once more. Either way
its slot stays taken until its code returns.
"""

from __future__ import annotations

import asyncio
import logging

from ...run.control import RunControl, StopReason

logger = logging.getLogger(__name__)


class TaskTarget:
    """A coroutine job running as ``task`` on ``loop``, under ``control``.

    The task is cancelled only while the job's own code runs (until
    ``leave``), so that a cancel can never land in the worker's writing of
    its outcome. Every call but ``tell`` and ``force`` is made on the loop.
    """

    def __init__(
        self, loop: asyncio.AbstractEventLoop, task: asyncio.Task[object], control: RunControl
    ) -> None:
        self._loop = loop
        self._task = task
        self._control = control
        self._inside = True

    def leave(self) -> None:
        """The job's code returned: cancel it no more, and forget the cancels it was sent."""
        self._inside = False
        task = self._task
        while task.cancelling():
            task.uncancel()

    def tell(self, reason: StopReason) -> None:
        self._cancel_soon(reason)

    def force(self, reason: StopReason) -> bool:
        if not self._inside:
            return False  # it is being written: the slot settles it
        job = self._control.job
        logger.warning(
            "job %s id=%s attempt=%s: still running %gs after it was cancelled (%s): it caught "
            "asyncio.CancelledError and went on, or it blocks the event loop; its slot stays taken "
            "until it returns",
            job.name,
            job.pk,
            job.attempts,
            self._control.grace,
            reason,
        )
        if reason is StopReason.TIMEOUT:
            return True  # given up: its timeout is written now
        self._cancel_soon(reason)
        return False

    def _cancel_soon(self, reason: StopReason) -> None:
        # From the watchdog's threads, or from the loop itself (a job told to stop before it began).
        try:
            self._loop.call_soon_threadsafe(self._cancel, reason)
        except RuntimeError:
            pass  # the loop is closed: the worker has stopped, and the task with it

    def _cancel(self, reason: StopReason) -> None:
        if self._inside:
            self._task.cancel(f"django_jobqueue: {reason}")
