"""Operating: the admin's and ``manage.py jobqueue``'s batches of jobs, run now or cancelled."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from django.db import IntegrityError, transaction

from .tables import JOB, LIVE, cursor_and_engine, marks, notify_queues


@dataclass(frozen=True)
class JobChange:
    """A job an operator's statement changed."""

    job_id: int
    name: str
    queue: str


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
    key_is_free = (
        f"unique_key IS NULL OR NOT EXISTS (SELECT 1 FROM {JOB} AS holder "
        f"WHERE holder.unique_key = {JOB}.unique_key AND holder.status IN {LIVE})"
    )
    try:
        # A savepoint: a unique-key conflict leaves the caller's transaction usable.
        with transaction.atomic(using=using):
            cursor.execute(
                f"UPDATE {JOB} SET status = 'ready', "
                f"run_at = CASE WHEN run_at > {now} THEN {now} ELSE run_at END, "
                "attempts = CASE WHEN status = 'cancelled' THEN 0 ELSE attempts END, "
                "locked_by = NULL, locked_until = NULL, finished_at = NULL "
                f"WHERE id IN ({marks(job_ids)}) "
                f"AND (status = 'ready' OR (status = 'cancelled' AND ({key_is_free}))) "
                "RETURNING id, name, queue",
                list(job_ids),
            )
            changed = [JobChange(*row) for row in sorted(cursor.fetchall())]
            notify_queues(using, [change.queue for change in changed])
    except IntegrityError:
        # Two cancelled jobs of one key in this batch (the NOT EXISTS of each
        # sees the other as still cancelled), or an enqueue of that key racing
        # us. One at a time, the first of a key wins and the others are skipped.
        if len(job_ids) == 1:
            return []
        return [change for job_id in job_ids for change in run_jobs_now(using, [job_id])]
    return changed


def cancel_jobs(using: str, job_ids: Sequence[int]) -> list[JobChange]:
    """ready or running -> cancelled; return the jobs changed.

    Done, cancelled and missing jobs are left alone. The worker of a running job
    then finds its ack refused.
    """
    if not job_ids:
        return []
    cursor, engine = cursor_and_engine(using)
    cursor.execute(
        f"UPDATE {JOB} SET status = 'cancelled', finished_at = {engine.now}, locked_until = NULL "
        f"WHERE id IN ({marks(job_ids)}) AND status IN {LIVE} RETURNING id, name, queue",
        list(job_ids),
    )
    return [JobChange(*row) for row in sorted(cursor.fetchall())]
