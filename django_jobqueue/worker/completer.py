"""Batch the acks of a worker's slots, and commit them with the next claim.

A slot that finished a job without querying the database (the executor acks
any other job on the connection it used) hands its ack here and waits for the
answer, so the job's claim stays in ``RunningJobs`` (heartbeat included) until
the ack is committed, and a crash before that only makes the job run again.

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
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable
from typing import Any

from ..models import Job
from ..queue import QueueClient
from .outage import DATABASE_ERRORS, close_connection
from .service import Service

# Acks written per statement at most; more wait for the next round trip.
MAX_BATCH = 500
# How often an idle completer looks up to see whether it should stop.
IDLE_SLICE = 0.1


class PendingAck:
    """One slot's ack, waiting for the statement that writes it."""

    def __init__(self, job: Job, result: Any) -> None:
        self.job = job
        self.result = result
        self.acked = False
        self.error: BaseException | None = None
        # A plain lock, held until settled: far cheaper per job than an Event's Condition.
        self._unwritten = threading.Lock()
        self._unwritten.acquire()

    def settle(self, acked: bool, error: BaseException | None = None) -> None:
        self.acked, self.error = acked, error
        self._unwritten.release()

    def wait(self) -> bool:
        """Return whether the ack was written; raise the database error that stopped it."""
        self._unwritten.acquire()
        if self.error is not None:
            raise self.error
        return self.acked


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
        self._accepting = True
        self._lock = threading.Lock()

    def ack(self, job: Job, result: Any) -> bool:
        """Ack ``job`` with ``result`` in the next batch; return False if its claim was no longer current.

        Raise what the database raised if the batch could not be written. Once
        the completer has stopped (a slot outliving the shutdown), the ack is
        written by the calling thread itself.
        """
        pending = PendingAck(job, result)
        with self._lock:
            accepting = self._accepting
            if accepting:
                self._pending.put(pending)
        if not accepting:
            return self.client.ack(job, worker_id=self.worker_id, result=result)
        self.on_submitted()
        return pending.wait()

    def take(self) -> list[PendingAck]:
        """Return the acks waiting now (at most ``MAX_BATCH``), for the caller to write and ``settle``."""
        batch: list[PendingAck] = []
        while len(batch) < MAX_BATCH:
            try:
                batch.append(self._pending.get_nowait())
            except queue.Empty:
                break
        return batch

    def settle(self, batch: list[PendingAck], acked: set[tuple[int, int]]) -> None:
        """Tell the slots of ``batch``, written, which of their acks the queue took."""
        if batch:
            self.on_written([pending.job for pending in batch])
        for pending in batch:
            pending.settle((pending.job.pk, pending.job.claim_token) in acked)

    def fail(self, batch: list[PendingAck], error: BaseException) -> None:
        """Tell the slots of ``batch`` that writing it raised ``error``: their jobs run again later."""
        for pending in batch:
            pending.settle(False, error)

    def run(self) -> None:
        try:
            while True:
                try:
                    first = self._pending.get(timeout=IDLE_SLICE)
                except queue.Empty:
                    if self.stopping:
                        return
                    continue
                self._write([first, *self.take()])
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
        self.settle(batch, acked)

    def _close(self) -> None:
        # Stop taking acks, then write those that came in meanwhile.
        with self._lock:
            self._accepting = False
        while batch := self.take():
            self._write(batch)
