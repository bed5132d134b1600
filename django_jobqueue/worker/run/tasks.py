"""Run one job of Django's Tasks framework: find its ``Task``, call it, send the Tasks signals.

Imported by the executor only when it meets a job marked as a task, so a
worker runs ``@job`` jobs whether or not the Tasks framework is installed.
The outcome table stays the executor's: what the task returns or raises is
acked, retried or dead-lettered like any job's.

Signals, sent with the backend class as sender: ``task_started`` before each
attempt runs; ``task_finished`` once the outcome is final and recorded by this
worker (``SUCCESSFUL``, or ``FAILED`` when the job went to the dead letters).
An attempt that will be retried finishes nothing: its task is ``READY`` again.
"""

from __future__ import annotations

import logging
from typing import Any

from django.dispatch import Signal
from django.utils import timezone

from ...models import Job
from ...tasks.backend import JobQueueBackend
from ...tasks.compat import TaskContext, TaskResultStatus, normalize_json, task_finished, task_started
from ...tasks.rows import resolve_task, result_from_job, task_error, task_for_row
from .outcomes import Outcome

logger = logging.getLogger(__name__)


class TaskRun:
    """One attempt of a task job that a worker claimed.

    Raise ``UnknownJobError`` (retried) or ``Fail`` (dead letter now) if the
    job's module path does not lead to a ``Task``: then nothing is called.
    """

    def __init__(self, job: Job) -> None:
        self.task = task_for_row(job, resolve_task(job.name))
        # As claimed: RUNNING, one worker id per attempt so far (so context.attempt is right).
        self.result = result_from_job(job, self.task)

    def call(self) -> Any:
        """Run the task function (a coroutine function in an event loop of its own); return its value."""
        self._send(task_started)
        args, kwargs = self.result.args, self.result.kwargs
        if self.task.takes_context:
            return self.task.call(TaskContext(task_result=self.result), *args, **kwargs)
        return self.task.call(*args, **kwargs)

    async def acall(self) -> Any:
        """Await the task function (a coroutine function, on the worker's loop); return its value.

        The signal's receivers run as Django runs sync receivers from async
        code (``asend_robust``): off the loop.
        """
        await self._asend(task_started)
        args, kwargs = self.result.args, self.result.kwargs
        if self.task.takes_context:
            return await self.task.acall(TaskContext(task_result=self.result), *args, **kwargs)
        return await self.task.acall(*args, **kwargs)

    @staticmethod
    def normalize(value: Any) -> Any:
        """``value`` as Django's Tasks store a return value; raise ``TypeError`` if JSON cannot carry it.

        Apart from ``call`` so that the executor tells a task that failed from
        one that ran and returned a value it cannot keep (never retried).
        """
        return normalize_json(value)

    def finish(self, outcome: Outcome, result: Any, error: str, traceback: str) -> None:
        """Send ``task_finished`` if ``outcome`` (the executor's) is final."""
        if outcome is Outcome.DONE:
            status = TaskResultStatus.SUCCESSFUL
            object.__setattr__(self.result, "_return_value", result)  # TaskResult is frozen
        elif outcome is Outcome.DEAD:
            status = TaskResultStatus.FAILED
            self.result.errors.append(task_error(error, traceback))
        else:
            return  # retried, or the claim was lost: another attempt decides
        object.__setattr__(self.result, "status", status)
        # The worker's clock; the row's finished_at is the database's.
        object.__setattr__(self.result, "finished_at", timezone.now())
        self._send(task_finished)

    def _send(self, signal: Signal) -> None:
        # A receiver that raises must not change the task's outcome: logged, not raised.
        self._log_raised(signal.send_robust(JobQueueBackend, task_result=self.result))

    async def _asend(self, signal: Signal) -> None:
        self._log_raised(await signal.asend_robust(JobQueueBackend, task_result=self.result))

    def _log_raised(self, responses: list[tuple[Any, Any]]) -> None:
        for receiver, response in responses:
            if isinstance(response, Exception):
                logger.error(
                    "task %s id=%s: signal receiver %r raised %s: %s",
                    self.task.module_path,
                    self.result.id,
                    receiver,
                    type(response).__name__,
                    response,
                )
