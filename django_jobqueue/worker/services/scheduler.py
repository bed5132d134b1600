"""Fire periodic jobs: every worker runs one, and the database lets each fire time through once.

The scheduler sleeps until the earliest next fire time the schedule rows
store (by the database's clock, at most ``MAX_PAUSE``), then asks
``ScheduleBook.fire_round`` to enqueue what came due: it reads only the rows
whose time came, so a wake costs what is due, not what is declared. Many
workers doing so at once is the normal case: the row of a schedule moves
forward from the value each of them read, so one inserts the jobs and the
others find it moved or locked (docs/schedules.md). No worker is elected;
any of them dying changes nothing.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence

from ...queue.schedules import Round, ScheduleBook
from ...queue.timetable import Schedule
from ..outage import DATABASE_ERRORS, Outage
from ..service import Service

logger = logging.getLogger(__name__)

# Wake at least this often, to fire schedules another worker defined anew; and
# at the first wake this long after the last look, give back their rows to
# schedules a worker that no longer declares them deleted (a rolling deploy).
MAX_PAUSE = 30.0
# Never spin: a fire time is checked a little after it came.
MIN_PAUSE = 0.01
# How soon to come back to due rows that another transaction held (an operator's
# pause or run now, or another worker firing them).
HELD_PAUSE = 0.5


class Scheduler(Service):
    """Keeps the schedule rows in step with ``schedules`` and fires them on time."""

    name = "scheduler"

    def __init__(self, using: str, schedules: Sequence[Schedule], on_fire: Callable[[], None]) -> None:
        super().__init__()
        self.on_fire = on_fire  # wakes the claimer: a fire time's job is due at once
        self.book = ScheduleBook(using)
        self.schedules = tuple(schedules)
        self.by_name = {schedule.name: schedule for schedule in self.schedules}
        self.synced = False
        self.rows_checked = 0.0  # time.monotonic() when every declared schedule last had a row

    def run(self) -> None:
        outage = Outage("scheduler", self.book.using)
        while not self.stopping:
            try:
                if not self.synced:
                    self.book.sync(self.schedules)
                    self.synced = True
                    self.rows_checked = time.monotonic()
                if not self.schedules:
                    return  # rows of removed schedules forgotten; nothing to fire
                pause = self.fire()
                outage.recovered()
            except DATABASE_ERRORS as exc:
                pause = outage.failed(exc)
            self.pause(pause)

    def fire(self) -> float:
        """Enqueue what came due; return the seconds until the next fire time."""
        now = self.book.now()
        started = time.monotonic()
        if started - self.rows_checked >= MAX_PAUSE:
            added = self.book.add_missing(self.schedules, now)
            if added:
                logger.info(
                    "schedule(s) %s had no row (another worker's code does not declare them): "
                    "added, starting from now",
                    ", ".join(added),
                )
            self.rows_checked = started
        fired = self.book.fire_round(self.by_name, now)
        self.report(fired)
        if fired.again:
            return MIN_PAUSE  # on-time fire times still owed: the next batch at once
        wait = MAX_PAUSE if fired.next_due is None else (fired.next_due - now).total_seconds()
        if fired.held:
            wait = min(wait, HELD_PAUSE)
        # The database's clock now, without asking it again: `now` plus the time firing took.
        wait -= time.monotonic() - started
        return min(MAX_PAUSE, max(MIN_PAUSE, wait + MIN_PAUSE))

    def report(self, fired: Round) -> None:
        """Log each job enqueued, each schedule that could not enqueue, and wake the claimer."""
        if any(each.job_ids for each in fired.fired):
            self.on_fire()
        for each in fired.fired:
            if each.error is not None:
                logger.error("schedule %s: cannot enqueue its job, will retry: %s", each.schedule, each.error)
                continue
            for fire_time, job_id in zip(each.fire_times, each.job_ids, strict=True):
                logger.info("schedule %s fired for %s: job %s", each.schedule, fire_time.isoformat(), job_id)
        if fired.held:
            logger.debug("schedule(s) %s held by another transaction: passed over", ", ".join(fired.held))
