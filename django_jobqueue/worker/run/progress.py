"""``ctx.progress()``: what running jobs report, kept in memory and written at a steady pace.

A job may report in a tight loop; the worker writes none of those calls as
they come. Each attempt keeps only its latest report (``PendingProgress``).
Under ``runworker`` the ``ProgressWriter``, a thread with its own connection,
writes the reports not yet written of all running jobs in one statement every
``PROGRESS_INTERVAL`` seconds, and the attempt's last report when it ends,
before its outcome is written: a loop ``0..N`` leaves ``N`` on the row.
Written by the worker, never on the job's own connection, a report is seen at
once even while the job's ``transaction.atomic()`` is open, and survives its
rollback. With ``--pool processes`` the child sends its reports to the slot's
thread over the pipe it answers on (``pools/processes/child.py``, ``pools/processes/children.py``); the parent
writes them the same way.

Every write is fenced by the claim (``QueueClient.record_progress``): a
worker whose claim was lost cannot overwrite the next attempt's progress.
Progress is best effort: a write that fails (the database away) is tried
again at the next interval, or dropped at the attempt's end; it never changes
the job's outcome.

Outside ``runworker`` (an ``Executor`` without a writer) ``DirectProgress``
writes from the job's own thread, at most once per interval, unless the job is
inside ``transaction.atomic()`` on the queue's database (the write would join
the job's transaction); the last report is written once the job returns.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Protocol

from django.db import connections

from ...queue import QueueClient
from ..outage import DATABASE_ERRORS, Outage, close_connection
from ..service import Service
from .pending import PendingProgress

if TYPE_CHECKING:
    from .control import RunControl
    from .watchdog import Attempts

logger = logging.getLogger(__name__)

# Seconds between two writes of one job's progress, at most one per job per interval.
PROGRESS_INTERVAL = 1.0
# Seconds an ending attempt waits for its last report to be written before its outcome is.
FINAL_WRITE_WAIT = 5.0

ProgressReport = Callable[[dict[str, Any]], None]


_starting = threading.Lock()


def pending_of(control: RunControl) -> PendingProgress:
    """The attempt's ``PendingProgress``, made at its first report: most jobs never report."""
    pending = control.progress
    if pending is None:
        with _starting:
            if control.progress is None:
                control.progress = PendingProgress(control.job)
            pending = control.progress
    return pending


class ProgressSink(Protocol):
    """Where an executor's attempts send their reports: the writer thread, or the job's thread."""

    def reported(self, pending: PendingProgress) -> None:
        """The job reported: write now if this sink writes as reports come and one is due."""

    def finish(self, pending: PendingProgress) -> None:
        """The attempt ended (its outcome not yet written): write its last report if it is not yet."""


def reporter(control: RunControl, sink: ProgressSink) -> ProgressReport:
    """What ``ctx.progress`` calls, with a checked value, in a job run under ``control``."""

    def report(value: dict[str, Any]) -> None:
        pending = pending_of(control)
        pending.report(value)
        sink.reported(pending)

    return report


def write_reports(client: QueueClient, worker_id: str, pendings: list[PendingProgress]) -> int:
    """Write the unwritten report of each of ``pendings`` in one statement; return how many landed.

    Raise what the database raised.
    """
    reports = [(pending, unwritten) for pending in pendings if (unwritten := pending.unwritten())]
    if not reports:
        return 0
    landed = client.record_progress(
        [(pending.job, value) for pending, (_number, value) in reports], worker_id=worker_id
    )
    now = time.monotonic()
    for pending, (number, _value) in reports:
        # A report whose claim is gone is marked written too: trying it again would change nothing.
        pending.written(number)
        pending.last_write = now
    return sum((pending.job.pk, pending.job.claim_token) in landed for pending, _ in reports)


class ProgressWriter(Service):
    """Writes the running jobs' reports, one statement per interval, and each attempt's last one."""

    name = "progress"

    def __init__(
        self, client: QueueClient, worker_id: str, attempts: Attempts, interval: float = PROGRESS_INTERVAL
    ) -> None:
        super().__init__()
        self.client = client
        self.worker_id = worker_id
        self.attempts = attempts
        self.interval = interval
        self.statements = 0  # statements written so far: what the tests count
        self._finals: list[tuple[PendingProgress, threading.Event]] = []
        self._finals_lock = threading.Lock()

    def reported(self, pending: PendingProgress) -> None:
        """Nothing to do: the next interval's statement takes the report."""

    def finish(self, pending: PendingProgress) -> None:
        """Have the last report written, waiting up to ``FINAL_WRITE_WAIT`` seconds."""
        if pending.unwritten() is None:
            return
        thread = self._thread
        if self.stopping or thread is None or not thread.is_alive():
            return  # the worker stops: its claims are written or handed back already
        done = threading.Event()
        with self._finals_lock:
            self._finals.append((pending, done))
        self.nudge()
        if not done.wait(FINAL_WRITE_WAIT):
            logger.warning(
                "job %s id=%s: its last progress was not written within %gs; its outcome is written first",
                pending.job.name,
                pending.job.pk,
                FINAL_WRITE_WAIT,
            )

    def run(self) -> None:
        outage = Outage("progress", self.client.using)
        next_round = time.monotonic() + self.interval
        while not self.stopping:
            with self._finals_lock:
                finals, self._finals = self._finals, []
            due = time.monotonic() >= next_round
            pendings = [pending for pending, _done in finals]
            if due:
                pendings += [control.progress for control in self.attempts.snapshot() if control.progress]
            try:
                if pendings and self._write(pendings):
                    outage.recovered()
                if due:
                    next_round = time.monotonic() + self.interval
            except DATABASE_ERRORS as exc:
                # Still unwritten, the running jobs' reports are tried again; the last ones are dropped.
                next_round = time.monotonic() + max(self.interval, outage.failed(exc))
            finally:
                for _pending, done in finals:
                    done.set()
            self.pause(next_round - time.monotonic())
        self._release_finals()

    def _write(self, pendings: list[PendingProgress]) -> bool:
        # One job's report may be both a last one and a running one: it is written once.
        unique = list({id(pending): pending for pending in pendings}.values())
        if not any(pending.unwritten() for pending in unique):
            return False
        self.statements += 1
        write_reports(self.client, self.worker_id, unique)
        return True

    def _release_finals(self) -> None:
        with self._finals_lock:
            finals, self._finals = self._finals, []
        for _pending, done in finals:
            done.set()


class DirectProgress:
    """Outside ``runworker``: the job's own thread writes its reports, at most once per interval."""

    def __init__(self, client: QueueClient, worker_id: str, interval: float = PROGRESS_INTERVAL) -> None:
        self.client = client
        self.worker_id = worker_id
        self.interval = interval

    def reported(self, pending: PendingProgress) -> None:
        if time.monotonic() - pending.last_write < self.interval:
            return
        # Inside the job's atomic() the write would be the job's: hidden until it commits, lost if it
        # rolls back. The last report is written once the job returned.
        if connections[self.client.using].in_atomic_block:
            return
        self._write(pending)

    def finish(self, pending: PendingProgress) -> None:
        self._write(pending)

    def _write(self, pending: PendingProgress) -> None:
        try:
            write_reports(self.client, self.worker_id, [pending])
        except DATABASE_ERRORS as exc:
            close_connection(self.client.using)
            pending.last_write = time.monotonic()  # not again at once: the next report tries later
            logger.warning(
                "job %s id=%s: its progress could not be written (%s: %s)",
                pending.job.name,
                pending.job.pk,
                type(exc).__name__,
                str(exc).strip(),
            )
