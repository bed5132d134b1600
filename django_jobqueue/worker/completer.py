"""Batch the acks of a worker's slots, and commit them with the next claim.

A slot that finished a job without querying the database (the executor acks
any other job on the connection it used) hands its ack here and goes on to its
next job (the executor's ``_ack`` decides which ack comes here); the job's
claim stays in ``RunningJobs`` (heartbeat included, its slot counted as taken)
until the ack is committed, and a crash before that only makes the job run
again. Once a batch is written the ``Reporter`` tells each ack's ``report`` its
outcome, which logs the job's line (or, through an ``Answer``, wakes the slot
of a Django Task, which waits for it).

While the worker claims, the claiming loop takes the waiting acks and writes
them in the transaction of its next claim (``QueueClient.ack_and_claim``): one
commit both finishes a batch of jobs and claims the slots it frees, each ack
still fenced by its own claim token. While one such round trip runs the next
batch gathers, so under load a batch holds about as many acks as slots
finished meanwhile, and an ack that comes alone is written at once, with no
timer to wait for. Once the loop stops claiming (``--burst``, ``--max-jobs``,
a signal), the completer's own thread writes the acks that still come.

Slots thereby never open a database connection for a job that does not use
one, instead of each slot holding one (or reconnecting per job when
``CONN_MAX_AGE`` is 0).

A batch passes over a job whose row another transaction holds (an
operator's cancel still open, an enqueue that names the job in
``depends_on``) rather than wait on it with every other ack of the round
(``queue/ops/acks.py``). Such an ack is *blocked*: its claim still holds,
so it stays pending, heartbeat included, and is written again every
``BLOCKED_RETRY`` seconds until it goes through, or until the claim is found
lost (the cancel committed).
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from collections.abc import Callable
from typing import Any

from ..models import Job
from ..queue import QueueClient
from .outage import DATABASE_ERRORS, close_connection
from .run.outcomes import Outcome
from .service import Service

logger = logging.getLogger(__name__)

# Acks written per statement at most; more wait for the next round trip.
MAX_BATCH = 500
# How often an idle completer looks up to see whether it should stop.
IDLE_SLICE = 0.1
# Seconds between tries of an ack whose row another transaction held.
BLOCKED_RETRY = 0.5


# Told of an ack once its batch is written: DONE or LOST (the claim was no longer current),
# or UNRECORDED with the error that stopped the batch.
Report = Callable[[Outcome, "BaseException | None"], None]


class PendingAck:
    """One slot's ack, waiting for the statement that writes it."""

    __slots__ = ("job", "result", "report", "blocked")

    def __init__(self, job: Job, result: Any, report: Report) -> None:
        self.job = job
        self.result = result
        self.report = report
        # A batch passed it over before: its slot frees only once it goes through.
        self.blocked = False


class Answer:
    """The report of one ack that its slot waits for."""

    def __init__(self) -> None:
        self.outcome = Outcome.UNRECORDED
        self.error: BaseException | None = None
        # A plain lock, held until reported: far cheaper per job than an Event's Condition.
        self._unwritten = threading.Lock()
        self._unwritten.acquire()

    def report(self, outcome: Outcome, error: BaseException | None) -> None:
        self.outcome, self.error = outcome, error
        self._unwritten.release()

    def wait(self) -> Outcome:
        """Return ``DONE``, or ``LOST`` if the claim was no longer current.

        Raise the error that stopped the batch.
        """
        self._unwritten.acquire()
        if self.error is not None:
            raise self.error
        return self.outcome


class Completer(Service):
    """The slots' waiting acks: taken by the claiming loop, or written by its own thread once started."""

    name = "completer"

    def __init__(
        self,
        client: QueueClient,
        worker_id: str,
        on_submitted: Callable[[], None],
        on_written: Callable[[list[Job]], None],
    ) -> None:
        super().__init__()
        self.client = client
        self.worker_id = worker_id
        self.on_submitted = on_submitted  # wakes whoever writes the acks
        # Told of each batch written, before its slots are: runworker frees their slots at once.
        self.on_written = on_written
        self._pending: queue.SimpleQueue[PendingAck] = queue.SimpleQueue()
        self.reporter = Reporter()
        # runworker --metrics-port's: told how many acks each of its own batches sent.
        self.on_batch: Callable[[int], None] | None = None
        self._accepting = True
        self._lock = threading.Lock()
        # wait_for's: how many waiting acks end its wait (0: nobody waits), and the wake-up.
        self._wanted = 0
        self._enough = threading.Event()
        # Acks a batch passed over, their rows held by another transaction, and when to try them again.
        self._blocked: list[PendingAck] = []
        self._blocked_due = 0.0

    def submit(self, job: Job, result: Any, report: Report) -> bool:
        """Queue the ack of ``job`` for the next batch; ``report`` hears how it went once written.

        The job stays claimed, heartbeat included, until then. Return False,
        queueing nothing, once the completer has stopped (a slot outliving the
        shutdown): the caller writes the ack itself.
        """
        with self._lock:
            if not self._accepting:
                return False
            self._pending.put(PendingAck(job, result, report))
            if self._wanted and self._pending.qsize() >= self._wanted:
                self._enough.set()
        self.on_submitted()
        return True

    def wait_for(self, count: int, timeout: float) -> None:
        """Wait until ``count`` acks are waiting to be taken, or for ``timeout`` seconds at most."""
        with self._lock:
            if self._pending.qsize() >= count:
                return
            self._wanted = count
            self._enough.clear()
        self._enough.wait(timeout)
        with self._lock:
            self._wanted = 0

    def take(self) -> list[PendingAck]:
        """Return the acks waiting now (at most ``MAX_BATCH``), for the caller to write and ``settle``.

        Blocked acks come along once they are due again.
        """
        batch: list[PendingAck] = []
        with self._lock:
            if self._blocked and time.monotonic() >= self._blocked_due:
                batch, self._blocked = self._blocked[:MAX_BATCH], self._blocked[MAX_BATCH:]
        while len(batch) < MAX_BATCH:
            try:
                batch.append(self._pending.get_nowait())
            except queue.Empty:
                break
        return batch

    def settle(self, batch: list[PendingAck], acked: set[tuple[int, int]]) -> None:
        """Tell the slots of ``batch``, written, which of their acks the queue took.

        An ack left out whose claim still holds was passed over (its row held):
        it is kept, blocked, and comes back in a later ``take``.
        """
        if not batch:
            return
        left_out = [pending for pending in batch if (pending.job.pk, pending.job.claim_token) not in acked]
        blocked = self._still_held(left_out) if left_out else []
        if blocked:
            for pending in blocked:
                pending.blocked = True
            with self._lock:
                self._blocked += blocked
                self._blocked_due = time.monotonic() + BLOCKED_RETRY
            held = {id(pending) for pending in blocked}
            batch = [pending for pending in batch if id(pending) not in held]
        if batch:
            self.on_written([pending.job for pending in batch])
            self.reporter.report(batch, acked, None)

    def _still_held(self, left_out: list[PendingAck]) -> list[PendingAck]:
        """The acks of ``left_out`` whose claims still hold: passed over, not lost."""
        try:
            ended = self.client.ended_claims([pending.job for pending in left_out])
        except DATABASE_ERRORS:
            close_connection(self.client.using)
            return left_out  # tried again later, when the read can tell
        blocked = [pending for pending in left_out if pending.job.pk not in ended]
        for pending in blocked:
            logger.debug("job %s: its row is held by another transaction; its ack waits", pending.job.pk)
        return blocked

    def blocked_jobs(self) -> list[Job]:
        """The jobs whose acks wait on a row another transaction holds."""
        with self._lock:
            return [pending.job for pending in self._blocked]

    def fail(self, batch: list[PendingAck], error: BaseException) -> None:
        """Tell the slots of ``batch`` that writing it raised ``error``: their jobs run again later."""
        if batch:
            # Their claims are left to expire, without a heartbeat.
            self.on_written([pending.job for pending in batch])
            self.reporter.report(batch, set(), error)

    def run(self) -> None:
        try:
            while True:
                try:
                    first = [self._pending.get(timeout=IDLE_SLICE)]
                except queue.Empty:
                    if self.stopping:
                        return
                    first = []
                batch = [*first, *self.take()]
                if batch:
                    self._write(batch)
        finally:
            self._close()

    def _write(self, batch: list[PendingAck]) -> None:
        try:
            acked = self.client.ack_many([(p.job, p.result) for p in batch], worker_id=self.worker_id)
        except DATABASE_ERRORS as exc:
            # Each slot records its ack as unrecorded: the claims expire and the jobs run again.
            close_connection(self.client.using)
            self.fail(batch, exc)
            return
        except BaseException as exc:  # noqa: B036 - a waiting slot must never hang on a lost batch
            self.fail(batch, exc)
            raise
        if self.on_batch is not None:
            self.on_batch(len(batch))
        self.settle(batch, acked)

    def _close(self) -> None:
        # Stop taking acks, then write those that came in meanwhile, and once more those blocked.
        with self._lock:
            self._accepting = False
            self._blocked_due = 0.0
        while batch := self.take():
            self._write(batch)
            with self._lock:
                if self._blocked_due:
                    break  # still held: their claims expire, and the jobs run again
        for job in self.blocked_jobs():
            logger.warning(
                "job %s id=%s: its ack could not be written before the worker stopped (another transaction "
                "holds its row); it runs again once its claim expires",
                job.name,
                job.pk,
            )


class Reporter(Service):
    """Hands each written ack's outcome to its ``report``, in a thread of its own.

    A report logs the job's line, which costs about as much as the rest of the
    job's round together: done here, it overlaps the claiming loop's next round
    trip instead of delaying it. Until started, and once stopped, reports are
    made by the caller.
    """

    name = "reporter"

    def __init__(self) -> None:
        super().__init__()
        self._written: queue.SimpleQueue[tuple[list[PendingAck], set[tuple[int, int]], BaseException | None]]
        self._written = queue.SimpleQueue()
        self._running = False
        # hold()'s: batches written while held, told once released (only the claiming loop holds).
        self._holding = False
        self._held: list[tuple[list[PendingAck], set[tuple[int, int]], BaseException | None]] = []

    def report(
        self, batch: list[PendingAck], acked: set[tuple[int, int]], error: BaseException | None
    ) -> None:
        if self._holding:
            self._held.append((batch, acked, error))
        else:
            self._pass_on(batch, acked, error)

    def _pass_on(
        self, batch: list[PendingAck], acked: set[tuple[int, int]], error: BaseException | None
    ) -> None:
        """To the reporting thread once started; before that, told at once."""
        if self._running:
            self._written.put((batch, acked, error))
        else:
            self._tell(batch, acked, error)

    def hold(self) -> None:
        """Keep the batches reported from now on until ``release()`` (called by the same thread).

        The claiming loop holds them while it hands the jobs it just claimed to
        its slots, and releases them as it sends its next round, or before it
        waits for work: the lines are then logged while that thread waits on
        the database, instead of taking the interpreter from the slots and from
        the loop's own reading of the round (at ``--concurrency 200``, a third
        of each round's time went to that).
        """
        self._holding = True

    def release(self) -> None:
        """Report the batches held so far; with ``stop_holding``, report from now on at once."""
        held, self._held = self._held, []
        for batch, acked, error in held:
            self._pass_on(batch, acked, error)

    def stop_holding(self) -> None:
        self._holding = False
        self.release()

    def start(self) -> None:
        self._running = True
        super().start()

    def stop(self, timeout: float = 5.0) -> None:
        super().stop(timeout)
        self._running = False
        self._tell_all()  # what came in after the thread's last look

    def run(self) -> None:
        while True:
            try:
                batch, acked, error = self._written.get(timeout=IDLE_SLICE)
            except queue.Empty:
                if self.stopping:
                    return
                continue
            self._tell(batch, acked, error)

    def _tell_all(self) -> None:
        while True:
            try:
                batch, acked, error = self._written.get_nowait()
            except queue.Empty:
                return
            self._tell(batch, acked, error)

    @staticmethod
    def _tell(batch: list[PendingAck], acked: set[tuple[int, int]], error: BaseException | None) -> None:
        if error is not None:
            for pending in batch:
                pending.report(Outcome.UNRECORDED, error)
            return
        done, lost = Outcome.DONE, Outcome.LOST
        for pending in batch:
            pending.report(done if (pending.job.pk, pending.job.claim_token) in acked else lost, None)
