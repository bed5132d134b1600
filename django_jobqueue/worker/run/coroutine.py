"""Run a coroutine job's code as a task of the worker's event loop (``--pool asyncio``).

The async twin of ``attempt.run_job``: the same outcome table (``attempt.py``)
for what the job returns or raises, the same span (``tracing.py``), its
function found the same way; only the call is awaited. It never touches the
database: the pool writes the outcome from a thread (``pools/loop/``).

A job told to stop (its time limit, a cancel, a lost claim, the worker's
shutdown) has its task cancelled: ``asyncio.CancelledError`` is raised where
it awaits, its ``finally`` blocks run, and whatever it then raises or returns
ends the attempt as the stop decides (``executor.py``).
"""

from __future__ import annotations

import asyncio

from asgiref.sync import iscoroutinefunction

from ... import registry
from ...exceptions import JobCancelled, JobTimeout
from ...models import Job
from ...queue import QueueClient
from .attempt import call_job, raised_attempt, returned_attempt, spec_of
from .context import JobContext
from .control import RunControl, StopReason
from .outcomes import Attempt
from .progress import ProgressReport
from .tracing import traced_arun


def is_coroutine_job(job: Job) -> bool:
    """Whether ``job``'s function (or Django Task) is a coroutine function: a task of the loop.

    A name nobody registered, or a Task path that leads nowhere, is not: it
    goes to the pool's threads, which fail it as any worker does.
    """
    if job.task_backend:
        try:
            from ...tasks.rows import resolve_task

            return iscoroutinefunction(resolve_task(job.name).func)
        except Exception:  # noqa: BLE001 - the thread that runs it reports why it cannot be found
            return False
    spec = registry.lookup(job.name)
    # An atomic spec (refused by @job for a coroutine, but registered by hand) runs where its
    # transaction can: in a thread.
    return spec is not None and not spec.atomic and iscoroutinefunction(spec.func)


async def run_coroutine_job(
    job: Job, worker_id: str, client: QueueClient, control: RunControl, report: ProgressReport
) -> Attempt:
    """Await ``job``'s coroutine with its payload; return what the attempt comes to, never raise."""
    return await traced_arun(job, lambda: _attempt(job, worker_id, client, control, report))


async def _attempt(
    job: Job, worker_id: str, client: QueueClient, control: RunControl, report: ProgressReport
) -> Attempt:
    task_run = None
    spec = None
    try:
        if job.task_backend:
            from .tasks import TaskRun

            task_run = TaskRun(job)
            result = await task_run.acall()
        else:
            spec = spec_of(job, worker_id)
            context = lambda: JobContext(job, worker_id, client, lambda: control.stopping, report)  # noqa: E731
            result = await call_job(job, spec, context)
    except BaseException as exc:  # noqa: B036 - the outcome table: nothing a job raises escapes
        return raised_attempt(job, spec, task_run, _as_stopped(exc, control))
    return returned_attempt(job, task_run, result)


def _as_stopped(exc: BaseException, control: RunControl) -> BaseException:
    """``exc``, or the stop it stands for: the ``CancelledError`` of a job the worker told to stop.

    A timed-out job then counts as timed out in its span and its history, as
    in the other pools, where ``JobTimeout`` is raised in the job itself.
    """
    reason = control.reason
    if not isinstance(exc, asyncio.CancelledError) or reason is None:
        return exc
    stopped: BaseException
    if reason is StopReason.TIMEOUT:
        stopped = JobTimeout(f"timed out after {control.timeout:g} s")
    else:
        stopped = JobCancelled(str(reason))
    stopped.__traceback__ = exc.__traceback__
    stopped.__cause__ = exc
    return stopped
