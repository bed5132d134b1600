"""``QueueClient``: the queue's state machine, as ``runworker`` and custom workers use it.

It validates arguments, has new jobs prepared (``preparation.py``), and calls
the statements in ``ops/``; it holds no state of its own beyond the database alias.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from contextlib import nullcontext
from typing import Any, TypeVar

from django.db import OperationalError, connections, transaction

from .. import collector
from ..conf import jobqueue_settings
from ..models import Job
from . import batching, ops
from .backoff import backoff_delay
from .conflicts import is_lock_timeout, retried, run_retrying
from .duties import WorkerDuties
from .engines import engine_for
from .operating import Operating
from .ops.limited import FlowState
from .preparation import Item, copyable, prepare_job, prepared
from .refs import Duration, JobRef, as_id, check_limit, fence
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

T = TypeVar("T")
# Seconds a client's batches of acks pass over held rows at once after one of them met one.
PASS_OVER_FOR = 5.0


class QueueClient(Operating, WorkerDuties):
    """The queue on database ``using`` (default: the ``JOBQUEUE["DATABASE"]`` setting).

    Producing, claiming and completing are here; the operator's calls come
    from ``Operating`` (``operating.py``), those of a worker's services from
    ``WorkerDuties`` (``duties.py``).
    """

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
        return self._insert_one(prepare_job(name, payload, options, self.using))

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
        jobs = prepared(items, self.using)
        if ops.writes_by_copy(self.using, len(items)) and copyable(items):
            return batching.joined(
                traced_insert(
                    lambda trace_context: ops.copy_jobs(self.using, len(items), jobs, trace_context),
                    "jobqueue.enqueue_many",
                    {"messaging.batch.message_count": len(items)},
                )
            )
        new_jobs = list(jobs)
        insert = (
            _waiting_insert(self.using)
            if any(new.depends_on for new in new_jobs)
            else _plain_insert(self.using)
        )
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
        return self._insert_one(
            prepare_job(name, payload, options, self.using)._replace(task_backend=backend)
        )

    def _insert_one(self, new_job: ops.NewJob) -> Job:
        """Insert ``new_job``, with the trace context it is enqueued in, and return it."""
        batching.check_database(self.using)
        insert = _waiting_insert(self.using) if new_job.depends_on else _plain_insert(self.using)
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
            queue_limits = [(check_queue(q), check_limit(n)) for q, n in queue_limits]
            if not queue_limits:
                return []
        elif limit is None:
            raise ValueError("claiming from every queue needs a limit")
        if limit is not None:
            check_limit(limit)
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
            return ops.complete(self.using, fence(job, worker_id), result_json, keep)
        # A job of a batch, or one known by its id alone: its batch counts it in the ack's transaction.
        return ops.complete_counted(self.using, fence(job, worker_id), result_json, keep)

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
            (as_id(job.pk), job.claim_token, encode_result(result) if keep else None) for job, result in acks
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
            queue_limits = [(check_queue(q), check_limit(n)) for q, n in queue_limits]
        timeout = None
        if visibility_timeout is not None:
            timeout = to_seconds(visibility_timeout, "visibility_timeout", allow_zero=False)
        batch_of = _batch_of(acks)
        completions = self._completions(acks)
        worker_id, limit = check_worker_id(worker_id), check_limit(limit)
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
        claim = fence(job, worker_id)
        counts = (job.attempts, job.max_attempts) if isinstance(job, Job) else None
        counts = counts or ops.attempts_of(self.using, claim)
        if counts is None:
            return False
        error, traceback = _clean_error(error, traceback)
        attempts, max_attempts = counts
        dead = attempts >= max_attempts
        outcome = ops.failure_outcome(bool(timed_out), dead)
        if dead:
            return ops.bury(self.using, claim, error, traceback, outcome)
        seconds = self.backoff(attempts) if delay is None else to_seconds(delay, "delay")
        return ops.retry_later(self.using, claim, seconds, error, traceback, outcome)

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
        return ops.bury(self.using, fence(job, worker_id), error, traceback, outcome)

    @retried
    def extend_visibility(self, job: JobRef, *, worker_id: str, extension: Duration) -> bool:
        """Set the claim's deadline to now + ``extension``; False if the claim is no longer current."""
        seconds = to_seconds(extension, "extension", allow_zero=False)
        return ops.extend(self.using, fence(job, worker_id), seconds)

    @retried
    def release(self, job: JobRef, *, worker_id: str) -> bool:
        """running -> ready now, without counting the attempt: for work a worker never ran.

        ``runworker`` uses it to hand jobs back on shutdown. False if the claim is
        no longer current.
        """
        return ops.release(self.using, fence(job, worker_id))


def _waiting_insert(using: str) -> Callable[..., list[Job]]:
    """``ops.insert_waiting_jobs``, run again on a conflict: it locks the jobs it names in ``depends_on``.

    Any other insert locks no row that is not its own, and so meets no
    conflict, but on MySQL (``_plain_insert``).
    """
    return lambda *args: run_retrying(using, lambda: ops.insert_waiting_jobs(*args))


def _plain_insert(using: str) -> Callable[..., list[Job]]:
    """``ops.insert_jobs``; on MySQL, run again on a deadlock outside the caller's transaction.

    InnoDB checks a new row's unique key under a lock on the key's index
    record: two inserts of the same keys in opposite orders deadlock there.
    Elsewhere ``ON CONFLICT`` waits for the other insert and passes over its
    key, and a plain insert is not wrapped, so as to add nothing to its cost.
    """
    if not engine_for(connections[using]).conflict_ends_transaction:
        return ops.insert_jobs
    return lambda *args: run_retrying(using, lambda: ops.insert_jobs(*args))


def _batch_of(acks: Sequence[tuple[Job, Any]]) -> dict[int, int]:
    """The batch of each acked job that belongs to one (a claimed job's batch never changes)."""
    return {job.pk: job.batch_id for job, _result in acks if job.batch_id is not None}


def _clean_error(error: object, traceback: object) -> tuple[str, str]:
    return (
        clean_text(error, MAX_ERROR_CHARS),
        clean_text(traceback, MAX_TRACEBACK_CHARS, keep="tail"),
    )
