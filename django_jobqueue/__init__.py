"""django-jobqueue: a durable, at-least-once job queue in your Django database.

The public API. Names are imported lazily, so that Django can import this
package while it loads ``INSTALLED_APPS``, before the models are ready.
"""

from __future__ import annotations

from importlib import import_module
from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"

from .exceptions import (
    DependencyError,
    Fail,
    JobCancelled,
    JobInterrupted,
    JobPayloadError,
    JobQueueError,
    JobTimeout,
    Retry,
    UnknownJobError,
)

if TYPE_CHECKING:
    from .decorators import job
    from .enqueueing import aenqueue, enqueue, enqueue_many
    from .queue import QueueClient, batch
    from .worker.run.context import JobContext

_LAZY = {
    "job": "django_jobqueue.decorators",
    "batch": "django_jobqueue.queue",
    "aenqueue": "django_jobqueue.enqueueing",
    "enqueue": "django_jobqueue.enqueueing",
    "enqueue_many": "django_jobqueue.enqueueing",
    "QueueClient": "django_jobqueue.queue",
    "JobContext": "django_jobqueue.worker.run.context",
}

__all__ = [
    "DependencyError",
    "Fail",
    "JobCancelled",
    "JobContext",
    "JobInterrupted",
    "JobPayloadError",
    "JobQueueError",
    "JobTimeout",
    "QueueClient",
    "Retry",
    "UnknownJobError",
    "aenqueue",
    "batch",
    "enqueue",
    "enqueue_many",
    "job",
]


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        return getattr(import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'django_jobqueue' has no attribute {name!r}")
