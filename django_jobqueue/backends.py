"""The public home of the Django Tasks backend: ``django_jobqueue.backends.JobQueueBackend``.

``TASKS = {"default": {"BACKEND": "django_jobqueue.backends.JobQueueBackend"}}``.
The code lives in ``django_jobqueue.tasks``; this module keeps the path that
settings name, and the framework's names (from Django 6 or from the
``django-tasks`` backport on Django 5.2) for code that runs on both.
"""

from __future__ import annotations

from .tasks.backend import JobQueueBackend, JobQueueTask
from .tasks.compat import (
    InvalidTask,
    Task,
    TaskContext,
    TaskError,
    TaskResult,
    TaskResultDoesNotExist,
    TaskResultStatus,
    normalize_json,
    task_enqueued,
    task_finished,
    task_started,
)

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
