"""Time limits and cancels of running jobs: the watchdog and the cancel watch.

The ``Watchdog`` keeps the clock of every attempt in progress (``RunControl``):
at an attempt's deadline it tells the job to stop for ``timeout``, and
``--cancel-grace`` seconds after any job was told to stop, it stops it by
force (``control.py``). It never touches the database, so that a database
outage cannot delay a time limit; a thread stuck past its grace is handed to
``on_hung``, which writes its outcome elsewhere.

The ``CancelWatch`` learns which running jobs were cancelled (or lost their
claim) from one statement for all of them, ``QueueClient.ended_claims``, once
a second while jobs run; on PostgreSQL a cancel's ``NOTIFY`` makes it look at
once. So a running handler sees ``ctx.cancelled`` within about a second, and
never at the cost of a query per job.
"""

from __future__ import annotations

import logging
import math
import threading
import time
from collections.abc import Callable

from ...queue import QueueClient
from ..outage import DATABASE_ERRORS, Outage
from ..service import Service
from .control import RunControl, StopReason

logger = logging.getLogger(__name__)

# Seconds between two looks for cancelled jobs while jobs run (at most: a NOTIFY looks at once).
CANCEL_CHECK_INTERVAL = 1.0
# How long the watchdog sleeps when no attempt has a deadline; a new one nudges it.
IDLE_INTERVAL = 60.0


class Attempts:
    """The attempts in progress, by claim: what both services look at."""

    def __init__(self) -> None:
        self._controls: dict[tuple[int, int], RunControl] = {}
        self._lock = threading.Lock()

    def add(self, control: RunControl) -> None:
        with self._lock:
            self._controls[control.claim] = control

    def remove(self, control: RunControl) -> None:
        with self._lock:
            if self._controls.get(control.claim) is control:
                del self._controls[control.claim]

    def get(self, claim: tuple[int, int]) -> RunControl | None:
        with self._lock:
            return self._controls.get(claim)

    def snapshot(self) -> list[RunControl]:
        with self._lock:
            return list(self._controls.values())


class Watchdog(Service):
    """Tells jobs to stop at their deadlines, and forces those that outlast ``--cancel-grace``."""

    name = "watchdog"

    def __init__(
        self,
        attempts: Attempts,
        on_stopped: Callable[[RunControl], None],
        on_hung: Callable[[RunControl], None],
    ) -> None:
        super().__init__()
        self.attempts = attempts
        self.on_stopped = on_stopped  # told of each job told to stop, whatever the reason
        self.on_hung = on_hung  # told of a timed-out thread still running after its grace
        self._next = 0.0

    def watch(self, control: RunControl) -> None:
        """Start keeping ``control``'s time; wake the loop if it is due before the loop's next look."""
        self.attempts.add(control)
        if control.deadline is not None and control.deadline < self._next:
            self.nudge()

    def stop_job(self, control: RunControl, reason: StopReason) -> bool:
        """Tell ``control``'s job to stop for ``reason`` now (its grace starts); False if it already was."""
        if not control.stop(reason):
            return False
        self.on_stopped(control)
        self.nudge()
        return True

    def run(self) -> None:
        while not self.stopping:
            # While it looks, any attempt that starts nudges it: its deadline may come before the
            # next look this one computes.
            self._next = math.inf
            upcoming = self.look(time.monotonic())
            self._next = upcoming
            self.pause(upcoming - time.monotonic())

    def look(self, now: float) -> float:
        """Act on every attempt due by ``now``; return when the next one is due."""
        upcoming = now + IDLE_INTERVAL
        for control in self.attempts.snapshot():
            due = control.due()
            if due is not None and due <= now:
                self._act(control)
                due = control.due()
            if due is not None:
                upcoming = min(upcoming, due)
        return upcoming

    def _act(self, control: RunControl) -> None:
        if control.reason is None:
            if control.stop(StopReason.TIMEOUT):
                self.on_stopped(control)
                logger.warning(
                    "job %s id=%s attempt=%s: timed out after %gs; stopping it",
                    control.job.name,
                    control.job.pk,
                    control.job.attempts,
                    control.timeout,
                )
            return
        if control.force():
            self.on_hung(control)


class CancelWatch(Service):
    """Looks once a second (or at a cancel's NOTIFY) for running jobs whose claims ended."""

    name = "cancel-watch"

    def __init__(self, client: QueueClient, attempts: Attempts, watchdog: Watchdog) -> None:
        super().__init__()
        self.client = client
        self.attempts = attempts
        self.watchdog = watchdog

    def run(self) -> None:
        outage = Outage("cancel watch", self.client.using)
        while not self.stopping:
            wait = CANCEL_CHECK_INTERVAL
            try:
                self.look()
                outage.recovered()
            except DATABASE_ERRORS as exc:
                wait = max(wait, outage.failed(exc))
            self.pause(wait)

    def look(self) -> int:
        """Tell every running job whose claim ended to stop; return how many were told."""
        running = [control for control in self.attempts.snapshot() if control.reason is None]
        if not running:
            return 0
        ended = self.client.ended_claims([control.job for control in running])
        told = 0
        for control in running:
            why = ended.get(control.job.pk)
            if why is None:
                continue
            reason = StopReason.CANCELLED if why == "cancelled" else StopReason.LOST
            if self.watchdog.stop_job(control, reason):
                told += 1
                logger.info(
                    "job %s id=%s attempt=%s: %s while running; told to stop",
                    control.job.name,
                    control.job.pk,
                    control.job.attempts,
                    "cancelled" if reason is StopReason.CANCELLED else "its claim was lost",
                )
        return told
