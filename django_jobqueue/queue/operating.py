"""``QueueClient``'s operator's side: cancels, runs now, dead letters, pauses, upkeep.

What the admin, ``manage.py jobqueue`` and a project's own code call to change
jobs and queues from outside the worker. Each call is one transaction, or one
per batch of rows, and none holds a lock that a worker waits on for longer
than a moment (docs/guarantees.md, "What a worker never waits on").
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterable, Sequence
from typing import Any

from django.core.exceptions import EmptyResultSet
from django.db.models import QuerySet

from ..conf import jobqueue_settings
from ..models import DeadLetter, Job
from . import ops
from .conflicts import retried, run_retrying
from .refs import DeadLetters, Duration, JobRef, as_id, job_ids
from .validation import check_queue, to_seconds


class Operating:
    """The operator's calls of ``QueueClient`` on database ``using``."""

    using: str

    def tick_timeouts(self) -> int:
        """Expired claims -> ready (or dead letter when spent); return how many were handled."""
        return ops.tick_timeouts(self.using)

    def finish_batches(self) -> list[int]:
        """Settle the batches that an outcome left unsettled; return the ids of those finished.

        The tick's repair pass: a batch finishes in the transaction of its last
        job's outcome, or once an operator's change of it commits; this finds
        one left with no live job and no callback, or with pending counts, only
        if a process stopped between the two or a job left it uncounted.
        """
        return ops.finish_batches(self.using)

    @retried
    def retry_dead_letter(self, dead_letter: DeadLetter | int) -> Job:
        """Put a dead letter back on its queue as a ready job with attempts reset.

        Raise ``DeadLetter.DoesNotExist`` if it was already retried or deleted.
        """
        dead_letter_id = dead_letter.pk if isinstance(dead_letter, DeadLetter) else dead_letter
        return ops.retry_dead_letter(self.using, as_id(dead_letter_id))

    @retried
    def cancel(self, job: JobRef) -> bool:
        """ready, running or waiting -> cancelled; False if the job is finished or gone.

        The jobs that wait on it (``depends_on``) are cancelled with it, and theirs.

        A running job's worker learns of it from ``ended_claims``; on PostgreSQL
        it is also woken on ``CANCEL_CHANNEL`` when the cancel commits.
        """
        return bool(ops.cancel_jobs(self.using, [as_id(job.pk if isinstance(job, Job) else job)]))

    def prune(self, older_than: Duration | None = None) -> int:
        """Delete done and cancelled jobs older than ``KEEP_COMPLETED`` (or ``older_than``)."""
        seconds = jobqueue_settings.KEEP_COMPLETED if older_than is None else older_than
        return ops.prune(self.using, to_seconds(seconds, "older_than"))

    def repair_dependencies(self) -> int:
        """Release waiting jobs that no outstanding dependency holds; return how many.

        A backstop the ticker runs every tick: acks, cancels and retries keep
        dependencies in step in their own transactions, but an ack passes over
        the rows an operator's open transaction holds.
        """
        return ops.repair_waiting(self.using)

    def flag_dependencies_now(self) -> None:
        """Mark now the jobs the caller's transaction named in ``depends_on``, as its commit would.

        For a transaction that never commits (a test's): ``django_jobqueue.testing.run_jobs``
        calls it before it claims, so that an ack releases the dependents. Nothing to do off
        PostgreSQL, where the enqueue marks them at once.
        """
        ops.flag_dependencies_now(self.using)

    # -- pauses ----------------------------------------------------------------

    @retried
    def pause_queue(self, queue: str) -> bool:
        """Stop every worker claiming from ``queue``; False if it was already paused.

        Enqueue still works and running jobs finish. The pause is a row in the
        database: it holds for every worker, and across restarts, until
        ``resume_queue``. Raise ``ValueError`` for a malformed queue name.
        """
        return ops.pause_queue(self.using, check_queue(queue))

    @retried
    def resume_queue(self, queue: str) -> bool:
        """Let workers claim from ``queue`` again; False if it was not paused.

        On PostgreSQL idle workers of the queue are woken when this commits.
        Raise ``ValueError`` for a malformed queue name.
        """
        return ops.resume_queue(self.using, check_queue(queue))

    def paused_queues(self) -> list[str]:
        """The names of the paused queues, in order."""
        return ops.paused_queues(self.using)

    # -- in bulk: the admin and ``manage.py jobqueue`` ----------------------------

    def retry_jobs_now(self, jobs: Iterable[JobRef]) -> list[ops.JobChange]:
        """Make ready jobs due now; put cancelled jobs back on their queue with attempts reset.

        Return the jobs changed. Running, done and missing jobs are skipped, and so
        is a cancelled job whose ``unique_key`` a live job holds.
        """
        chunks = ops.batched(job_ids(jobs), ops.ROWS_PER_STATEMENT)
        return [change for chunk in chunks for change in self._each(ops.run_jobs_now, chunk)]

    def cancel_jobs(self, jobs: Iterable[JobRef]) -> list[ops.JobChange]:
        """ready or running -> cancelled; return the jobs changed (finished and missing ones are skipped).

        Each ``JobChange`` says whether the job was running; as ``cancel`` does,
        a batch that cancelled running jobs wakes their workers on PostgreSQL.
        """
        chunks = ops.batched(job_ids(jobs), ops.ROWS_PER_STATEMENT)
        return [change for chunk in chunks for change in self._each(ops.cancel_jobs, chunk)]

    def _each(
        self, step: Callable[[str, Sequence[int]], list[ops.JobChange]], chunk: Sequence[int]
    ) -> list[ops.JobChange]:
        """``step`` (one transaction) of one chunk of jobs, run again on a conflict (``run_retrying``)."""
        return run_retrying(self.using, lambda: step(self.using, chunk))

    def retry_dead_letters(
        self,
        dead_letters: DeadLetters,
        *,
        batch_size: int = 500,
        on_batch: Callable[[list[ops.RetriedDeadLetter]], None] | None = None,
    ) -> int:
        """Put dead letters back on their queues as ready jobs with attempts reset; return how many.

        ``dead_letters`` is a ``DeadLetter`` queryset, however large (a filtered
        admin list, ``--all``), or dead letters or their ids. They are retried in
        batches of ``batch_size``, each one transaction, without loading them into
        memory; ``on_batch`` is called with each batch. A dead letter that is
        already gone (retried or deleted) is skipped: it never becomes two jobs.
        """
        return self._dead_letters_in_batches(ops.retry_dead_letter_batch, dead_letters, batch_size, on_batch)

    def delete_dead_letters(
        self,
        dead_letters: DeadLetters,
        *,
        batch_size: int = 500,
        on_batch: Callable[[list[ops.DeletedDeadLetter]], None] | None = None,
    ) -> int:
        """Delete dead letters (a queryset, or dead letters or ids) in batches; return how many.

        ``on_batch`` is called with each batch deleted; one already gone is skipped.
        """
        return self._dead_letters_in_batches(ops.delete_dead_letter_batch, dead_letters, batch_size, on_batch)

    def _dead_letters_in_batches(
        self,
        step: Callable[[str, Any, int, int], Sequence[Any]],
        dead_letters: DeadLetters,
        batch_size: int,
        on_batch: Callable[[Any], None] | None,
    ) -> int:
        """Run ``step`` (one transaction a batch) over the matching dead letters, in id order."""
        matching = _dead_letter_query(dead_letters, self.using)
        if matching is None:
            return 0
        limit = _batch_size(batch_size)
        done, after_id = 0, 0
        while True:
            # Each batch run again on a conflict alone: the batches before it are committed.
            batch = run_retrying(self.using, functools.partial(step, self.using, matching, after_id, limit))
            if not batch:
                return done
            done += len(batch)
            after_id = batch[-1].dead_letter_id
            if on_batch is not None:
                on_batch(batch)


def _batch_size(value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"batch_size must be a positive integer, got {value!r}")
    return value


def _dead_letter_query(dead_letters: DeadLetters, using: str) -> ops.IdsQuery | None:
    """Compile the dead letters chosen into an SQL ``SELECT`` of their ids; None if none can match."""
    if isinstance(dead_letters, QuerySet):
        if dead_letters.model is not DeadLetter:
            raise TypeError(f"expected a DeadLetter queryset, got one of {dead_letters.model.__name__}")
        queryset = dead_letters
    else:
        ids = [as_id(d.pk if isinstance(d, DeadLetter) else d) for d in dead_letters]
        queryset = DeadLetter.objects.filter(pk__in=ids)
    try:
        sql, params = queryset.order_by().values("pk").query.get_compiler(using=using).as_sql()
    except EmptyResultSet:
        return None
    return sql, tuple(params)
