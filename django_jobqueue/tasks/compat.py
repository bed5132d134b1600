"""The names of Django's Tasks framework, from Django 6 or from the ``django-tasks`` backport.

The one module of the package that knows where the framework lives: every
other module imports these names from here, so a new home (or a renamed
exception, as ``InvalidTaskError`` is in the backport) changes one file.

Raise ``ImproperlyConfigured`` if neither is installed.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from django.core.exceptions import ImproperlyConfigured

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
    "BaseTaskBackend",
    "InvalidTask",
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
