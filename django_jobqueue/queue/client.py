"""``QueueClient``: the queue's state machine, as ``runworker`` and custom workers use it.

It validates arguments, has new jobs prepared (``preparation.py``), and calls
the statements in ``ops/``; it holds no state of its own beyond the database alias.
"""

from __future__ import annotations

import functools
import json
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from contextlib import nullcontext
from datetime import timedelta
from typing import Any, TypeVar

from django.core.exceptions import EmptyResultSet
from django.db import OperationalError, connections, transaction
from django.db.models import QuerySet

from .. import collector
from ..conf import jobqueue_settings
from ..exceptions import WorkerIdInUse
from ..models import DeadLetter, Job
from . import batching, ops
from .backoff import backoff_delay
from .conflicts import is_lock_timeout, retried, run_retrying
from .engines import engine_for
from .ops.limited import FlowState
from .preparation import Item, copyable, prepare_job, prepared
from .progress import check_progress, encode_progress
from .tracing import traced_insert
from .validation import (
    MAX_ERROR_CHARS,
    MAX_TRACEBACK_CHARS,
    check_queue,
    check_worker_id,
    clean_text,
    encode_result,
    to_seconds,
)

JobRef = Job | int
T = TypeVar("T")
# Seconds a client's batches of acks pass over held rows at once after one of them met one.
PASS_OVER_FOR = 5.0
Duration = timedelta | float | int
DeadLetters = QuerySet[DeadLetter] | Iterable[DeadLetter | int]


class QueueClient:
    """The queue on database ``using`` (default: the ``JOBQUEUE["DATABASE"]`` setting)."""

    def __init__(self, using: str | None = None) -> None:
        self.using = using or jobqueue_settings.DATABASE
        # What this client's claims learnt of limited jobs, for its next claim.
        self.flow = FlowState()
        # synchronous_commit of this client's claims and rounds on PostgreSQL; None:
        # the database's own. A worker sets JOBQUEUE["WORKER_SYNCHRONOUS_COMMIT"].
        self.round_commit: str | None = None
        # Until when (time.monotonic()) batches of acks pass over held rows at once (_held_rows_met).
        self._passing_over_until = 0.0

    def __repr__(self) -> str:
        return f"QueueClient(using={self.using!r})"

    # -- producing -------------------------------------------------------------

    def push(self, name: str, payload: Mapping[str, Any] | None = None, **options: Any) -> Job:
        """Enqueue one job and return it (see ``enqueue``)."""
        return self._insert_one(prepare_job(name, payload, options))

    def push_many(self, items: Iterable[Item]) -> list[Job]:
        """Enqueue ``(name, payload, options)`` triples in one batch; a bad one writes nothing.

        A batch that ``ops.copy_jobs`` writes is checked as it streams: a bad
        item aborts the COPY and rolls it back. Any other batch is checked
        whole before its first statement.
        """
        with collector.paused():
            return self._push_many(list(items))

    def _push_many(self, items: list[Item]) -> list[Job]:
        batching.check_database(self.using)
        jobs = prepared(items)
        if ops.writes_by_copy(self.using, len(items)) and copyable(items):
            return batching.joined(
                traced_insert(
                    lambda trace_context: ops.copy_jobs(self.using, len(items), jobs, trace_context),
                    "jobqueue.enqueue_many",
                    {"messaging.batch.message_count": len(items)},
                )
            )
        new_jobs = list(jobs)
        insert = _waiting_insert(self.using) if any(new.depends_on for new in new_jobs) else ops.insert_jobs
        return batching.joined(
            traced_insert(
                lambda trace_context: insert(self.using, new_jobs, trace_context),
                "jobqueue.enqueue_many",
                {"messaging.batch.message_count": len(new_jobs)},
            )
        )

    def push_task(self, backend: str, name: str, payload: Mapping[str, Any], **options: Any) -> Job:
        """Enqueue one job of Django's Tasks framework, marked with its ``TASKS`` alias; return it.

        As ``push``, plus the mark: a worker finds a marked job's function by
        its name, the task's module path. Raise ``ValueError`` for an alias
        that is empty or longer than the column holds.
        """
        longest = Job._meta.get_field("task_backend").max_length or 0  # a CharField always has one
        if not isinstance(backend, str) or not 0 < len(backend) <= longest:
            raise ValueError(f"task backend alias must be 1 to {longest} characters, got {backend!r}")
        return self._insert_one(prepare_job(name, payload, options)._replace(task_backend=backend))

    def _insert_one(self, new_job: ops.NewJob) -> Job:
        """Insert ``new_job``, with the trace context it is enqueued in, and return it."""
        batching.check_database(self.using)
        insert = _waiting_insert(self.using) if new_job.depends_on else ops.insert_jobs
        job = traced_insert(
            lambda trace_context: insert(self.using, [new_job], trace_context)[0],
            f"jobqueue.enqueue {new_job.name}",
            {"messaging.destination.name": new_job.queue},
        )
        batching.joined([job])
        return job

    # -- claiming --------------------------------------------------------------

    def pull(self, *queues: str, worker_id: str, visibility_timeout: Duration | None = None) -> Job | None:
        """Claim the next due job of ``queues`` (all queues if none are named), or return None."""
        jobs = self.pull_many(*queues, worker_id=worker_id, limit=1, visibility_timeout=visibility_timeout)
        return jobs[0] if jobs else None

    def pull_many(
        self,
        *queues: str,
        worker_id: str,
        limit: int = 50,
        visibility_timeout: Duration | None = None,
    ) -> list[Job]:
        """Claim up to ``limit`` due jobs: highest priority first, then oldest ``run_at``."""
        queue_limits = [(q, limit) for q in dict.fromkeys(queues)] or None
        return self.claim(worker_id, queue_limits, limit, visibility_timeout)

    @retried
    def claim(
        self,
        worker_id: str,
        queue_limits: Sequence[tuple[str, int]] | None,
        limit: int | None,
        visibility_timeout: Duration | None = None,
    ) -> list[Job]:
        """Claim up to ``limit`` jobs, at most ``queue_limits[q]`` from each queue, in one statement.

        This is what a worker sharing its free slots between weighted queues calls.
        ``queue_limits=None`` takes from every queue and then needs a ``limit``.
        """
        if queue_limits is not None:
            queue_limits = [(check_queue(q), _check_limit(n)) for q, n in queue_limits]
            if not queue_limits:
                return []
        elif limit is None:
            raise ValueError("claiming from every queue needs a limit")
        if limit is not None:
            _check_limit(limit)
        timeout = None
        if visibility_timeout is not None:
            timeout = to_seconds(visibility_timeout, "visibility_timeout", allow_zero=False)
        return ops.claim(
            self.using, check_worker_id(worker_id), queue_limits, limit, timeout, self.flow, self.round_commit
        )

    # -- completing ------------------------------------------------------------

    @retried
    def ack(self, job: JobRef, *, worker_id: str, result: Any = None) -> bool:
        """running -> done; False (and nothing changed) if this claim is no longer current.

        ``result`` must be JSON; it is kept with the job while completed jobs are
        kept (``KEEP_COMPLETED``). With ``KEEP_COMPLETED = 0`` the job is deleted.
        """
        keep = jobqueue_settings.KEEP_COMPLETED > 0
        result_json = encode_result(result) if keep else None
        if isinstance(job, Job) and job.batch_id is None:
            return ops.complete(self.using, _fence(job, worker_id), result_json, keep)
        # A job of a batch, or one known by its id alone: its batch counts it in the ack's transaction.
        return ops.complete_counted(self.using, _fence(job, worker_id), result_json, keep)

    @retried
    def ack_many(self, acks: Sequence[tuple[Job, Any]], *, worker_id: str) -> set[tuple[int, int]]:
        """Ack ``(job, result)`` pairs of claims ``pull`` returned, in one statement.

        Return the ``(id, claim_token)`` of the claims acked. Each ack is fenced
        by its own claim's token, exactly as ``ack`` given the ``Job``: a job
        whose claim is no longer current is left unchanged and missing from the result.
        On PostgreSQL a job whose row another transaction holds (an operator's
        cancel still open, an enqueue naming it in ``depends_on``) is passed
        over rather than waited on, and missing too: ``ended_claims`` tells
        the two apart, and such an ack goes through once that transaction ends.
        """
        completions = self._completions(acks)
        if not completions:
            return set()
        keep = jobqueue_settings.KEEP_COMPLETED > 0
        batch_of = _batch_of(acks)
        worker_id = check_worker_id(worker_id)

        def write(wait: ops.AckWait) -> set[tuple[int, int]]:
            with transaction.atomic(using=self.using) if batch_of else nullcontext():
                acked = ops.complete_many(self.using, worker_id, completions, keep, wait)
                if batch_of:
                    self._count_done(batch_of, acked)
            return acked

        return self._held_rows_met(write)

    def _held_rows_met(self, write: Callable[[ops.AckWait], T]) -> T:
        """``write(wait)``, a batch of acks: a row another transaction holds met as ``wait`` says.

        Outside a transaction of the caller's, the batch first waits on a held
        row ``BRIEF_LOCK_WAIT`` at most, which takes no lock of its own per ack
        (a worker's round, the hot path); if the database ends it there, it is
        written again passing over the rows held, and so are this client's
        batches for the next ``PASS_OVER_FOR`` seconds. Inside one, it passes
        over at once: a lock timeout must not reach the caller's transaction.
        """
        engine = engine_for(connections[self.using])
        in_transaction = connections[self.using].in_atomic_block
        if engine.lock_timeout_sql is None or in_transaction or time.monotonic() < self._passing_over_until:
            return write(ops.PASS_OVER)
        try:
            return write(ops.WAIT_BRIEFLY)
        except OperationalError as error:
            if not is_lock_timeout(self.using, error):
                raise
        self._passing_over_until = time.monotonic() + PASS_OVER_FOR
        return write(ops.PASS_OVER)

    def _count_done(self, batch_of: Mapping[int, int], acked: set[tuple[int, int]]) -> None:
        """Count the acked jobs of batches as done: one update per batch, in the acks' transaction."""
        done = ops.tally((batch_of.get(job_id), ops.Counts(done=1)) for job_id, _token in acked)
        if done:
            ops.record_outcomes(self.using, done)

    @staticmethod
    def _completions(acks: Sequence[tuple[Job, Any]]) -> list[tuple[int, int, str | None]]:
        keep = jobqueue_settings.KEEP_COMPLETED > 0
        return [
            (_as_id(job.pk), job.claim_token, encode_result(result) if keep else None) for job, result in acks
        ]

    @retried
    def ack_and_claim(
        self,
        acks: Sequence[tuple[Job, Any]],
        *,
        worker_id: str,
        queue_limits: Sequence[tuple[str, int]] | None,
        limit: int,
        visibility_timeout: Duration | None = None,
    ) -> tuple[set[tuple[int, int]], list[Job]]:
        """``ack_many(acks)`` then ``claim(...)`` (skipped when ``limit`` is 0), in one transaction.

        A worker's round: one commit, and so one flush of the database's log,
        both finishes a batch and claims the slots it frees. Return what each
        returns (an ack passed over as ``ack_many`` passes it over is missing).
        If either statement fails, neither is committed.
        """
        if not acks:
            return set(), self.claim(worker_id, queue_limits, limit, visibility_timeout)
        if limit <= 0:
            return self.ack_many(acks, worker_id=worker_id), []
        if queue_limits is not None:
            queue_limits = [(check_queue(q), _check_limit(n)) for q, n in queue_limits]
        timeout = None
        if visibility_timeout is not None:
            timeout = to_seconds(visibility_timeout, "visibility_timeout", allow_zero=False)
        batch_of = _batch_of(acks)
        completions = self._completions(acks)
        worker_id, limit = check_worker_id(worker_id), _check_limit(limit)
        keep = jobqueue_settings.KEEP_COMPLETED > 0

        def write(wait: ops.AckWait) -> tuple[set[tuple[int, int]], list[Job]]:
            # A round without a job of a batch is the one statement (PostgreSQL) it always was.
            with transaction.atomic(using=self.using) if batch_of else nullcontext():
                acked, claimed = ops.claim_round(
                    self.using, worker_id, completions, keep, queue_limits, limit, timeout,
                    self.flow, self.round_commit, wait,
                )  # fmt: skip
                if batch_of:
                    # After the claim: the batch rows' locks are held for the commit alone.
                    self._count_done(batch_of, acked)
            return acked, claimed

        return self._held_rows_met(write)

    @retried
    def nack(
        self,
        job: JobRef,
        *,
        worker_id: str,
        error: str = "",
        delay: Duration | None = None,
        traceback: str = "",
        timed_out: bool = False,
    ) -> bool:
        """running -> ready after a backoff (or ``delay``), or -> dead letter if attempts are spent.

        The attempt joins the job's history as a ``retry`` or ``dead`` one, or
        as ``timeout`` if ``timed_out`` (it ran past the job's time limit).
        Return False, changing nothing, if this claim is no longer current.
        """
        fence = _fence(job, worker_id)
        counts = (job.attempts, job.max_attempts) if isinstance(job, Job) else None
        counts = counts or ops.attempts_of(self.using, fence)
        if counts is None:
            return False
        error, traceback = _clean_error(error, traceback)
        attempts, max_attempts = counts
        dead = attempts >= max_attempts
        outcome = ops.failure_outcome(bool(timed_out), dead)
        if dead:
            return ops.bury(self.using, fence, error, traceback, outcome)
        seconds = self.backoff(attempts) if delay is None else to_seconds(delay, "delay")
        return ops.retry_later(self.using, fence, seconds, error, traceback, outcome)

    @staticmethod
    def backoff(attempts: int) -> float:
        """The delay before the next attempt of a job that failed its ``attempts``-th, under the settings."""
        return backoff_delay(attempts, jobqueue_settings.BACKOFF_BASE, jobqueue_settings.BACKOFF_MAX)

    @retried
    def fail(
        self, job: JobRef, *, worker_id: str, error: str = "", traceback: str = "", timed_out: bool = False
    ) -> bool:
        """running -> dead letter now; False if this claim is no longer current.

        The attempt joins the history as a ``dead`` one, or ``timeout`` if ``timed_out``.
        """
        error, traceback = _clean_error(error, traceback)
        outcome = ops.failure_outcome(bool(timed_out), dead=True)
        return ops.bury(self.using, _fence(job, worker_id), error, traceback, outcome)

    @retried
    def extend_visibility(self, job: JobRef, *, worker_id: str, extension: Duration) -> bool:
        """Set the claim's deadline to now + ``extension``; False if the claim is no longer current."""
        seconds = to_seconds(extension, "extension", allow_zero=False)
        return ops.extend(self.using, _fence(job, worker_id), seconds)

    @retried
    def release(self, job: JobRef, *, worker_id: str) -> bool:
        """running -> ready now, without counting the attempt: for work a worker never ran.

        ``runworker`` uses it to hand jobs back on shutdown. False if the claim is
        no longer current.
        """
        return ops.release(self.using, _fence(job, worker_id))

    # -- operating -------------------------------------------------------------

    def tick_timeouts(self) -> int:
        """Expired claims -> ready (or dead letter when spent); return how many were handled."""
        return ops.tick_timeouts(self.using)

    def finish_batches(self) -> list[int]:
        """Enqueue the callback of each batch left with no live job and no callback; return their ids.

        The tick's repair pass: a batch finishes in the transaction of its last
        job's outcome, so this finds one only if a job left it uncounted.
        """
        return ops.finish_batches(self.using)

    @retried
    def retry_dead_letter(self, dead_letter: DeadLetter | int) -> Job:
        """Put a dead letter back on its queue as a ready job with attempts reset.

        Raise ``DeadLetter.DoesNotExist`` if it was already retried or deleted.
        """
        dead_letter_id = dead_letter.pk if isinstance(dead_letter, DeadLetter) else dead_letter
        return ops.retry_dead_letter(self.using, _as_id(dead_letter_id))

    @retried
    def cancel(self, job: JobRef) -> bool:
        """ready, running or waiting -> cancelled; False if the job is finished or gone.

        The jobs that wait on it (``depends_on``) are cancelled with it, and theirs.

        A running job's worker learns of it from ``ended_claims``; on PostgreSQL
        it is also woken on ``CANCEL_CHANNEL`` when the cancel commits.
        """
        return bool(ops.cancel_jobs(self.using, [_as_id(job.pk if isinstance(job, Job) else job)]))

    def prune(self, older_than: Duration | None = None) -> int:
        """Delete done and cancelled jobs older than ``KEEP_COMPLETED`` (or ``older_than``)."""
        seconds = jobqueue_settings.KEEP_COMPLETED if older_than is None else older_than
        return ops.prune(self.using, to_seconds(seconds, "older_than"))

    def repair_dependencies(self) -> int:
        """Release waiting jobs that no outstanding dependency holds; return how many.

        A backstop the ticker runs with its pruning: acks, cancels and retries
        keep dependencies in step in their own transactions.
        """
        return ops.repair_waiting(self.using)

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

    # -- workers ---------------------------------------------------------------

    @retried
    def extend_claims(
        self, jobs: Sequence[Job], *, worker_id: str, visibility_timeout: Duration | None = None
    ) -> set[int]:
        """Keep the claims of running ``jobs`` alive: a worker's heartbeat, one statement.

        Each deadline becomes now + ``visibility_timeout`` (default: the job's
        own), unless it is already later. Return the ids of the claims still
        held; the others expired and were re-claimed, or their job was cancelled.
        """
        timeout = None
        if visibility_timeout is not None:
            timeout = to_seconds(visibility_timeout, "visibility_timeout", allow_zero=False)
        claims = [(_as_id(job.pk), job.claim_token) for job in jobs]
        return set(ops.extend_claims(self.using, check_worker_id(worker_id), claims, timeout)[0])

    @retried
    def beat(
        self, jobs: Sequence[Job], *, worker_id: str, visibility_timeout: Duration | None = None
    ) -> ops.Beat:
        """A worker's heartbeat: ``extend_claims(jobs)``, then its row marked alive now.

        A claim whose row another transaction holds (an operator's cancel, still
        open) is passed over, not waited on, and named on the worker's row:
        ``tick_timeouts`` does not hand it back while the worker beats
        (``held_up`` in the result). ``registered`` is False if the worker's row
        is gone (pruned while it was cut off).
        """
        timeout = None
        if visibility_timeout is not None:
            timeout = to_seconds(visibility_timeout, "visibility_timeout", allow_zero=False)
        worker_id = check_worker_id(worker_id)
        claims = [(_as_id(job.pk), job.claim_token) for job in jobs]
        renewed, held_up = ops.extend_claims(self.using, worker_id, claims, timeout) if claims else ([], [])
        registered = ops.beat_worker(self.using, worker_id, held_up)
        return ops.Beat(set(renewed), set(held_up), registered)

    @retried
    def record_progress(
        self, reports: Sequence[tuple[Job, Mapping[str, Any]]], *, worker_id: str
    ) -> set[tuple[int, int]]:
        """Store each running job's progress ``{"current", "total", "message"}``: one statement.

        Each report is fenced by its own claim, as ``ack_many`` is: one whose
        claim is no longer current (expired and re-claimed, cancelled,
        finished) changes nothing and is missing from the returned
        ``(id, claim_token)`` pairs. Raise ``TypeError`` or ``ValueError``
        (see ``check_progress``) for a bad value, before any write.
        """
        rows = [
            (_as_id(job.pk), job.claim_token, encode_progress(check_progress(**progress)))
            for job, progress in reports
        ]
        return ops.record_progress(self.using, check_worker_id(worker_id), rows) if rows else set()

    def ended_claims(self, jobs: Sequence[Job]) -> dict[int, str]:
        """Which claims of running ``jobs`` (as ``pull`` returned them) have ended: a worker's cancel watch.

        Return the id of each job whose claim is no longer current, mapped to
        ``"cancelled"`` if the job was cancelled, else ``"lost"`` (its claim
        expired and the job was claimed again, it finished, or it is gone).
        Jobs whose claims still hold are left out. One read per 500 jobs, no
        write; no query at all for no jobs.
        """
        claims = [(_as_id(job.pk), job.claim_token) for job in jobs]
        return ops.ended_claims(self.using, claims) if claims else {}

    @retried
    def register_worker(
        self,
        worker_id: str,
        *,
        hostname: str,
        pid: int,
        queues: Sequence[str],
        concurrency: int,
        stale_after: Duration = 60.0,
    ) -> None:
        """Record a running worker (``queues`` empty = every queue), replacing a stale row of the same id.

        Raise ``WorkerIdInUse`` if another worker's row of that id has beaten
        within ``stale_after``.
        """
        queues_json = json.dumps([check_queue(queue) for queue in queues])
        worker_id = check_worker_id(worker_id)
        window = to_seconds(stale_after, "stale_after")
        if not ops.register_worker(self.using, worker_id, hostname, pid, queues_json, concurrency, window):
            holder = ops.live_worker(self.using, worker_id)
            where = f" (host {holder[0]}, pid {holder[1]}, last heartbeat {holder[2]})" if holder else ""
            raise WorkerIdInUse(
                f"worker id {worker_id!r} is held by a live worker{where}; give each worker its own "
                f"--worker-id, or wait until that one stops or its heartbeat is {window:g}s old"
            )

    @retried
    def worker_heartbeat(self, worker_id: str) -> bool:
        """Mark a worker alive now; False if its row is gone (pruned while it was cut off)."""
        return ops.beat_worker(self.using, check_worker_id(worker_id))

    @retried
    def resize_worker(self, worker_id: str, concurrency: int) -> bool:
        """Record that a worker now runs ``concurrency`` slots; False if its row is gone."""
        return ops.resize_worker(self.using, check_worker_id(worker_id), concurrency)

    @retried
    def unregister_worker(self, worker_id: str) -> bool:
        """Delete a stopping worker's row; False if it was already gone."""
        return ops.unregister_worker(self.using, check_worker_id(worker_id))

    @retried
    def prune_workers(self, older_than: Duration) -> int:
        """Delete the rows of workers silent for more than ``older_than``; return how many."""
        return ops.prune_workers(self.using, to_seconds(older_than, "older_than"))

    # -- operating in bulk: the admin and ``manage.py jobqueue`` -----------------

    def retry_jobs_now(self, jobs: Iterable[JobRef]) -> list[ops.JobChange]:
        """Make ready jobs due now; put cancelled jobs back on their queue with attempts reset.

        Return the jobs changed. Running, done and missing jobs are skipped, and so
        is a cancelled job whose ``unique_key`` a live job holds.
        """
        chunks = ops.batched(_job_ids(jobs), ops.ROWS_PER_STATEMENT)
        return [change for chunk in chunks for change in self._each(ops.run_jobs_now, chunk)]

    def cancel_jobs(self, jobs: Iterable[JobRef]) -> list[ops.JobChange]:
        """ready or running -> cancelled; return the jobs changed (finished and missing ones are skipped).

        Each ``JobChange`` says whether the job was running; as ``cancel`` does,
        a batch that cancelled running jobs wakes their workers on PostgreSQL.
        """
        chunks = ops.batched(_job_ids(jobs), ops.ROWS_PER_STATEMENT)
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


def _waiting_insert(using: str) -> Callable[..., list[Job]]:
    """``ops.insert_waiting_jobs``, run again on a conflict: it locks the jobs it names in ``depends_on``.

    Any other insert locks no row that is not its own, and so meets no conflict.
    """
    return lambda *args: run_retrying(using, lambda: ops.insert_waiting_jobs(*args))


def _batch_of(acks: Sequence[tuple[Job, Any]]) -> dict[int, int]:
    """The batch of each acked job that belongs to one (a claimed job's batch never changes)."""
    return {job.pk: job.batch_id for job, _result in acks if job.batch_id is not None}


def _fence(job: JobRef, worker_id: str) -> ops.Fence:
    worker_id = check_worker_id(worker_id)
    if isinstance(job, Job):
        return ops.Fence(_as_id(job.pk), worker_id, job.claim_token)
    return ops.Fence(_as_id(job), worker_id)


def _check_limit(limit: object) -> int:
    if isinstance(limit, bool) or not isinstance(limit, int) or limit < 1:
        raise ValueError(f"limit must be a positive integer, got {limit!r}")
    return limit


def _as_id(value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise ValueError(f"expected a Job or an integer id, got {type(value).__name__}")
    return value


def _clean_error(error: object, traceback: object) -> tuple[str, str]:
    return (
        clean_text(error, MAX_ERROR_CHARS),
        clean_text(traceback, MAX_TRACEBACK_CHARS, keep="tail"),
    )


def _job_ids(jobs: Iterable[JobRef]) -> list[int]:
    return [_as_id(job.pk if isinstance(job, Job) else job) for job in jobs]


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
        ids = [_as_id(d.pk if isinstance(d, DeadLetter) else d) for d in dead_letters]
        queryset = DeadLetter.objects.filter(pk__in=ids)
    try:
        sql, params = queryset.order_by().values("pk").query.get_compiler(using=using).as_sql()
    except EmptyResultSet:
        return None
    return sql, tuple(params)
