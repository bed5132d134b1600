"""``enqueue`` and ``enqueue_many``: ordinary inserts on the caller's connection.

Inside ``transaction.atomic()`` a job exists if and only if the transaction
commits: no ``on_commit`` hook, no second connection. ``aenqueue`` is
``enqueue`` for async code, run as Django's async ORM runs its queries.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from datetime import datetime, timedelta
from typing import Any

from asgiref.sync import sync_to_async

from .models import Job
from .queue import QueueClient


def enqueue(
    name: str,
    payload: Mapping[str, Any] | None = None,
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
    using: str | None = None,
) -> Job:
    """Enqueue the job ``name`` with ``payload`` (a JSON object) and return it.

    Options left as ``None`` come from the job's ``@job`` defaults, then from
    settings. ``timeout`` is how long one attempt may run (seconds or a
    ``timedelta``, up to 7 days); left as ``None`` it is the ``@job``'s, else
    ``JOBQUEUE["TIMEOUT"]`` (``None``: no limit). With a ``concurrency_key``
    (1-255 characters), at most ``concurrency_limit`` (1 to 10,000; left as
    ``None``, the ``@job``'s) jobs with that key run at once across every
    worker. Raise ``JobPayloadError`` for a payload the queue cannot store and
    ``ValueError`` for a bad option (a key no limit comes with, a limit
    without a key), before anything is written.

    With ``depends_on`` (jobs, job ids or Tasks' results) the job waits until
    every one of them is done (docs/workflows.md); it raises ``DependencyError``
    (a ``ValueError``), enqueuing nothing, if one is cancelled or not in the queue.
    """
    return QueueClient(using).push(
        name,
        payload,
        queue=queue,
        priority=priority,
        run_at=run_at,
        delay=delay,
        unique_key=unique_key,
        max_attempts=max_attempts,
        timeout=timeout,
        concurrency_key=concurrency_key,
        concurrency_limit=concurrency_limit,
        depends_on=depends_on,
    )


async def aenqueue(name: str, payload: Mapping[str, Any] | None = None, **options: Any) -> Job:
    """``enqueue`` from async code (an async view, a coroutine job): its options, checks and errors.

    It runs ``enqueue`` as Django's async ORM runs a query (``acreate``,
    ``aget``): in the thread where the request's synchronous code runs
    (``sync_to_async``, thread-sensitive), on that thread's connection. Outside
    a transaction the job is committed when this returns. Django has no
    ``transaction.atomic`` for async code: to enqueue in the transaction of
    your own rows, write the transaction as a synchronous function that calls
    ``enqueue`` and ``await sync_to_async(that_function)()`` (docs/enqueueing.md).
    """
    # The options passed on as they are, as acreate(**kwargs) does: enqueue checks them, and
    # an option it gains is one aenqueue has.
    return await sync_to_async(enqueue, thread_sensitive=True)(name, payload, **options)


def enqueue_many(
    items: Iterable[
        tuple[str, Mapping[str, Any] | None] | tuple[str, Mapping[str, Any] | None, Mapping[str, Any]]
    ],
    *,
    queue: str | None = None,
    using: str | None = None,
) -> list[Job]:
    """Enqueue ``(name, payload)`` or ``(name, payload, options)`` items in one batch.

    ``queue`` is the default for items whose options name none. Every item is
    validated before anything is written; the jobs are returned in order.
    """
    # Read as the batch reads them, in QueueClient.push_many's pause of the garbage collector.
    return QueueClient(using).push_many(_triples(items, queue))


def _triples(items: Iterable[Any], queue: str | None) -> Iterator[tuple[str, Any, Mapping[str, Any]]]:
    """Each item as ``(name, payload, options)``, ``queue`` filled in where its options name none."""
    # The options of every item that gives none: shared, as nothing downstream changes them.
    batch_options: dict[str, Any] = {} if queue is None else {"queue": queue}
    for index, item in enumerate(items):
        if not isinstance(item, tuple | list) or len(item) not in (2, 3):
            raise ValueError(f"item {index}: expected (name, payload) or (name, payload, options)")
        if len(item) == 2:
            options = batch_options
        elif not isinstance(item[2], Mapping):
            raise TypeError(f"item {index}: options must be a dict, not {type(item[2]).__name__}")
        else:
            options = dict(item[2])
            if queue is not None and options.get("queue") is None:
                options["queue"] = queue
        yield (item[0], item[1], options)
