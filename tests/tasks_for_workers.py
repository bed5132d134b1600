"""Django Tasks for the tests, in-process and in the worker processes the tests start.

A worker imports this module when it meets one of these tasks (the Tasks
framework's one exception to the registry). Events go to the file named by a
``path`` argument, and the Tasks signals a worker sends go to the file named
by the ``TASK_SIGNALS_PATH`` environment variable, so that a test can read them.
"""

from __future__ import annotations

import asyncio
import inspect
import os
import time
from pathlib import Path
from typing import Any

from django_jobqueue.backends import TaskContext, task_finished, task_started
from tests.jobs_for_workers import note

try:
    from django.tasks import task
except ImportError:
    from django_tasks import task


class TaskBoomError(Exception):
    """An exception of this module, so that its class path is not a builtin's."""


@task
def add(a: int, b: int) -> int:
    return a + b


@task(queue_name="tasks", priority=7)
def shout(text: str, *, times: int = 1) -> str:
    return (text.upper() + "!") * times


@task
async def async_add(a: int, b: int) -> int:
    await asyncio.sleep(0)
    return a + b


@task(takes_context=True)
def describe(context: TaskContext, path: str) -> dict[str, Any]:
    note(path, "run", attempt=context.attempt, result_id=context.task_result.id)
    return {
        "attempt": context.attempt,
        "result_id": context.task_result.id,
        "worker_ids": context.task_result.worker_ids,
        "status": str(context.task_result.status),
    }


@task(takes_context=True)
def flaky(context: TaskContext, path: str, failures: int) -> int:
    """Raise on the first ``failures`` attempts, then return the attempt number."""
    note(path, "run", attempt=context.attempt)
    if context.attempt <= failures:
        raise TaskBoomError(f"attempt {context.attempt} failed")
    return context.attempt


@task
def always_fails(message: str) -> None:
    raise TaskBoomError(message)


@task(takes_context=True)
def gate(context: TaskContext, path: str, release: str, timeout: float = 30.0) -> str:
    """Note its start, then wait until the file ``release`` exists."""
    note(path, "start", attempt=context.attempt, result_id=context.task_result.id)
    deadline = time.monotonic() + timeout
    while not os.path.exists(release):
        if time.monotonic() > deadline:
            raise TimeoutError(f"{release} never appeared")
        time.sleep(0.01)
    return "released"


def plain_function(path: str) -> str:
    """Not a Task: a worker that finds this at a task job's path must refuse to call it."""
    Path(path).write_text("called")
    return "called"


class Holder:
    @staticmethod
    def nested() -> None:
        """A function whose path is not '<module>.<name>'."""


# @task(max_attempts=...) needs a Tasks framework whose decorator passes options on
# to the backend's task class: Django 6.1 and the backport, not Django 6.0.
TASK_OPTIONS_SUPPORTED = any(
    parameter.kind is inspect.Parameter.VAR_KEYWORD
    for parameter in inspect.signature(task).parameters.values()
)
if TASK_OPTIONS_SUPPORTED:

    @task(max_attempts=2)  # type: ignore[call-overload]
    def twice_then_dead(message: str) -> None:
        raise TaskBoomError(message)


def _record_signal(sender: Any, task_result: Any, signal_name: str, **kwargs: Any) -> None:
    path = os.environ.get("TASK_SIGNALS_PATH")
    if path:
        note(
            path,
            signal_name,
            result_id=task_result.id,
            status=str(task_result.status),
            attempts=task_result.attempts,
            sender=sender.__name__,
        )


def _on_started(sender: Any, task_result: Any, **kwargs: Any) -> None:
    _record_signal(sender, task_result, "task_started")


def _on_finished(sender: Any, task_result: Any, **kwargs: Any) -> None:
    _record_signal(sender, task_result, "task_finished")


task_started.connect(_on_started, dispatch_uid="tests.tasks_for_workers.started")
task_finished.connect(_on_finished, dispatch_uid="tests.tasks_for_workers.finished")


@task(takes_context=True)
def returns_object(context: TaskContext, path: str) -> Any:
    """Have an effect (an event), then return what JSON cannot carry."""
    note(path, "start")
    return object()
