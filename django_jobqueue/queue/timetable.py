"""Fire times: when a schedule fires, and which of its fire times a moment owes.

Pure computation, no database: ``queue/schedules.py`` decides from these which
fire times to enqueue, and ``django_jobqueue/schedules.py`` builds ``Schedule``
values from the declarations.

Fire times are UTC instants. ``every`` fires at the multiples of ``every``
seconds since the Unix epoch, so every worker computes the same ones. ``cron``
fires on the wall clock of the schedule's time zone, parsed by ``cronsim``
(Debian cron's rules for DST): a wall-clock time that a DST change skips fires
at the first minute after the gap, and one that occurs twice fires once, at its
first occurrence.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any
from zoneinfo import ZoneInfo

from cronsim import CronSim

# catch_up="all" enqueues at most this many missed fire times (the most recent
# ones): a worker fleet down for a month must not come back to 40,000 jobs of
# an every-minute schedule.
MAX_CATCH_UP = 100
# One fire enqueues at most this many on-time fire times, the oldest first, and
# the scheduler fires again at once for the rest: every on-time fire time is
# enqueued, and no transaction grows with SCHEDULE_GRACE (a day's grace of an
# every-second schedule is 86,400 of them).
ON_TIME_BATCH = 100
EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
# Skipped cron fire times are counted (for the log) up to this many; `every`
# ones are counted by arithmetic, however many.
MAX_COUNTED = 10_000


@dataclass(frozen=True)
class Schedule:
    """One declared schedule: which job to enqueue, and when.

    ``queue`` and ``priority`` of None leave the job's own ``@job`` defaults
    (or the settings') in force; so does a ``concurrency_limit`` of None
    beside a ``concurrency_key`` (the job's ``@job(concurrency_limit=)``).
    """

    name: str
    job: str
    cron: str | None = None
    every: int | None = None
    payload: dict[str, Any] = field(default_factory=dict)
    queue: str | None = None
    priority: int | None = None
    timezone: str = "UTC"
    catch_up: str = "latest"
    concurrency_key: str | None = None
    concurrency_limit: int | None = None

    @property
    def zone(self) -> ZoneInfo:
        return ZoneInfo(self.timezone)

    @property
    def when(self) -> str:
        """``cron 0 3 * * * (Europe/Amsterdam)`` or ``every 30 s``: for logs and pages."""
        if self.every is not None:
            return f"every {self.every} s"
        return f"cron {self.cron} ({self.timezone})"

    def definition(self) -> dict[str, Any]:
        """Everything that decides what is enqueued and when, as stored on the schedule's row."""
        definition: dict[str, Any] = {
            "job": self.job,
            "cron": self.cron,
            "every": self.every,
            "payload": self.payload,
            "queue": self.queue,
            "priority": self.priority,
            "timezone": self.timezone,
            "catch_up": self.catch_up,
        }
        # Only when declared: a schedule without them keeps the signature it had
        # before they existed, so an upgrade redefines no schedule's row.
        if self.concurrency_key is not None:
            definition["concurrency_key"] = self.concurrency_key
        if self.concurrency_limit is not None:
            definition["concurrency_limit"] = self.concurrency_limit
        return definition

    @property
    def signature(self) -> str:
        """A digest of ``definition()``: workers fire a schedule only while their copy matches the row's."""
        text = json.dumps(self.definition(), sort_keys=True, separators=(",", ":"))
        return hashlib.sha256(text.encode()).hexdigest()[:32]

    @property
    def timing(self) -> str:
        """What sets the fire times; when it changes, the schedule starts again from now."""
        return timing(self.definition())

    # -- fire times --------------------------------------------------------------

    def next_after(self, moment: datetime) -> datetime:
        """The first fire time strictly after ``moment`` (UTC)."""
        return next(self._forward(moment))

    def latest_until(self, moment: datetime) -> datetime | None:
        """The last fire time at or before ``moment`` (UTC), or None before the epoch."""
        return next(self._backward(moment), None)

    def forward(self, moment: datetime) -> Iterator[datetime]:
        """Fire times strictly after ``moment``, oldest first."""
        return self._forward(moment)

    def backward(self, moment: datetime) -> Iterator[datetime]:
        """Fire times at or before ``moment``, newest first."""
        return self._backward(moment)

    def _forward(self, moment: datetime) -> Iterator[datetime]:
        moment = moment.astimezone(UTC)
        if self.every is not None:
            step = int((moment - EPOCH) // timedelta(seconds=self.every)) + 1
            while True:
                yield EPOCH + timedelta(seconds=step * self.every)
                step += 1
        assert self.cron is not None
        for local in CronSim(self.cron, moment.astimezone(self.zone)):
            if not local.fold:  # the second pass of a repeated hour: fired on the first
                yield local.astimezone(UTC)

    def _backward(self, moment: datetime) -> Iterator[datetime]:
        moment = moment.astimezone(UTC)
        if self.every is not None:
            step = int((moment - EPOCH) // timedelta(seconds=self.every))
            while step >= 0:
                yield EPOCH + timedelta(seconds=step * self.every)
                step -= 1
            return
        assert self.cron is not None
        # cronsim looks strictly before its start: start a microsecond late so
        # that `moment` itself counts.
        start = (moment + timedelta(microseconds=1)).astimezone(self.zone)
        for local in CronSim(self.cron, start, reverse=True):
            if local < EPOCH:
                return
            if not local.fold:
                yield local.astimezone(UTC)


def timing(definition: Mapping[str, Any]) -> str:
    """The part of a stored ``definition()`` that sets the fire times: cron, every, time zone."""
    return f"{definition.get('cron')}|{definition.get('every')}|{definition.get('timezone')}"


@dataclass(frozen=True)
class Skipped:
    """Missed fire times ``catch_up`` dropped: every fire time of the schedule from ``first`` to ``last``."""

    first: datetime
    last: datetime
    count: int
    # False when a cron line's count stopped at MAX_COUNTED: there are more than ``count``.
    exact: bool = True

    def __str__(self) -> str:
        count = f"{self.count:,}" if self.exact else f"more than {self.count:,}"
        if self.first == self.last:
            return f"{count} missed fire time ({self.first.isoformat()})"
        return f"{count} missed fire times, from {self.first.isoformat()} to {self.last.isoformat()}"


@dataclass(frozen=True)
class FirePlan:
    """What one schedule owes at a moment: the fire times to enqueue, and how far that settles it.

    ``through`` is the newest fire time the plan settles: once it is carried
    out, every fire time up to it is handled (enqueued, or skipped by
    ``catch_up``). It is the newest fire time at or before the moment unless
    ``more`` on-time fire times are owed after it, for the next plan.
    """

    fire_times: tuple[datetime, ...]
    through: datetime
    skipped: Skipped | None = None
    more: bool = False


def plan_fires(schedule: Schedule, handled_through: datetime, now: datetime, grace: float) -> FirePlan | None:
    """Decide which fire times in (``handled_through``, ``now``] to enqueue; None if none came.

    A fire time no older than ``grace`` seconds is on time and always
    enqueued: the scheduler merely woke late. Older ones were missed while no
    worker fired: ``catch_up`` keeps the newest (``"latest"``), none
    (``"none"``), or up to ``MAX_CATCH_UP`` of the newest (``"all"``), and
    the plan says which it skipped. The on-time fire times are planned
    oldest first, up to ``ON_TIME_BATCH`` of them; if more are owed, the
    plan settles only up to the last it enqueues and says so (``more``).
    """
    first = schedule.next_after(handled_through)
    if first > now:
        return None
    late = now - timedelta(seconds=grace)
    kept: list[datetime] = []
    skipped = None
    if first <= late:
        kept, skipped = _catch_up(schedule, first, late)
    on_time: list[datetime] = []
    more = False
    for fire_time in schedule.forward(max(handled_through, late)):
        if fire_time > now:
            break
        if len(on_time) == ON_TIME_BATCH:
            more = True
            break
        on_time.append(fire_time)
    if on_time:
        through = on_time[-1]
    elif kept:
        through = kept[-1]  # catch_up keeps the newest missed fire times
    else:
        assert skipped is not None  # first <= late: the missed ones were kept or skipped
        through = skipped.last
    return FirePlan(tuple(kept + on_time), through, skipped, more)


def _catch_up(schedule: Schedule, first: datetime, late: datetime) -> tuple[list[datetime], Skipped | None]:
    """The missed fire times, ``first`` to ``late``, that ``catch_up`` keeps (oldest first), and the rest."""
    keep = {"latest": 1, "all": MAX_CATCH_UP}.get(schedule.catch_up, 0)
    kept: list[datetime] = []
    last = None  # the newest skipped
    count, exact = 0, True
    for fire_time in schedule.backward(late):
        if fire_time < first:
            break
        if len(kept) < keep:
            kept.append(fire_time)
            continue
        last = last or fire_time
        if schedule.every is not None:
            # The rest are evenly spaced: count them instead of walking them.
            count = (fire_time - first) // timedelta(seconds=schedule.every) + 1
            break
        count += 1
        if count >= MAX_COUNTED:  # a walk of cron times this long only feeds a log line
            exact = fire_time == first
            break
    kept.reverse()
    return kept, Skipped(first, last, count, exact) if last is not None else None
