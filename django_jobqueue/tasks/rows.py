"""Django Tasks' view of our rows: find a job's ``Task``, and read a ``TaskResult`` off a row.

A job row of a task (``task_backend`` set) keeps the task's module path as its
name, ``{"args": [...], "kwargs": {...}}`` as its payload, and its result id is
the job's id. Once dead-lettered, the result is read from the dead letter,
which keeps the job's id.
"""

from __future__ import annotations

import builtins
import re
from dataclasses import replace
from importlib import import_module
from typing import Any

from django.apps import apps

from ..conf import jobqueue_settings
from ..exceptions import Fail, UnknownJobError
from ..models import DeadLetter, Job, JobStatus
from .compat import (
    InvalidTask,
    Task,
    TaskError,
    TaskResult,
    TaskResultDoesNotExist,
    TaskResultStatus,
)

STATUSES = {
    JobStatus.READY: TaskResultStatus.READY,
    JobStatus.RUNNING: TaskResultStatus.RUNNING,
    # Waiting for a dependency (depends_on): queued, not yet claimable.
    JobStatus.WAITING: TaskResultStatus.READY,
    JobStatus.DONE: TaskResultStatus.SUCCESSFUL,
    # A cancelled job never runs again: to the Tasks framework, it failed.
    JobStatus.CANCELLED: TaskResultStatus.FAILED,
}

# "ValueError: ..." or "myapp.errors.Boom: ..." (how a worker writes a task's error).
_EXCEPTION_RE = re.compile(r"([A-Za-z_][\w.]*): ")
# A job id as a result id: digits only, within a BigAutoField's range.
_ID_RE = re.compile(r"[1-9][0-9]{0,17}")
# The queue's own errors (an expired claim, a task not found) name no exception class.
QUEUE_ERROR_PATH = "django_jobqueue.exceptions.JobQueueError"


def resolve_task(path: str) -> Task:
    """Return the ``Task`` at module path ``path``, importing its module.

    Only a task job's name (a row marked by the backend) may come here. Raise
    ``Fail`` if the module is outside the allowed ones (``check_task_module``;
    it is never imported), ``UnknownJobError`` if the module or the name is
    missing (a deploy may bring it), ``Fail`` if what is there is not a
    ``Task``: it is never called.
    """
    module_name, _, attribute = path.rpartition(".")
    if not module_name:
        raise Fail(f"{path!r} is not a task path ('<module>.<function name>')")
    check_task_module(path)
    try:
        module = import_module(module_name)
    except ModuleNotFoundError as exc:
        raise UnknownJobError(f"task {path!r}: no module {exc.name!r}") from None
    found = getattr(module, attribute, None)
    if found is None:
        raise UnknownJobError(f"task {path!r}: module {module_name!r} has no {attribute!r}")
    if not isinstance(found, Task):
        raise Fail(f"refused to run {path!r}: it is a {type(found).__name__}, not a Task")
    return found


def check_task_module(path: str) -> None:
    """Raise ``Fail`` unless task ``path`` is in an installed app or in ``JOBQUEUE["TASK_MODULES"]``.

    A row's name is data: whoever can write a row must not choose which module
    a worker imports (importing runs the module's top-level code).
    """
    module_name = path.rpartition(".")[0]
    allowed = [app.name for app in apps.get_app_configs()]
    allowed += list(jobqueue_settings.TASK_MODULES)
    if not any(module_name == prefix or module_name.startswith(f"{prefix}.") for prefix in allowed):
        raise Fail(
            f"refused to import {module_name!r} for task {path!r}: it is not a module of an "
            "installed app nor listed in JOBQUEUE['TASK_MODULES']"
        )


def task_for_row(row: Job | DeadLetter, found: Task) -> Task:
    """``found`` as the row was enqueued: its queue, priority and backend alias."""
    try:
        return replace(found, queue_name=row.queue, priority=row.priority, backend=row.task_backend)
    except (InvalidTask, LookupError, ValueError):
        # The backend's settings changed since (a queue dropped from QUEUES,
        # an alias gone): the task as defined still tells what runs.
        return found


def task_error(error: str, traceback: str) -> TaskError:
    """A ``TaskError`` from a stored error text (``"<exception>: <message>"``) and traceback."""
    match = _EXCEPTION_RE.match(error)
    path = match.group(1) if match else QUEUE_ERROR_PATH
    if path in ("Retry", "Fail"):
        path = f"django_jobqueue.exceptions.{path}"
    elif "." not in path:
        path = f"builtins.{path}" if isinstance(getattr(builtins, path, None), type) else QUEUE_ERROR_PATH
    return TaskError(exception_class_path=path, traceback=traceback or error)


def attempt_errors(history: Any, error: str, traceback: str) -> list[TaskError]:
    """One ``TaskError`` per failed attempt in ``history``, oldest first; the row's ``error`` if none.

    The history keeps each attempt's error, cut short, and no traceback: the
    newest entry gets the row's ``traceback``, which is its attempt's, and the
    others their error text in its place. A lost attempt on a live job gets
    none, since the row's is an earlier attempt's. Rows written before the
    history was kept fall back to the row's own last error.
    """
    entries = [entry for entry in history if isinstance(entry, dict)] if isinstance(history, list) else []
    failed = [entry for entry in entries if entry.get("error")]
    if not failed:
        return [task_error(error, traceback)] if error else []
    errors = [task_error(str(entry["error"]), "") for entry in failed]
    newest = failed[-1]
    if newest is entries[-1] and traceback:
        errors[-1] = task_error(str(newest["error"]), traceback)
    return errors


def _worker_ids(history: Any, attempts: int) -> list[str]:
    # One per counted attempt: a dead letter retried or a cancelled job re-run starts again at 0.
    return [str(worker) for worker in history][-attempts:] if attempts > 0 else []


def _live_traceback(job: Job) -> str:
    # A rescued claim leaves last_traceback as it was: an earlier attempt's, not the lost one's.
    newest = job.attempt_history[-1] if isinstance(job.attempt_history, list) and job.attempt_history else {}
    return "" if isinstance(newest, dict) and newest.get("outcome") == "lost" else job.last_traceback


def _build(row: Job | DeadLetter, task: Task, **fields: Any) -> TaskResult:
    payload = row.payload if isinstance(row.payload, dict) else {}
    return TaskResult(
        task=task,
        args=list(payload.get("args", [])),
        kwargs=dict(payload.get("kwargs", {})),
        backend=row.task_backend,
        started_at=row.started_at,
        last_attempted_at=row.last_attempted_at,
        worker_ids=_worker_ids(row.worker_ids, row.attempts),
        **fields,
    )


def result_from_job(job: Job, task: Task) -> TaskResult:
    """The ``TaskResult`` of a live or finished job row."""
    result = _build(
        job,
        task,
        id=str(job.pk),
        status=STATUSES[JobStatus(job.status)],
        enqueued_at=job.created_at,
        finished_at=job.finished_at,
        errors=attempt_errors(job.attempt_history, job.last_error, _live_traceback(job)),
    )
    if job.status == JobStatus.DONE:
        object.__setattr__(result, "_return_value", job.result)  # TaskResult is frozen
    return result


def result_from_dead_letter(dead: DeadLetter, task: Task) -> TaskResult:
    """The ``TaskResult`` of a dead-lettered task: failed, with every attempt's error."""
    return _build(
        dead,
        task,
        id=str(dead.job_id),
        status=TaskResultStatus.FAILED,
        enqueued_at=dead.enqueued_at,
        finished_at=dead.failed_at,
        errors=attempt_errors(dead.attempt_history, dead.error, dead.traceback)
        or [task_error(dead.error, dead.traceback)],
    )


def find_result(using: str, result_id: object) -> TaskResult | None:
    """Return the result of task job ``result_id`` on database ``using``, or None."""
    if not isinstance(result_id, str | int) or not _ID_RE.fullmatch(str(result_id)):
        return None
    job_id = int(result_id)
    job = Job.objects.using(using).filter(pk=job_id).exclude(task_backend="").first()
    row: Job | DeadLetter | None = job
    if row is None:
        row = DeadLetter.objects.using(using).filter(job_id=job_id).exclude(task_backend="").first()
    if row is None:
        return None
    try:
        task = task_for_row(row, resolve_task(row.name))
    except (UnknownJobError, Fail) as exc:
        raise TaskResultDoesNotExist(
            f"task result {job_id} is of {row.name!r}, not found here: {exc}"
        ) from None
    if isinstance(row, Job):
        return result_from_job(row, task)
    return result_from_dead_letter(row, task)
