"""Fire periodic jobs: every worker runs one, and the database lets each fire time through once.

The scheduler sleeps until the next fire time of any schedule (by the
database's clock, at most ``MAX_PAUSE``), then asks ``ScheduleBook.fire_due``
to enqueue what came due. Many workers doing so at once is the normal case:
the row of a schedule moves forward from the value each of them read, so one
inserts the jobs and the others find it moved (docs/schedules.md). No worker
is elected; any of them dying changes nothing.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence

from ..queue.schedules import ScheduleBook
from ..queue.timetable import Schedule
from .outage import DATABASE_ERRORS, Outage
from .service import Service

logger = logging.getLogger(__name__)

# Wake at least this often, to fire schedules another worker defined anew.
MAX_PAUSE = 30.0
# Never spin: a fire time is checked a little after it came.
MIN_PAUSE = 0.01


class Scheduler(Service):
    """Keeps the schedule rows in step with ``schedules`` and fires them on time."""

    name = "scheduler"

    def __init__(self, using: str, schedules: Sequence[Schedule], on_fire: Callable[[], None]) -> None:
        super().__init__()
        self.on_fire = on_fire  # wakes the claimer: a fire time's job is due at once
        self.book = ScheduleBook(using)
        self.schedules = tuple(schedules)
        self.synced = False

    def run(self) -> None:
        outage = Outage("scheduler", self.book.using)
        while not self.stopping:
            try:
                if not self.synced:
                    self.book.sync(self.schedules)
                    self.synced = True
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
        fired = self.book.fire_due(self.schedules, now)
        if any(each.job_ids for each in fired):
            self.on_fire()
        for each in fired:
            if each.error is not None:
                logger.error("schedule %s: cannot enqueue its job, will retry: %s", each.schedule, each.error)
                continue
            for fire_time, job_id in zip(each.fire_times, each.job_ids, strict=True):
                logger.info("schedule %s fired for %s: job %s", each.schedule, fire_time.isoformat(), job_id)
        if any(each.more for each in fired):
            return MIN_PAUSE  # on-time fire times still owed: the next batch at once
        next_fire = min(schedule.next_after(now) for schedule in self.schedules)
        # The database's clock now, without asking it again: `now` plus the time firing took.
        wait = (next_fire - now).total_seconds() - (time.monotonic() - started)
        return min(MAX_PAUSE, max(MIN_PAUSE, wait + MIN_PAUSE))
