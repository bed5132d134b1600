"""``batch()``: the jobs enqueued in one block, and the one job enqueued once all of them have finished.

The block runs in ``transaction.atomic()`` on the batch's database: the batch
row, its jobs and the mark that makes them its jobs commit together when the
block ends, or not at all if it raises (or an outer transaction rolls back).
No worker sees a job of the batch before the batch is whole, so it cannot
finish early; one that enqueued nothing finishes at once.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any

from django.db import transaction

from .. import registry
from ..conf import jobqueue_settings
from ..exceptions import JobPayloadError, UnknownJobError
from ..models import Job
from . import ops
from .ops.batches import COUNT_KEYS
from .preparation import prepare_job


class OpenBatch:
    """The batch a ``with batch(...) as b:`` block fills: ``b.id``, and once the block ends ``b.total``."""

    def __init__(self, batch_id: int, using: str) -> None:
        self.id = batch_id
        self.using = using
        # Every job the block's enqueues returned, in order; the block's end makes them the batch's.
        self.job_ids: list[int] = []
        self.total: int | None = None

    def __repr__(self) -> str:
        return f"<batch {self.id} on {self.using!r}>"


_open: ContextVar[OpenBatch | None] = ContextVar("jobqueue_open_batch", default=None)


def check_database(using: str) -> None:
    """Raise ``ValueError`` for an enqueue on another database than the open batch's, before it writes."""
    opened = _open.get()
    if opened is not None and opened.using != using:
        raise ValueError(
            f"the jobs of batch {opened.id} go to database {opened.using!r}, not {using!r}: "
            "a batch counts its jobs in its own database"
        )


def joined(jobs: Sequence[Job]) -> list[Job]:
    """Note ``jobs`` as enqueued in the open batch's block, if one is open; return them."""
    opened = _open.get()
    if opened is not None:
        opened.job_ids.extend(job.pk for job in jobs)
    return list(jobs)


@contextmanager
def batch(
    on_finish: Any, payload: Mapping[str, Any] | None = None, *, using: str | None = None
) -> Iterator[OpenBatch]:
    """Make the jobs enqueued in the block one batch; enqueue ``on_finish`` once every one has finished.

    ``on_finish`` is a registered job (its name, or the ``@job`` function).
    Once every job of the batch is done, in the dead letters or cancelled,
    it is enqueued once, with ``payload`` plus ``batch_id``, ``done``,
    ``failed`` and ``cancelled``, under its ``@job`` options. The block runs
    in a transaction on ``using`` (default: ``JOBQUEUE["DATABASE"]``): if it
    raises, nothing of it is written. Raise ``UnknownJobError`` for a job
    name that is not registered, ``JobPayloadError`` for a payload the
    callback cannot take (not JSON, a count's key, or one its function
    refuses), and ``RuntimeError`` inside another batch's block: batches do
    not nest. Each is raised before anything is written.
    """
    if _open.get() is not None:
        raise RuntimeError("batches do not nest: a batch() block is already open in this context")
    name = _job_name(on_finish)
    payload = _checked_payload(payload)
    # The callback as it will be enqueued, checked now: its payload, its function's signature, its options.
    callback = prepare_job(name, {**payload, **dict.fromkeys(COUNT_KEYS, 0)}, {})
    options = {
        "queue": callback.queue,
        "priority": callback.priority,
        "max_attempts": callback.max_attempts,
        "visibility_timeout": callback.visibility_timeout,
        "timeout": callback.timeout,
        "concurrency_key": callback.concurrency_key,
        "concurrency_limit": callback.concurrency_limit,
    }
    using = using or jobqueue_settings.DATABASE
    with transaction.atomic(using=using):
        opened = OpenBatch(ops.open_batch(using, name, json.dumps(payload), json.dumps(options)), using)
        token = _open.set(opened)
        try:
            yield opened
        finally:
            _open.reset(token)
        opened.total = ops.seal_batch(using, opened.id, opened.job_ids)


def _job_name(on_finish: Any) -> str:
    name = on_finish if isinstance(on_finish, str) else getattr(on_finish, "name", None)
    if not isinstance(name, str):
        raise TypeError(f"on_finish must be a job's name or a @job function, got {type(on_finish).__name__}")
    if registry.lookup(name) is None:
        raise UnknownJobError(f"on_finish: no job is registered under {name!r}")
    return name


def _checked_payload(payload: Mapping[str, Any] | None) -> dict[str, Any]:
    if payload is None:
        return {}
    if not isinstance(payload, Mapping):
        raise JobPayloadError(
            f"a batch's payload must be a JSON object (a mapping), got {type(payload).__name__}"
        )
    taken = sorted(key for key in COUNT_KEYS if key in payload)
    if taken:
        raise JobPayloadError(f"a batch's payload may not hold {', '.join(taken)}: the batch fills them in")
    return dict(payload)
