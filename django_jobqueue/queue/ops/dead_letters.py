"""Dead letters: jobs that failed for good moved out of the job table, and put back or deleted.

A job is moved (copied and deleted in one transaction) when its attempts are
spent; an operator retries a dead letter (back to a ready job, attempts reset)
or deletes it. Payloads never leave the database.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from django.db import transaction

from ...models import DeadLetter, Job
from ..engines import Engine
from ..rows import JOB_COLUMNS_SQL, job_from_row
from . import returning as returning_ops
from .batches import Counts, record_operator_outcomes, record_outcomes, tally
from .dependencies import cancel_dependents, repoint_dependencies
from .returning import BY_ID, locked_ids
from .tables import (
    DEAD,
    INSERT_COLUMNS,
    JOB,
    TRACE_COLUMN,
    cursor_and_engine,
    marks,
    notify_queues,
)


def move_to_dead_letters(
    using: str,
    error_sql: str,
    traceback_sql: str,
    history_sql: str,
    where: str,
    lock: str,
    params: list[Any],
    limit: int | None = None,
    index: str | None = BY_ID,
    order: str | None = "id",
) -> int:
    """Copy the job rows matching ``where`` to the dead letters and delete them, atomically.

    ``history_sql`` is the attempt history the dead letter keeps (the job's,
    with its last attempt's entry: ``history.pushed_entry``). ``params`` fill
    ``error_sql``, ``traceback_sql``, ``history_sql`` and ``where``, in that order.
    ``limit``: at most that many, passing over rows another transaction holds.
    ``index``, ``order``: MySQL's locking read of them (``returning.locked_ids``).
    """
    cursor, engine = cursor_and_engine(using)
    where_params = params[len(params) - where.count("%s") :]
    value_params = params[: len(params) - len(where_params)]
    with transaction.atomic(using=using):
        if not engine.supports_update_returning:
            # The rows locked by a read of their own, then moved by id (MySQL: no LIMIT in an IN subquery).
            ids = locked_ids(
                using, JOB, where, where_params, engine.skip_locked if limit else lock, order, limit, index
            )
            if not ids:
                return 0
            where, where_params, lock = f"id IN ({marks(ids)})", ids, ""
        elif limit is not None:
            picked = f"SELECT id FROM {JOB} WHERE {where} LIMIT {int(limit)} {engine.skip_locked}"
            where = f"id IN ({picked}) AND {where}"
            where_params = [*where_params, *where_params]
        # Being a write, this statement takes SQLite's write lock before it reads.
        insert = (
            f"INSERT INTO {DEAD} (job_id, name, queue, payload, priority, attempts, max_attempts, "
            "visibility_timeout, timeout, concurrency_key, concurrency_limit, enqueued_at, worker_id, "
            "error, traceback, failed_at, started_at, last_attempted_at, task_backend, worker_ids, "
            "attempt_history, progress, trace_context, batch_id) "
            "SELECT id, name, queue, payload, priority, attempts, max_attempts, visibility_timeout, timeout, "
            "concurrency_key, concurrency_limit, "
            f"created_at, locked_by, {error_sql}, {traceback_sql}, {engine.now}, "
            f"started_at, last_attempted_at, task_backend, worker_ids, {history_sql}, progress, "
            f"trace_context, batch_id FROM {JOB} WHERE {where} {lock}"
        )
        if engine.supports_insert_returning:
            cursor.execute(f"{insert} RETURNING job_id, batch_id", [*value_params, *where_params])
            moved = cursor.fetchall()
        else:
            cursor.execute(insert, [*value_params, *where_params])
            moved = returning_ops.rows_of(using, JOB, where_params, "id, batch_id")
        job_ids = [row[0] for row in moved]
        # Deleted by id alone: this transaction holds their locks (the SKIP LOCKED in
        # ``where``, or ``lock``; on SQLite, the write lock) since it read them.
        returning_ops.delete_ids(using, JOB, job_ids)
        # A dead letter of a batch counts as failed, in the transaction that made it one.
        failed = tally((batch_id, Counts(failed=1)) for _job_id, batch_id in moved)
        if failed:
            record_outcomes(using, failed)
    return len(job_ids)


def _revive_sql(engine: Engine) -> str:
    """``INSERT ... SELECT`` of dead letters as ready jobs, attempts reset; the caller adds WHERE.

    The first enqueue time, the time limit, the concurrency key and limit and
    the last error, the attempt history (which goes on from there) and the last
    progress (for a job that resumes from it) and the batch are kept; the unique key is not (a
    live job may hold it by now). The key is no such hazard: it only limits how
    many run at once.
    """
    return (
        f"INSERT INTO {JOB} ({INSERT_COLUMNS}, attempt_history, progress, batch_id{TRACE_COLUMN}) "
        "SELECT name, queue, payload, priority, 'ready', 0, max_attempts, visibility_timeout, timeout, "
        "concurrency_key, concurrency_limit, "
        f"{engine.now}, 0, NULL, error, traceback, enqueued_at, task_backend, attempt_history, progress, "
        f"batch_id, trace_context FROM {DEAD}"
    )


def retry_dead_letter(using: str, dead_letter_id: int) -> Job:
    """dead letter -> ready job, attempts reset, in one transaction.

    Raise ``DeadLetter.DoesNotExist`` if it is gone (already retried or
    deleted), so that retrying twice never makes two jobs.
    """
    cursor, engine = cursor_and_engine(using)
    with transaction.atomic(using=using):
        if engine.supports_insert_returning:
            cursor.execute(
                f"{_revive_sql(engine)} WHERE id = %s {engine.for_update} RETURNING {JOB_COLUMNS_SQL}",
                [dead_letter_id],
            )
            row = cursor.fetchone()
        else:
            revived = _revived_one_by_one(using, [dead_letter_id])
            row = returning_ops.rows_of(using, JOB, revived, JOB_COLUMNS_SQL)[0] if revived else None
        if row is None:
            raise DeadLetter.DoesNotExist(f"dead letter {dead_letter_id} does not exist")
        job = job_from_row(using, row)
        old_job_id = returning_ops.delete_returning(
            using, DEAD, "id = %s", [dead_letter_id], "job_id", engine.for_update
        )[0][0]
        # Its dependents wait on the new job now.
        job.has_dependents = bool(repoint_dependencies(using, [(old_job_id, job.pk)]))
        if job.batch_id is not None:
            # Outstanding again: no longer failed, unless its batch has finished already.
            record_operator_outcomes(using, {job.batch_id: Counts(failed=-1)})
    return job


def _revived_one_by_one(using: str, dead_letter_ids: Sequence[int]) -> list[int]:
    """Revive the dead letters ``dead_letter_ids``, locked first, one insert each in id order; the new
    jobs' ids, each the driver's last (MySQL: no INSERT … RETURNING). A dead letter gone is passed over."""
    cursor, engine = cursor_and_engine(using)
    present = returning_ops.locked_ids(
        using, DEAD, f"id IN ({marks(dead_letter_ids)})", list(dead_letter_ids), engine.for_update
    )
    new_ids: list[int] = []
    for dead_letter_id in present:
        cursor.execute(f"{_revive_sql(engine)} WHERE id = %s", [dead_letter_id])
        new_ids.append(int(cursor.lastrowid))
    return new_ids


# An SQL ``SELECT`` of dead-letter ids and its parameters: the rows an operator chose.
IdsQuery = tuple[str, Sequence[Any]]


@dataclass(frozen=True)
class RetriedDeadLetter:
    """A dead letter put back on its queue: where it came from and the job it became."""

    dead_letter_id: int
    old_job_id: int
    job_id: int
    name: str
    queue: str


@dataclass(frozen=True)
class DeletedDeadLetter:
    dead_letter_id: int
    old_job_id: int
    name: str


def retry_dead_letter_batch(
    using: str, matching: IdsQuery, after_id: int, limit: int
) -> list[RetriedDeadLetter]:
    """Dead letters -> ready jobs with attempts reset: up to ``limit`` of those in
    ``matching`` whose id is above ``after_id``, lowest ids first, in one transaction.

    Each dead letter is locked, copied and deleted in that transaction, so one
    retried twice (a double submit, two operators) becomes one job: the second
    finds it gone and skips it. Return what was retried, by dead-letter id; an
    empty list means none is left (or, on PostgreSQL, that a concurrent retry of
    the same rows took this whole batch, and goes on with the rest itself).
    Payloads never leave the database.
    """
    cursor, engine = cursor_and_engine(using)
    matching_sql, matching_params = matching
    lock = engine.for_update
    with transaction.atomic(using=using):
        # On SQLite this read runs inside the write lock that an IMMEDIATE
        # transaction takes up front (see the getting-started guide).
        cursor.execute(
            f"SELECT id, job_id FROM {DEAD} WHERE id > %s AND id IN ({matching_sql}) "
            f"ORDER BY id LIMIT %s {lock}",
            [after_id, *matching_params, limit],
        )
        picked = cursor.fetchall()
        if not picked:
            return []
        ids = [row[0] for row in picked]
        # Ids are drawn in the order the ORDER BY hands rows to the insert, so
        # the new jobs sorted by id pair up with the dead letters sorted by id.
        if engine.supports_insert_returning:
            cursor.execute(
                f"{_revive_sql(engine)} WHERE id IN ({marks(ids)}) "
                "ORDER BY id RETURNING id, name, queue, batch_id",
                ids,
            )
            created = sorted(cursor.fetchall())
        else:
            new_ids = _revived_one_by_one(using, ids)
            created = sorted(returning_ops.rows_of(using, JOB, new_ids, "id, name, queue, batch_id"))
        returning_ops.delete_ids(using, DEAD, ids)
        # Their dependents wait on the new jobs now.
        repoint_dependencies(using, [(old, new[0]) for (_, old), new in zip(picked, created, strict=True)])
        notify_queues(using, [row[2] for row in created])
        revived = tally((row[3], Counts(failed=-1)) for row in created)
        if revived:
            record_operator_outcomes(using, revived)
    return [
        RetriedDeadLetter(dead_id, old_job_id, job_id, name, queue)
        for (dead_id, old_job_id), (job_id, name, queue, _batch_id) in zip(picked, created, strict=True)
    ]


def delete_dead_letter_batch(
    using: str, matching: IdsQuery, after_id: int, limit: int
) -> list[DeletedDeadLetter]:
    """Delete up to ``limit`` dead letters of ``matching`` whose id is above ``after_id``,
    lowest ids first; return those deleted (an empty list means none is left).

    A dead letter retried or deleted meanwhile is skipped. The jobs that
    waited on a deleted one (``depends_on``) are cancelled, and theirs, in the
    same transaction.
    """
    cursor, engine = cursor_and_engine(using)
    matching_sql, matching_params = matching
    with transaction.atomic(using=using):
        if engine.supports_update_returning:
            cursor.execute(
                f"DELETE FROM {DEAD} WHERE id IN (SELECT id FROM {DEAD} WHERE id > %s "
                f"AND id IN ({matching_sql}) ORDER BY id LIMIT %s) RETURNING id, job_id, name",
                [after_id, *matching_params, limit],
            )
            rows = cursor.fetchall()
        else:
            # MySQL: the dead letters locked by a read of their own (no LIMIT in an IN subquery).
            where = f"id > %s AND id IN ({matching_sql})"
            rows = returning_ops.delete_returning(
                using, DEAD, where, [after_id, *matching_params], "id, job_id, name", engine.for_update, limit
            )
        deleted = [DeletedDeadLetter(*row) for row in sorted(rows)]
        cascade = cancel_dependents(using, [row.old_job_id for row in deleted])
        cancelled = tally((batch_id, Counts(cancelled=1)) for *_, batch_id in cascade)
        if cancelled:
            record_operator_outcomes(using, cancelled)
    return deleted
