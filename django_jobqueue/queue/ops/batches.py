"""Batches: the jobs of one ``with batch(...)`` block, counted as they finish, and their one callback.

A batch's counts (``done``, ``failed``, ``cancelled``) move in the transaction
that records each of its jobs' outcomes, so no crash can leave them behind the
jobs. Whether the batch has finished is read from the rows: no job of it is
unfinished (ready, running, or waiting on a dependency) any more. The callback is enqueued in the transaction
that finds that, under the batch row's lock, and ``finished_at`` set with it:
exactly once.

A worker's outcome updates the batch's row. An operator's change (a cancel,
a run-now, a dead letter retried or deleted) must not: it may be made in a
transaction of the project's that stays open, and the workers' acks of the
batch's other jobs would wait on the row all that while. It appends its
counts to ``BatchCount`` instead, and once it commits they are added to the
row, and the batch finished if that was its last job (``settle_batches``),
in a short transaction of its own; the tick does it for any left behind.

What serialises two last outcomes of one batch committing at the same instant
is the batch row. On PostgreSQL each transaction updates it (a row lock,
held to its commit) and only then asks, in a statement of its own and so
with a snapshot taken after the lock was granted, whether a live job is
left: the second one to get the lock sees the first's outcome committed, and
the first could not see the second's (it was not committed), so exactly one
of them finds none left. On SQLite an ``IMMEDIATE`` transaction holds the
database's one write lock from its start. Every statement that takes a
batch's job out of ready and running locks its batch row after the job rows
and locks batch rows in id order, so these locks never wait in a cycle. The
tick's ``finish_batches`` is the repair for anything that ended a batch's job
without counting it: it looks only at the rows.
"""

from __future__ import annotations

import functools
import json
import logging
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, NamedTuple

from django.db import transaction

from ...models import Batch, BatchCount
from ..conflicts import run_retrying
from ..engines import Engine
from .enqueue import insert_jobs
from .returning import delete_returning, update_returning
from .tables import (
    JOB,
    ROWS_PER_STATEMENT,
    UNFINISHED,
    NewJob,
    batched,
    cursor_and_engine,
    insert_rows,
    marks,
)

logger = logging.getLogger(__name__)

BATCH = Batch._meta.db_table
PENDING = BatchCount._meta.db_table
# The outcomes that operators' changes counted of the outer statement's batch, not yet on its row.
PENDING_OUTCOMES = (
    f"(SELECT COALESCE(SUM(done + failed + cancelled), 0) FROM {PENDING} "
    f"WHERE {PENDING}.batch_id = {BATCH}.id)"
)
# The callback's payload keys that the batch fills in.
COUNT_KEYS = ("batch_id", "done", "failed", "cancelled")
# Unfinished batches a repair pass looks at, at most.
REPAIR_BATCH = 100


def live_job(engine: Engine) -> str:
    """A job of the outer statement's batch row not finished yet: live, or waiting on a dependency
    (one probe of the jobqueue_batch_idx index)."""
    unfinished = f"{JOB}.{engine.batch_status} IN {UNFINISHED}"
    return f"SELECT 1 FROM {JOB} WHERE {JOB}.batch_id = {BATCH}.id AND {unfinished}"


class Counts(NamedTuple):
    """What one statement changed of a batch's counts (a retry takes one back: -1)."""

    done: int = 0
    failed: int = 0
    cancelled: int = 0


def tally(pairs: Iterable[tuple[int | None, Counts]]) -> dict[int, Counts]:
    """Sum ``(batch_id, counts)`` pairs by batch; jobs of no batch (None) are left out."""
    summed: dict[int, Counts] = {}
    for batch_id, counts in pairs:
        if batch_id is None:
            continue
        done, failed, cancelled = summed.get(batch_id, Counts())
        summed[batch_id] = Counts(done + counts.done, failed + counts.failed, cancelled + counts.cancelled)
    return summed


def open_batch(using: str, on_finish: str, payload_json: str, options_json: str) -> int:
    """Insert a batch with no jobs yet and return its id; then, in its transaction, ``seal_batch``."""
    cursor, engine = cursor_and_engine(using)
    returning = " RETURNING id" if engine.supports_insert_returning else ""
    cursor.execute(
        f"INSERT INTO {BATCH} (on_finish, payload, callback_options, total, done, failed, cancelled, "
        f"created_at) VALUES (%s, %s, %s, 0, 0, 0, 0, {engine.now}){returning}",
        [on_finish, payload_json, options_json],
    )
    # MySQL: the id the one row's insert drew.
    batch_id: int = cursor.fetchone()[0] if returning else cursor.lastrowid
    return batch_id


def seal_batch(using: str, batch_id: int, job_ids: Sequence[int]) -> int:
    """Make the ready jobs ``job_ids`` of no batch the jobs of ``batch_id``, fix its total, return it.

    Run in the transaction that opened the batch and inserted the jobs, so
    that no job of it is seen before the batch is whole. A batch with no
    jobs has finished at once: its callback is enqueued here. A job that an
    enqueue's ``unique_key`` returned in place of a new one (a live job
    holding the key) joins only if it is ready (or waiting on a dependency)
    and of no batch: one already
    running was claimed without the batch and would finish uncounted.
    """
    cursor, engine = cursor_and_engine(using)
    total = 0
    for chunk in batched(list(dict.fromkeys(job_ids)), ROWS_PER_STATEMENT):
        cursor.execute(
            f"UPDATE {engine.by_id(JOB)} SET batch_id = %s WHERE id IN ({marks(chunk)}) "
            "AND batch_id IS NULL AND status IN ('ready', 'waiting')",
            [batch_id, *chunk],
        )
        total += cursor.rowcount
    cursor.execute(f"UPDATE {BATCH} SET total = %s WHERE id = %s", [total, batch_id])
    if total == 0:
        _fire_finished(using, [batch_id])
    return total


def record_outcomes(using: str, outcomes: Mapping[int, Counts]) -> list[int]:
    """Add each batch's ``Counts`` to it and enqueue the callback of each one that has now finished.

    Run in the transaction that wrote those outcomes, after the job rows'
    writes. One update per batch, in id order; a batch already finished is
    left as its callback saw it (a job retried after that runs on its own).
    Return the ids of the batches that finished here.
    """
    cursor, engine = cursor_and_engine(using)
    due: list[int] = []
    sets = "done = done + %s, failed = failed + %s, cancelled = cancelled + %s"
    left = f"total - done - failed - cancelled - {PENDING_OUTCOMES}"
    for batch_id in sorted(outcomes):
        done, failed, cancelled = outcomes[batch_id]
        if engine.supports_update_returning:
            cursor.execute(
                f"UPDATE {BATCH} SET {sets} WHERE id = %s AND finished_at IS NULL RETURNING {left}",
                [done, failed, cancelled, batch_id],
            )
            row = cursor.fetchone()
        else:
            rows = update_returning(
                using,
                BATCH,
                sets,
                [done, failed, cancelled],
                "id = %s AND finished_at IS NULL",
                [batch_id],
                left,
                engine.for_update,
            )
            row = rows[0] if rows else None
        # The counts only say when to look; the rows decide (see _fire_finished).
        if row is not None and row[0] <= 0:
            due.append(batch_id)
    return _fire_finished(using, due) if due else []


def record_operator_outcomes(using: str, outcomes: Mapping[int, Counts]) -> None:
    """Count an operator's changes of batches' jobs without locking the batches' rows.

    Run in the operator's transaction: the counts are appended to
    ``BatchCount``, and once the transaction commits each batch takes them and
    finishes if it has no live job left (``settle_batches``, which the tick's
    ``finish_batches`` repeats for any the process did not get to).
    """
    rows = [(batch_id, *outcomes[batch_id]) for batch_id in sorted(outcomes) if any(outcomes[batch_id])]
    if not rows:
        return
    insert_rows(using, PENDING, ("batch_id", "done", "failed", "cancelled"), rows)
    settle = functools.partial(settle_batches, using, [row[0] for row in rows])
    transaction.on_commit(settle, using=using, robust=True)


def settle_batches(using: str, batch_ids: Sequence[int]) -> list[int]:
    """Add each batch's pending counts to its row, and finish it if no live job is left; return the finished.

    One short transaction per batch, which waits on the batch's row: only
    other short transactions take it (a worker's round, this, the tick).
    """
    finished: list[int] = []
    for batch_id in sorted(set(batch_ids)):
        finished += run_retrying(using, functools.partial(_settle_one, using, batch_id, wait=True))
    return finished


def _settle_one(using: str, batch_id: int, *, wait: bool) -> list[int]:
    """One batch's pending counts added and, its last job done, its callback enqueued; under its row's
    lock, waited for or (not ``wait``) passed over while another transaction holds it."""
    cursor, engine = cursor_and_engine(using)
    with transaction.atomic(using=using):
        lock = engine.for_update if wait else engine.skip_locked
        cursor.execute(f"SELECT id FROM {BATCH} WHERE id = %s {lock}", [batch_id])
        if cursor.fetchone() is None:
            return []
        # Its pending counts are added first, whether or not it finishes now.
        return _fire_finished(using, [batch_id])


def take_pending(using: str, batch_ids: Sequence[int]) -> None:
    """Add the pending counts of ``batch_ids`` to their rows (a finished batch's are dropped).

    The caller holds the batches' rows. Each pending row is deleted and
    returned by one statement, so one that an operator adds meanwhile waits
    for the next time, counted once.
    """
    cursor, engine = cursor_and_engine(using)
    taken = f"batch_id IN ({marks(batch_ids)})"
    if engine.supports_delete_returning:
        cursor.execute(
            f"DELETE FROM {PENDING} WHERE {taken} RETURNING batch_id, done, failed, cancelled",
            list(batch_ids),
        )
        rows = cursor.fetchall()
    else:
        rows = delete_returning(
            using,
            PENDING,
            taken,
            list(batch_ids),
            "batch_id, done, failed, cancelled",
            engine.for_update,
            index="jobqueue_batchcount_idx",
        )
    summed = tally((row[0], Counts(*row[1:])) for row in rows)
    for batch_id, (done, failed, cancelled) in sorted(summed.items()):
        cursor.execute(
            f"UPDATE {BATCH} SET done = done + %s, failed = failed + %s, cancelled = cancelled + %s "
            "WHERE id = %s AND finished_at IS NULL",
            [done, failed, cancelled, batch_id],
        )


def finish_batches(using: str) -> list[int]:
    """Enqueue the callback of every batch with no live job left whose callback is not enqueued yet.

    The tick's repair: a batch finishes in the transaction of its last
    outcome, so this finds one only if a job of it left ready and running
    without being counted. Each batch is locked (passed over while another
    transaction holds it) and checked again before its callback goes.
    Return the ids of the batches finished.
    """
    cursor, engine = cursor_and_engine(using)
    cursor.execute(
        f"SELECT id FROM {BATCH} WHERE finished_at IS NULL AND NOT EXISTS ({live_job(engine)}) "
        "ORDER BY id LIMIT %s",
        [REPAIR_BATCH],
    )
    candidates = [row[0] for row in cursor.fetchall()]
    # And the batches an operator's counts wait for: their process stopped before it settled them.
    cursor.execute(f"SELECT DISTINCT batch_id FROM {PENDING} ORDER BY batch_id LIMIT %s", [REPAIR_BATCH])
    pending = [row[0] for row in cursor.fetchall()]
    finished: list[int] = []
    for batch_id in sorted({*candidates, *pending}):
        fired = run_retrying(using, functools.partial(_settle_one, using, batch_id, wait=False))
        for fired_id in fired:
            logger.warning(
                "batch %s finished by the repair pass: its last job's outcome did not finish it", fired_id
            )
        finished += fired
    return finished


def _fire_finished(using: str, batch_ids: Sequence[int]) -> list[int]:
    """Enqueue the callback of each batch of ``batch_ids`` that has no live job and none enqueued yet.

    The caller holds each batch row's lock (on SQLite, the write lock); the
    read here is a statement of its own, so on PostgreSQL it sees every
    outcome committed before that lock was granted. The callback's counts
    include the operators' pending ones, taken first.
    """
    take_pending(using, batch_ids)
    cursor, engine = cursor_and_engine(using)
    cursor.execute(
        f"SELECT id, on_finish, payload, callback_options, done, failed, cancelled FROM {BATCH} "
        f"WHERE id IN ({marks(batch_ids)}) AND finished_at IS NULL "
        f"AND NOT EXISTS ({live_job(engine)}) ORDER BY id",
        list(batch_ids),
    )
    finished: list[int] = []
    for batch_id, on_finish, payload, options, done, failed, cancelled in cursor.fetchall():
        counts = {"batch_id": batch_id, "done": done, "failed": failed, "cancelled": cancelled}
        callback = insert_jobs(using, [_callback(on_finish, _json(payload), _json(options), counts)])[0]
        cursor.execute(
            f"UPDATE {BATCH} SET finished_at = {engine.now}, callback_job_id = %s WHERE id = %s",
            [callback.pk, batch_id],
        )
        logger.info(
            "batch %s finished (%s done, %s failed, %s cancelled): enqueued %s as job %s",
            batch_id,
            done,
            failed,
            cancelled,
            on_finish,
            callback.pk,
        )
        finished.append(batch_id)
    return finished


def _json(value: Any) -> Any:
    return json.loads(value) if isinstance(value, str | bytes) else value


def _callback(name: str, payload: dict[str, Any], options: dict[str, Any], counts: dict[str, int]) -> NewJob:
    """The callback job: its payload and the counts, with the options fixed when the batch was opened."""
    return NewJob(
        name=name,
        queue=options["queue"],
        payload_json=json.dumps({**payload, **counts}),
        priority=options["priority"],
        max_attempts=options["max_attempts"],
        visibility_timeout=options["visibility_timeout"],
        timeout=options["timeout"],
        run_at=None,
        delay=0.0,
        unique_key=None,
        concurrency_key=options.get("concurrency_key"),
        concurrency_limit=options.get("concurrency_limit"),
    )
