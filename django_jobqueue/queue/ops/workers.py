"""Worker rows: a running worker registers, beats and unregisters; stale rows are pruned.

A worker's row makes its id its own while it lives: claims are fenced by the bare id.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from datetime import datetime
from typing import Any, NamedTuple

from django.db import IntegrityError, transaction

from .tables import WORKER, cursor_and_engine


def register_worker(
    using: str,
    worker_id: str,
    hostname: str,
    pid: int,
    queues_json: str,
    concurrency: int,
    stale_after: float,
    concurrency_range: tuple[int, int] | None = None,
    listen: str | None = None,
) -> bool:
    """Insert the row of a starting worker, or take over the row of an earlier one of that id.

    An earlier row is taken over only when its heartbeat is older than
    ``stale_after`` seconds, or when it is this very process's (same host and
    pid: a retried registration, or a pid reused after a crash). Return False,
    changing nothing, while another live worker holds the id: claims are fenced
    by the bare id, so two live holders could complete each other's jobs.

    ``concurrency_range`` is ``--concurrency MIN:MAX``'s bounds, None for a
    fixed number; a row taken over gets this worker's, NULL included. It is
    fixed for the worker's life, so no later write repeats it: a resize
    writes the slots alone. ``listen`` is the state of its LISTEN
    (``record_listen``), which a row taken over gets too.
    """
    low, high = concurrency_range or (None, None)
    cursor, engine = cursor_and_engine(using)
    if not engine.supports_on_conflict:
        return _register_or_take_over(
            using, worker_id, hostname, pid, queues_json, concurrency, low, high, listen, stale_after
        )
    cursor.execute(
        f"INSERT INTO {WORKER} (worker_id, hostname, pid, queues, concurrency, min_concurrency, "
        "max_concurrency, listen, started_at, last_heartbeat) "
        f"VALUES (%s, %s, %s, %s, %s, %s, %s, %s, {engine.now}, {engine.now}) "
        "ON CONFLICT (worker_id) DO UPDATE SET hostname = excluded.hostname, pid = excluded.pid, "
        "queues = excluded.queues, concurrency = excluded.concurrency, "
        "min_concurrency = excluded.min_concurrency, max_concurrency = excluded.max_concurrency, "
        "listen = excluded.listen, "
        "started_at = excluded.started_at, last_heartbeat = excluded.last_heartbeat "
        f"WHERE {WORKER}.last_heartbeat < {engine.now_minus('%s')} "
        f"OR ({WORKER}.hostname = excluded.hostname AND {WORKER}.pid = excluded.pid)",
        [worker_id, hostname, pid, queues_json, concurrency, low, high, listen, stale_after],
    )
    return cursor.rowcount == 1


def _register_or_take_over(
    using: str,
    worker_id: str,
    hostname: str,
    pid: int,
    queues_json: str,
    concurrency: int,
    low: int | None,
    high: int | None,
    listen: str | None,
    stale_after: float,
) -> bool:
    """``register_worker`` without ``ON CONFLICT``: the insert, or else the take-over, each fenced.

    An insert the unique worker id refuses is rolled back alone (a savepoint),
    and the row there is taken over on the same terms as the upsert's.
    """
    cursor, engine = cursor_and_engine(using)
    values: list[Any] = [hostname, pid, queues_json, concurrency, low, high, listen]
    try:
        with transaction.atomic(using=using):
            cursor.execute(
                f"INSERT INTO {WORKER} (worker_id, hostname, pid, queues, concurrency, min_concurrency, "
                "max_concurrency, listen, started_at, last_heartbeat) "
                f"VALUES (%s, %s, %s, %s, %s, %s, %s, %s, {engine.now}, {engine.now})",
                [worker_id, *values],
            )
            return True
    except IntegrityError:
        pass
    cursor.execute(
        f"UPDATE {WORKER} SET hostname = %s, pid = %s, queues = %s, concurrency = %s, min_concurrency = %s, "
        f"max_concurrency = %s, listen = %s, started_at = {engine.now}, last_heartbeat = {engine.now} "
        f"WHERE worker_id = %s AND (last_heartbeat < {engine.now_minus('%s')} "
        "OR (hostname = %s AND pid = %s))",
        [*values, worker_id, stale_after, hostname, pid],
    )
    return cursor.rowcount == 1


def live_worker(using: str, worker_id: str) -> tuple[str, int, datetime] | None:
    """Return the ``(hostname, pid, last_heartbeat)`` of the row of ``worker_id``, or None."""
    cursor, _ = cursor_and_engine(using)
    cursor.execute(f"SELECT hostname, pid, last_heartbeat FROM {WORKER} WHERE worker_id = %s", [worker_id])
    row = cursor.fetchone()
    return None if row is None else (row[0], row[1], row[2])


class Beat(NamedTuple):
    """What a worker's heartbeat did (``QueueClient.beat``)."""

    renewed: set[int]  # the jobs whose claims were extended
    held_up: set[int]  # the jobs whose claims hold but whose rows another transaction held
    registered: bool  # False: the worker's row is gone (pruned as stale)


def beat_worker(using: str, worker_id: str, held_up: Sequence[int] = ()) -> bool:
    """Set a worker's heartbeat to now, and the claims it could not renew; False if its row is gone.

    ``held_up`` are running jobs of the worker whose claims its beat passed
    over, their rows held by another transaction: ``tick_timeouts`` leaves them
    to the worker while its row beats (``upkeep.py``). None are stored as NULL,
    as a worker of an earlier release leaves the column.
    """
    cursor, engine = cursor_and_engine(using)
    held = json.dumps(sorted(held_up)) if held_up else None
    cursor.execute(
        f"UPDATE {WORKER} SET last_heartbeat = {engine.now}, held_claims = {engine.json_param} "
        "WHERE worker_id = %s",
        [held, worker_id],
    )
    return cursor.rowcount == 1


def resize_worker(using: str, worker_id: str, concurrency: int) -> bool:
    """Record a worker's new number of slots; False if its row is gone (pruned as stale)."""
    cursor, _ = cursor_and_engine(using)
    cursor.execute(f"UPDATE {WORKER} SET concurrency = %s WHERE worker_id = %s", [concurrency, worker_id])
    return cursor.rowcount == 1


def record_listen(using: str, worker_id: str, listen: str) -> bool:
    """Record the state of a worker's LISTEN (``Worker.listen``); False if its row is gone."""
    cursor, _ = cursor_and_engine(using)
    cursor.execute(f"UPDATE {WORKER} SET listen = %s WHERE worker_id = %s", [listen, worker_id])
    return cursor.rowcount == 1


def unregister_worker(using: str, worker_id: str) -> bool:
    """Delete a stopping worker's row; False if it was already gone."""
    cursor, _ = cursor_and_engine(using)
    cursor.execute(f"DELETE FROM {WORKER} WHERE worker_id = %s", [worker_id])
    return cursor.rowcount == 1


def prune_workers(using: str, older_than: float) -> int:
    """Delete the rows of workers whose last heartbeat is more than ``older_than`` seconds old."""
    cursor, engine = cursor_and_engine(using)
    cursor.execute(f"DELETE FROM {WORKER} WHERE last_heartbeat < {engine.now_minus('%s')}", [older_than])
    return cursor.rowcount
