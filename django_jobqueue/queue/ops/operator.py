"""Operating: the admin's and ``manage.py jobqueue``'s batches of jobs, run now or cancelled."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from django.db import IntegrityError, transaction

from . import history
from .batches import Counts, record_operator_outcomes, tally
from .dependencies import cancel_dependents, forget_waits_of
from .moves import Change, run_transition
from .tables import JOB, LIVE, UNFINISHED, cursor_and_engine, marks, notify_cancelled, notify_queues


@dataclass(frozen=True)
class JobChange:
    """A job an operator's statement changed."""

    job_id: int
    name: str
    queue: str
    # cancel_jobs: the job was running, so a worker was told to stop it.
    was_running: bool = False


def run_jobs_now(using: str, job_ids: Sequence[int]) -> list[JobChange]:
    """ready -> due now; cancelled -> ready now with attempts reset. Return the jobs changed.

    A ready job that is already due keeps its ``run_at`` (and so its place in
    line). Running, done and missing jobs are left alone, and so is a cancelled
    job whose ``unique_key`` a live job holds: there is one live job per key.
    """
    if not job_ids:
        return []
    cursor, engine = cursor_and_engine(using)
    now = engine.now
    # Read first and locked: which of them are cancelled jobs of a batch, that count as cancelled no more.
    cancelled_sql = (
        f"SELECT id, batch_id FROM {JOB} WHERE id IN ({marks(job_ids)}) "
        f"AND status = 'cancelled' AND batch_id IS NOT NULL {engine.for_update}"
    )
    key_is_free = (
        f"unique_key IS NULL OR NOT EXISTS (SELECT 1 FROM {JOB} AS holder "
        f"WHERE holder.unique_key = {JOB}.unique_key AND holder.status IN {LIVE})"
    )
    # Each column as the run makes it; a cancelled job starts its attempts again.
    run_now = Change(
        {
            "status": "'ready'",
            "run_at": f"CASE WHEN run_at > {now} THEN {now} ELSE run_at END",
            "attempts": "CASE WHEN status = 'cancelled' THEN 0 ELSE attempts END",
            "locked_by": "NULL",
            "locked_until": "NULL",
            "finished_at": "NULL",
        }
    )
    ids = list(job_ids)
    try:
        # A savepoint: a unique-key conflict leaves the caller's transaction usable.
        with transaction.atomic(using=using):
            cursor.execute(cancelled_sql, ids)
            batch_of = dict(cursor.fetchall())
            # Ready jobs stay live; cancelled ones come back from the finished jobs.
            ready = f"id IN ({marks(ids)}) AND status = 'ready'"
            cancelled = f"id IN ({marks(ids)}) AND status = 'cancelled' AND ({key_is_free})"
            changed_rows = run_transition(using, run_now, ready, ids, "id, name, queue", in_place_only=True)
            changed_rows += run_transition(
                using, run_now, cancelled, ids, "id, name, queue", to_finished=False
            )
            changed = [JobChange(*row) for row in sorted(changed_rows)]
            notify_queues(using, [change.queue for change in changed])
            revived = tally((batch_of.get(change.job_id), Counts(cancelled=-1)) for change in changed)
            if revived:
                record_operator_outcomes(using, revived)
    except IntegrityError:
        # Two cancelled jobs of one key in this batch (the NOT EXISTS of each
        # sees the other as still cancelled), or an enqueue of that key racing
        # us. One at a time, the first of a key wins and the others are skipped.
        if len(job_ids) == 1:
            return []
        return [change for job_id in job_ids for change in run_jobs_now(using, [job_id])]
    return changed


def cancel_jobs(using: str, job_ids: Sequence[int]) -> list[JobChange]:
    """ready, running or waiting -> cancelled; return the jobs changed.

    Done, cancelled and missing jobs are left alone. The jobs that wait on a
    cancelled one (``depends_on``) are cancelled too, and theirs, in the same
    transaction, and returned after it. The worker of a running job
    finds its ack refused and, on PostgreSQL, is woken on ``CANCEL_CHANNEL``
    when this transaction commits, to stop the job.
    """
    if not job_ids:
        return []
    cursor, engine = cursor_and_engine(using)
    # The cancel, its cascade over dependents, (where one is sent) its notification and the
    # counts of the jobs' batches commit together.
    with transaction.atomic(using=using):
        # A running job's attempt ends here: its history entry is written with the cancel.
        ended = history.pushed_entry(engine, history.CANCELLED, "''")
        attempts = f"CASE WHEN status = 'running' THEN {ended} ELSE attempt_history END"
        # A running job keeps its owner and a ready one has none (every way back
        # to ready clears it; the CASE makes sure): the owner returned after the
        # change tells which jobs were running, in this one statement on every database.
        cancel = Change(
            {
                "status": "'cancelled'",
                "finished_at": engine.now,
                "locked_until": "NULL",
                "locked_by": "CASE WHEN status = 'running' THEN locked_by END",
                "attempt_history": attempts,
            }
        )
        rows = sorted(
            run_transition(
                using,
                cancel,
                f"id IN ({marks(job_ids)}) AND status IN {UNFINISHED}",
                list(job_ids),
                "id, name, queue, locked_by IS NOT NULL, batch_id",
            )
        )
        changed = [JobChange(job_id, name, queue, bool(running)) for job_id, name, queue, running, _ in rows]
        notify_cancelled(using, [change.job_id for change in changed if change.was_running])
        forget_waits_of(using, [change.job_id for change in changed])
        cascade = cancel_dependents(using, [change.job_id for change in changed])
        changed += [JobChange(job_id, name, queue) for job_id, name, queue, _ in cascade]
        batch_ids = [row[4] for row in rows] + [batch_id for *_, batch_id in cascade]
        cancelled = tally((batch_id, Counts(cancelled=1)) for batch_id in batch_ids)
        if cancelled:
            record_operator_outcomes(using, cancelled)
    return changed
