"""``perform``: call one job function as a worker would, with no row in the queue."""

from __future__ import annotations

import json
from contextlib import nullcontext
from typing import Any

from django.db import transaction
from django.utils import timezone

from .. import registry
from ..decorators import JobFunction
from ..exceptions import UnknownJobError
from ..models import Job, JobStatus
from ..queue import QueueClient
from ..queue.preparation import NewJob, prepare_job
from ..queue.refs import Duration, JobRef
from ..queue.validation import encode_result, to_seconds
from ..worker.run.attempt import call_job, run_to_end
from ..worker.run.context import JobContext

# The worker id a performed job's context names: no worker row has it.
PERFORM_WORKER_ID = "perform"


def perform(fn: JobFunction | str, /, **kwargs: Any) -> Any:
    """Run the job ``fn`` (a ``@job`` function or its name) with ``kwargs``; return its result as stored.

    Nothing is enqueued and nothing is written: the call goes through what
    ``enqueue`` and a worker do around it. The keyword arguments are checked as
    ``enqueue`` checks a payload and reach the function through JSON, as a
    worker reads them from the row: what ``enqueue`` refuses, ``perform``
    refuses with the same exception and message (``JobPayloadError`` for a
    value JSON cannot carry or a payload that does not fit the function's
    signature). The return value comes back as the ack stores it: through JSON
    (a tuple comes back as a list), and ``JobPayloadError`` for a value JSON
    cannot carry, which a worker would send to the dead letters. What the
    function raises, ``Retry`` and ``Fail`` included, reaches the caller.

    A job declared with ``takes_context=True`` gets a real ``JobContext`` for
    its first attempt: ``ctx.attempt`` is 1, ``ctx.worker_id`` is
    ``"perform"``, ``ctx.cancelled`` stays False, and ``ctx.job`` is an
    unsaved ``Job`` (no id) holding the payload and the options ``enqueue``
    would have given it (queue, priority, max_attempts, timeout from ``@job``
    and the settings). ``ctx.progress()`` checks its arguments as on a worker
    and writes nothing: the latest report is kept in ``ctx.job.progress``, as
    the row would hold it. ``ctx.extend_visibility()`` checks its argument and
    returns True: nobody else can claim a job that has no row.

    An ``atomic=True`` job runs inside ``transaction.atomic()`` on the queue's
    database, its result checked inside it, so that what it wrote is rolled
    back when it raises or returns a value JSON cannot carry, as on a worker.
    An ``async def`` job is awaited in an event loop of its own, as a worker
    of ``--pool threads`` runs it; its ORM calls come back to this thread, on
    the test's connection. Call ``perform`` from synchronous code (an async
    test wraps it in ``sync_to_async``). Raise ``UnknownJobError`` for a name no ``@job``
    registered, ``TypeError`` for an ``fn`` that is neither.
    """
    name = _name_of(fn)
    client = _Unclaimed()
    new = prepare_job(name, kwargs, {})  # enqueue's checks, with enqueue's errors
    spec = registry.lookup(new.name)
    if spec is None:
        raise UnknownJobError(f"no job registered as {new.name!r}: perform runs registered jobs only")
    job = _unsaved_job(new)

    def context() -> JobContext:
        return JobContext(job, PERFORM_WORKER_ID, client, report=_kept_on(job))

    with transaction.atomic(using=client.using) if spec.atomic else nullcontext():
        result = run_to_end(call_job(job, spec, context))
        return as_stored(result)


def as_stored(result: Any) -> Any:
    """``result`` as the ack stores it and its row gives it back, through JSON (or ``JobPayloadError``)."""
    text = encode_result(result)
    return None if text is None else json.loads(text)


def _name_of(fn: object) -> str:
    if isinstance(fn, JobFunction):
        return fn.name
    if isinstance(fn, str):
        return fn
    raise TypeError(f"perform takes a @job function or a job name, not {type(fn).__name__}")


def _unsaved_job(new: NewJob) -> Job:
    """The ``Job`` a worker would hold on its first claim of ``new``, never saved."""
    now = timezone.now()  # the row would have the database's clock; there is no row
    return Job(
        name=new.name,
        queue=new.queue,
        payload=json.loads(new.payload_json),  # as a worker reads it from the row
        priority=new.priority,
        max_attempts=new.max_attempts,
        visibility_timeout=new.visibility_timeout,
        timeout=new.timeout,
        concurrency_key=new.concurrency_key,
        concurrency_limit=new.concurrency_limit,
        status=JobStatus.RUNNING,
        attempts=1,
        locked_by=PERFORM_WORKER_ID,
        run_at=now,
        created_at=now,
        started_at=now,
        last_attempted_at=now,
    )


def _kept_on(job: Job) -> Any:
    """``ctx.progress``'s sink: the latest report on the unsaved ``job``, where the row would keep it."""

    def report(value: dict[str, Any]) -> None:
        job.progress = value

    return report


class _Unclaimed(QueueClient):
    """The queue as a performed job's context sees it: there is no row, so no claim can be lost."""

    def extend_visibility(self, job: JobRef, *, worker_id: str, extension: Duration) -> bool:
        to_seconds(extension, "extension", allow_zero=False)  # refused as on a worker
        return True
