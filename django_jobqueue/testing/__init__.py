"""Test your own code with the real queue: ``run_jobs``, ``assert_enqueued``, ``perform`` …

There is no "eager" mode: ``enqueue`` always writes its row, in the caller's
transaction, and a test runs the rows. ``run_jobs`` claims, runs and acks them
with the queue's own statements, in the test's thread and inside its open
transaction, so it works in ``django.test.TestCase`` and with pytest-django's
plain ``db`` fixture. ``assert_enqueued``, ``assert_not_enqueued`` and
``enqueued`` read the rows that are ready or waiting; ``perform`` calls one job
function as a worker would, with no row. The pytest plugin
(``django_jobqueue.testing.plugin``, registered as ``pytest11``) gives the
same functions as methods of a ``jobqueue`` fixture.

Names are imported lazily, so that the plugin can import this package when
pytest starts, before Django is set up. (No module is named after a function
it exports: importing ``testing.perform`` as a module would hide the function.)
"""

from __future__ import annotations

from importlib import import_module
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .assertions import assert_enqueued, assert_not_enqueued, enqueued
    from .performing import perform
    from .runner import RunReport, TooManyJobs, run_jobs, run_schedule

_LAZY = {
    "assert_enqueued": "django_jobqueue.testing.assertions",
    "assert_not_enqueued": "django_jobqueue.testing.assertions",
    "enqueued": "django_jobqueue.testing.assertions",
    "perform": "django_jobqueue.testing.performing",
    "run_jobs": "django_jobqueue.testing.runner",
    "RunReport": "django_jobqueue.testing.runner",
    "TooManyJobs": "django_jobqueue.testing.runner",
    "run_schedule": "django_jobqueue.testing.runner",
}

__all__ = [
    "RunReport",
    "TooManyJobs",
    "assert_enqueued",
    "assert_not_enqueued",
    "enqueued",
    "perform",
    "run_jobs",
    "run_schedule",
]


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        return getattr(import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'django_jobqueue.testing' has no attribute {name!r}")
