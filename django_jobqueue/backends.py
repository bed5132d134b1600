"""A backend for Django's Tasks framework that runs every ``@task`` on the queue.

``TASKS = {"default": {"BACKEND": "django_jobqueue.backends.JobQueueBackend"}}``
works with ``django.tasks`` (Django 6) and with the ``django-tasks`` backport
(Django 5.2). A task enqueued here is an ordinary job row, marked with the
backend's alias: inserted in the caller's transaction, claimed by ``runworker``,
retried with backoff and dead-lettered like any ``@job``. The worker finds the
task by its module path, and runs only what it finds there if it is a ``Task``.

The backend's options (``TASKS[alias]["OPTIONS"]``)::

    "DATABASE": "default",           # default: JOBQUEUE["DATABASE"]
    "MAX_ATTEMPTS": 5,               # default: JOBQUEUE["MAX_ATTEMPTS"]
    "VISIBILITY_TIMEOUT": 30,        # seconds; default: JOBQUEUE["VISIBILITY_TIMEOUT"]
    "TASK_OPTIONS": {"myapp.tasks.send_email": {"max_attempts": 10, "visibility_timeout": 120}},

On Django 6.1 and with the backport, ``@task(max_attempts=10, visibility_timeout=120)``
sets the same per task, and wins over the options.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta
from importlib import import_module
from typing import TYPE_CHECKING, Any

from django.conf import settings
from django.core import checks
from django.core.exceptions import ImproperlyConfigured

from .conf import jobqueue_settings
from .exceptions import Fail, JobPayloadError
from .queue.validation import MAX_NAME_LENGTH, check_max_attempts, check_queue, check_visibility_timeout

if TYPE_CHECKING:
    from django.tasks import Task, TaskContext, TaskResult, TaskResultStatus
    from django.tasks.backends.base import BaseTaskBackend
    from django.tasks.base import TaskError
    from django.tasks.exceptions import InvalidTask, TaskResultDoesNotExist
    from django.tasks.signals import task_enqueued, task_finished, task_started
    from django.utils.json import normalize_json
else:
    try:  # Django >= 6.0
        from django.tasks import Task, TaskContext, TaskResult, TaskResultStatus
        from django.tasks.backends.base import BaseTaskBackend
        from django.tasks.base import TaskError
        from django.tasks.exceptions import InvalidTask, TaskResultDoesNotExist
        from django.tasks.signals import task_enqueued, task_finished, task_started
        from django.utils.json import normalize_json
    except ImportError:
        try:  # the backport, on Django 5.2
            from django_tasks.backends.base import BaseTaskBackend
            from django_tasks.base import Task, TaskContext, TaskError, TaskResult, TaskResultStatus
            from django_tasks.exceptions import InvalidTaskError as InvalidTask
            from django_tasks.exceptions import TaskResultDoesNotExist
            from django_tasks.signals import task_enqueued, task_finished, task_started
            from django_tasks.utils import normalize_json
        except ImportError as exc:
            raise ImproperlyConfigured(
                "django_jobqueue.backends needs Django's Tasks framework: Django 6.0 or later, "
                "or on Django 5.2 the backport (pip install django-tasks)."
            ) from exc

__all__ = [
    "InvalidTask",
    "JobQueueBackend",
    "JobQueueTask",
    "Task",
    "TaskContext",
    "TaskError",
    "TaskResult",
    "TaskResultDoesNotExist",
    "TaskResultStatus",
    "normalize_json",
    "task_enqueued",
    "task_finished",
    "task_started",
]

OPTION_KEYS = frozenset({"DATABASE", "MAX_ATTEMPTS", "VISIBILITY_TIMEOUT", "TASK_OPTIONS"})
TASK_OPTION_KEYS = frozenset({"max_attempts", "visibility_timeout"})


@dataclass(frozen=True, slots=True, kw_only=True)
class JobQueueTask(Task):  # type: ignore[type-arg]
    """A ``Task`` with the queue's own per-task options (``None`` = the backend's)."""

    # How many claims before the task moves to the dead letters.
    max_attempts: int | None = None
    # How long a claim lasts without the worker's heartbeat (a timedelta or seconds).
    visibility_timeout: timedelta | float | None = None


class JobQueueBackend(BaseTaskBackend):
    """Django's Tasks on django-jobqueue's tables, run by ``manage.py runworker``."""

    task_class = JobQueueTask

    # run_after is the job's run_at: claimed no earlier than that.
    supports_defer = True
    # Coroutine functions run on the worker, in an event loop of their own per run.
    supports_async_task = True
    # Results are rows, readable from any process until pruned (KEEP_COMPLETED).
    supports_get_result = True
    # Workers claim the highest priority first, then the oldest run_at.
    supports_priority = True

    # -- settings --------------------------------------------------------------

    @property
    def database(self) -> str:
        return str(self.options.get("DATABASE") or jobqueue_settings.DATABASE)

    def task_option(self, task: Task, key: str) -> Any:
        """A task's ``max_attempts`` or ``visibility_timeout``: the task's, the options', then JOBQUEUE's."""
        value = getattr(task, key, None)
        if value is None:
            value = (self.options.get("TASK_OPTIONS") or {}).get(task.module_path, {}).get(key)
        if value is None:
            value = self.options.get(key.upper())
        return getattr(jobqueue_settings, key.upper()) if value is None else value

    # -- the Tasks API ---------------------------------------------------------

    def validate_task(self, task: Task) -> None:
        """Refuse a task the queue cannot run, raising ``InvalidTask`` that says why."""
        super().validate_task(task)
        qualname = task.func.__qualname__
        if "." in qualname:
            raise InvalidTask(
                f"Task function {qualname!r} must be a plain function of its module: "
                "workers find a task by '<module>.<function name>'."
            )
        if len(task.module_path) > MAX_NAME_LENGTH:
            raise InvalidTask(
                f"Task path {task.module_path!r} is longer than {MAX_NAME_LENGTH} characters, "
                "the longest job name the queue stores."
            )
        try:
            check_queue(task.queue_name)
            check_max_attempts(self.task_option(task, "max_attempts"))
            check_visibility_timeout(self.task_option(task, "visibility_timeout"))
        except ValueError as exc:
            raise InvalidTask(f"Task {task.module_path!r}: {exc}.") from None

    def enqueue(self, task: Task, args: Any, kwargs: Any) -> TaskResult:  # type: ignore[override]
        """Insert the task as a ready job, in the caller's transaction, and return its result.

        Raise ``InvalidTask`` for a task workers could not run and
        ``JobPayloadError`` for arguments JSON cannot carry, before anything is written.
        """
        from .queue import ops
        from .queue.preparation import prepare_job
        from .task_rows import check_task_module, result_from_job

        self.validate_task(task)
        try:
            check_task_module(task.module_path)
        except Fail as exc:
            raise InvalidTask(f"{exc}; workers would refuse it.") from None
        check_findable(task)
        try:
            payload = {"args": normalize_json(list(args)), "kwargs": normalize_json(dict(kwargs))}
        except (TypeError, ValueError) as exc:
            raise JobPayloadError(f"arguments of task {task.module_path!r} must be JSON: {exc}") from None
        options = {
            "queue": task.queue_name,
            "priority": task.priority,
            "run_at": task.run_after,
            "max_attempts": self.task_option(task, "max_attempts"),
            "visibility_timeout": self.task_option(task, "visibility_timeout"),
        }
        new_job = prepare_job(task.module_path, payload, options)._replace(task_backend=self.alias)
        job = ops.insert_jobs(self.database, [new_job])[0]
        result = result_from_job(job, task)
        task_enqueued.send(type(self), task_result=result)
        return result

    def get_result(self, result_id: str) -> TaskResult:
        """Return the result of the task job ``result_id``, live or dead-lettered.

        Raise ``TaskResultDoesNotExist`` if there is none: never enqueued here,
        pruned, deleted on completion (``KEEP_COMPLETED = 0``), or a dead letter
        retried (it became a new job, with a new id).
        """
        from .task_rows import find_result

        result = find_result(self.database, result_id)
        if result is None:
            raise TaskResultDoesNotExist(f"no task result with id {result_id!r}")
        return result

    def check(self, **kwargs: Any) -> list[checks.CheckMessage]:
        return list(check_options(self.alias, self.options))


def check_findable(task: Task) -> None:
    """Raise ``InvalidTask`` unless a worker will find this task at its module path."""
    module_name, _, attribute = task.module_path.rpartition(".")
    found = getattr(import_module(module_name), attribute, None)
    if not isinstance(found, Task) or found.func is not task.func:
        raise InvalidTask(
            f"{task.module_path!r} is not this Task: workers find a task by its module path, "
            "so define it at module level with @task and enqueue that object."
        )


def check_options(alias: str, options: Any) -> list[checks.CheckMessage]:
    """System checks of a backend's ``OPTIONS`` (ids ``django_jobqueue.E1xx``)."""
    where = f"TASKS[{alias!r}]['OPTIONS']"
    if not isinstance(options, dict):
        return [checks.Error(f"{where} must be a dict.", id="django_jobqueue.E101")]
    errors = _unknown_keys(where, options, OPTION_KEYS)
    database = options.get("DATABASE")
    if database is not None and database not in settings.DATABASES:
        errors.append(
            checks.Error(
                f"{where}['DATABASE'] is {database!r}, not a key of DATABASES.", id="django_jobqueue.E102"
            )
        )
    errors += _check_values(where, options.get("MAX_ATTEMPTS"), options.get("VISIBILITY_TIMEOUT"))
    per_task = options.get("TASK_OPTIONS") or {}
    if not isinstance(per_task, dict) or not all(isinstance(value, dict) for value in per_task.values()):
        message = f"{where}['TASK_OPTIONS'] must map task paths to dicts of options."
        return [*errors, checks.Error(message, id="django_jobqueue.E103")]
    for path, task_options in per_task.items():
        task_where = f"{where}['TASK_OPTIONS'][{path!r}]"
        errors += _unknown_keys(task_where, task_options, TASK_OPTION_KEYS)
        errors += _check_values(
            task_where, task_options.get("max_attempts"), task_options.get("visibility_timeout")
        )
    return errors


def _unknown_keys(where: str, given: dict[str, Any], known: frozenset[str]) -> list[checks.CheckMessage]:
    return [
        checks.Error(
            f"{where} has an unknown key {key!r}.",
            hint=f"Known keys: {', '.join(sorted(known))}.",
            id="django_jobqueue.E104",
        )
        for key in sorted(set(given) - known, key=str)
    ]


def _check_values(where: str, max_attempts: Any, visibility_timeout: Any) -> list[checks.CheckMessage]:
    errors: list[checks.CheckMessage] = []
    try:
        if max_attempts is not None:
            check_max_attempts(max_attempts)
        if visibility_timeout is not None:
            check_visibility_timeout(visibility_timeout)
    except ValueError as exc:
        errors.append(checks.Error(f"{where}: {exc}.", id="django_jobqueue.E105"))
    return errors
