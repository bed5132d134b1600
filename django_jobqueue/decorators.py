"""``@job``: register a function as a job and give it ``enqueue`` and ``using``."""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterable
from datetime import datetime, timedelta
from typing import Any, overload

from asgiref.sync import iscoroutinefunction, sync_to_async

from . import registry
from .exceptions import Retry
from .models import Job
from .queue import QueueClient
from .queue.flow import check_concurrency_limit
from .queue.validation import (
    check_max_attempts,
    check_name,
    check_priority,
    check_queue,
    check_timeout,
    check_visibility_timeout,
)


class JobFunction:
    """A function registered with ``@job``, its job's name in ``name``. Calling it runs it here and now."""

    def __init__(self, spec: registry.JobSpec) -> None:
        self.spec = spec
        self.name = spec.name
        functools.update_wrapper(self, spec.func)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self.spec.func(*args, **kwargs)

    def __repr__(self) -> str:
        return f"<job {self.name!r}>"

    def enqueue(self, **payload: Any) -> Job:
        """Enqueue a run of this job with ``payload`` as its keyword arguments."""
        return BoundJob(self.name).enqueue(**payload)

    async def aenqueue(self, **payload: Any) -> Job:
        """``enqueue`` from async code, as ``django_jobqueue.aenqueue`` runs it."""
        return await BoundJob(self.name).aenqueue(**payload)

    def using(
        self,
        *,
        queue: str | None = None,
        priority: int | None = None,
        run_at: datetime | None = None,
        delay: timedelta | float | None = None,
        unique_key: str | None = None,
        max_attempts: int | None = None,
        timeout: timedelta | float | None = None,
        concurrency_key: str | None = None,
        concurrency_limit: int | None = None,
        depends_on: Iterable[Any] | None = None,
        database: str | None = None,
    ) -> BoundJob:
        """Return this job with options for one enqueue: ``.using(queue="urgent").enqueue(...)``.

        An option left as ``None`` keeps the job's default; ``enqueue`` checks them.
        """
        options = {
            "queue": queue,
            "priority": priority,
            "run_at": run_at,
            "delay": delay,
            "unique_key": unique_key,
            "max_attempts": max_attempts,
            "timeout": timeout,
            "concurrency_key": concurrency_key,
            "concurrency_limit": concurrency_limit,
            "depends_on": depends_on,
        }
        return BoundJob(self.name, {k: v for k, v in options.items() if v is not None}, database)


class BoundJob:
    """A job name with enqueue options; ``enqueue(**payload)`` inserts one job."""

    def __init__(self, name: str, options: dict[str, Any] | None = None, database: str | None = None):
        self.name = name
        self.options = options or {}
        self.database = database

    def enqueue(self, **payload: Any) -> Job:
        """Enqueue one job of this name, with these options and ``payload`` as its keyword arguments."""
        return QueueClient(self.database).push(self.name, payload, **self.options)

    async def aenqueue(self, **payload: Any) -> Job:
        """``enqueue`` from async code, as ``django_jobqueue.aenqueue`` runs it."""
        return await sync_to_async(self.enqueue, thread_sensitive=True)(**payload)


@overload
def job(func: Callable[..., Any], /) -> JobFunction: ...


@overload
def job(
    *,
    name: str | None = None,
    queue: str | None = None,
    priority: int | None = None,
    max_attempts: int | None = None,
    visibility_timeout: timedelta | float | None = None,
    timeout: timedelta | float | None = None,
    concurrency_limit: int | None = None,
    takes_context: bool = False,
    fail_on: type[BaseException] | Iterable[type[BaseException]] = (),
    cron: str | None = None,
    every: timedelta | int | None = None,
    atomic: bool = False,
) -> Callable[[Callable[..., Any]], JobFunction]: ...


def job(
    func: Callable[..., Any] | None = None,
    /,
    *,
    name: str | None = None,
    queue: str | None = None,
    priority: int | None = None,
    max_attempts: int | None = None,
    visibility_timeout: timedelta | float | None = None,
    timeout: timedelta | float | None = None,
    concurrency_limit: int | None = None,
    takes_context: bool = False,
    fail_on: type[BaseException] | Iterable[type[BaseException]] = (),
    cron: str | None = None,
    every: timedelta | int | None = None,
    atomic: bool = False,
) -> JobFunction | Callable[[Callable[..., Any]], JobFunction]:
    """Register a function as a job, named ``"<module>.<qualname>"`` unless ``name`` is given.

    The options are the defaults of every job of that name, also when it is
    enqueued by name. ``fail_on`` names exception classes (one, or several in a
    tuple or list) that send a run to the dead letters at once, as ``Fail``
    does, instead of retrying it. ``timeout`` (seconds or a ``timedelta``, up
    to 7 days) is how long one attempt may run before the worker ends it as
    timed out; ``None`` leaves it to ``JOBQUEUE["TIMEOUT"]``.
    ``concurrency_limit`` (1 to 10,000) is how many jobs of this name with one
    ``concurrency_key`` may run at once when an enqueue gives a key and no
    limit; it does nothing for jobs enqueued without a key.
    ``atomic=True`` runs the function inside ``transaction.atomic()`` on the
    queue's database and commits the job's ack in that same transaction: its
    writes to that database and its completion happen together or not at all
    (docs/workflows.md). Raise ``ValueError`` for a bad option or a name taken
    by another function, ``TypeError`` for a ``fail_on`` that is not exception
    classes, an ``atomic`` that is not a bool, or ``atomic=True`` on an
    ``async def`` function (Django has no transactions in async code).

    ``cron`` (five fields, in ``TIME_ZONE``) or ``every`` (seconds) also
    declares a schedule named after the job, with an empty payload; the
    system checks report a bad one (docs/schedules.md).
    """
    if cron is not None and every is not None:
        raise ValueError("give @job either cron or every, not both")
    if not isinstance(atomic, bool):
        raise TypeError(f"atomic must be True or False, not {atomic!r}")
    schedule = {"cron": cron} if cron is not None else {"every": every} if every is not None else None

    def decorate(function: Callable[..., Any]) -> JobFunction:
        if atomic and iscoroutinefunction(function):
            raise TypeError(
                f"@job(atomic=True) cannot be used on the coroutine function {function.__qualname__}: "
                "Django runs no transaction across awaits. Write the transaction as a plain function "
                "and await it with sync_to_async (docs/enqueueing.md), or make the job a plain function"
            )
        spec = registry.JobSpec(
            name=check_name(name or f"{function.__module__}.{function.__qualname__}"),
            func=function,
            queue=check_queue(queue) if queue is not None else None,
            priority=check_priority(priority) if priority is not None else None,
            max_attempts=check_max_attempts(max_attempts) if max_attempts is not None else None,
            visibility_timeout=(
                check_visibility_timeout(visibility_timeout) if visibility_timeout is not None else None
            ),
            timeout=check_timeout(timeout) if timeout is not None else None,
            concurrency_limit=(
                check_concurrency_limit(concurrency_limit) if concurrency_limit is not None else None
            ),
            takes_context=bool(takes_context),
            fail_on=check_fail_on(fail_on),
            schedule=schedule,
            atomic=atomic,
        )
        registry.register(spec)
        return JobFunction(spec)

    return decorate(func) if func is not None else decorate


def check_fail_on(fail_on: object) -> tuple[type[BaseException], ...]:
    """Return ``fail_on`` as a tuple of exception classes.

    Raise ``TypeError`` naming the first item that is not an exception class
    (an instance, a string, any other class), and ``ValueError`` for ``Retry``,
    which asks for the retry that ``fail_on`` would refuse.
    """
    items = (fail_on,) if isinstance(fail_on, type) else fail_on
    if not isinstance(items, tuple | list | set | frozenset):
        raise TypeError(
            f"fail_on must be an exception class or a tuple of them, not {type(fail_on).__name__}"
        )
    for item in items:
        if not (isinstance(item, type) and issubclass(item, BaseException)):
            raise TypeError(f"fail_on must hold exception classes; {item!r} is not one")
        if issubclass(item, Retry):
            raise ValueError(f"fail_on cannot hold {item.__name__}: raising Retry asks for a retry")
    return tuple(items)
