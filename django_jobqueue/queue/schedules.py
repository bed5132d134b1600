"""``ScheduleBook``: the declared schedules against their rows, on one database.

The worker's scheduler calls ``sync`` once at start and ``fire_due`` on its
timer; the admin and ``manage.py jobqueue schedules`` read ``states`` and
call ``pause``, ``resume`` and ``run_now``. Each fire is one transaction: the
row's ``handled_through`` moves from the value read (``ops.advance``) and the
jobs for the fire times in between are inserted, or neither happens.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime

from django.db import transaction

from ..conf import jobqueue_settings
from ..models import Job, Schedule
from .client import QueueClient
from .ops import schedules as ops
from .timetable import MAX_CATCH_UP, FirePlan, Skipped, plan_fires, timing
from .timetable import Schedule as Declared

logger = logging.getLogger(__name__)

# What catch_up enqueues of the missed fire times, for the line that logs those it skipped.
KEPT = {
    "latest": "enqueues the newest only",
    "none": "enqueues none",
    "all": f"enqueues the newest {MAX_CATCH_UP}",
}


@dataclass(frozen=True)
class Fired:
    """One schedule fired: its fire times, the jobs enqueued for them, the missed ones skipped."""

    schedule: str
    fire_times: tuple[datetime, ...]
    job_ids: tuple[int, ...]
    skipped: Skipped | None
    through: datetime  # every fire time up to here is now handled
    error: str | None = None  # why its jobs could not be enqueued (nothing was written)
    more: bool = False  # on-time fire times after `through` are owed still: fire again at once


@dataclass(frozen=True)
class ScheduleState:
    """A declared schedule as pages show it (times aware, UTC)."""

    schedule: Declared
    next_fire_at: datetime | None
    last_fire_at: datetime | None
    last_job_id: int | None
    paused: bool
    row_id: int | None  # None until a worker or the admin has synced it

    def as_json(self) -> dict[str, object]:
        return {
            "name": self.schedule.name,
            "job": self.schedule.job,
            "cron": self.schedule.cron,
            "every": self.schedule.every,
            "timezone": self.schedule.timezone,
            "catch_up": self.schedule.catch_up,
            "queue": self.schedule.queue,
            "priority": self.schedule.priority,
            "payload": self.schedule.payload,
            "next_fire_at": _iso(self.next_fire_at),
            "last_fire_at": _iso(self.last_fire_at),
            "last_job_id": self.last_job_id,
            "paused": self.paused,
        }


class ScheduleBook:
    """The schedules of the queue on database ``using``."""

    def __init__(self, using: str | None = None) -> None:
        self.client = QueueClient(using)
        self.using = self.client.using

    def now(self) -> datetime:
        """The database's clock (aware, UTC)."""
        return ops.database_now(self.using)

    def sync(self, schedules: Sequence[Declared], now: datetime | None = None) -> None:
        """Make the rows match the declarations.

        A new schedule gets a row and starts from now; a changed one has its
        declaration replaced, and starts again from now if its fire times
        changed (cron, every or time zone); a removed one loses its row.
        """
        now = now or self.now()
        with transaction.atomic(using=self.using):
            rows = ops.schedule_rows(self.using)
            self._add_missing(schedules, rows, now)
            for schedule in schedules:
                row = rows.get(schedule.name)
                if row is not None and row.signature != schedule.signature:
                    restart = timing(row.definition) != schedule.timing
                    if not ops.redefine_schedule(self.using, _entry(schedule), now, restart=restart):
                        continue
                    if restart:
                        logger.info(
                            "schedule %s changed: %s; starting again from now: "
                            "its fire times after %s up to %s are skipped",
                            schedule.name,
                            schedule.when,
                            _iso(ops.as_utc(row.handled_through)),
                            now.isoformat(),
                        )
                    else:
                        logger.info("schedule %s changed: %s", schedule.name, schedule.when)
            forgotten = ops.forget_schedules(self.using, [s.name for s in schedules])
            if forgotten:
                logger.info("forgot %s schedule(s) no longer declared", forgotten)

    def add_missing(self, schedules: Sequence[Declared], now: datetime | None = None) -> None:
        """Insert a row, starting from now, for each schedule that has none; change no other row.

        For a process that is not a worker (the admin): unlike ``sync`` it
        never redefines or deletes a row, which would take a schedule from
        workers that run other code (a rolling deploy), until they restart.
        """
        rows = ops.schedule_rows(self.using, [s.name for s in schedules])
        if any(s.name not in rows for s in schedules):
            self._add_missing(schedules, rows, now or self.now())

    def _add_missing(
        self, schedules: Sequence[Declared], rows: Mapping[str, Schedule], now: datetime
    ) -> None:
        """Insert a row starting from ``now`` for each schedule not in ``rows``.

        One INSERT that skips a name inserted meanwhile by another process.
        """
        missing = [_entry(s) for s in schedules if s.name not in rows]
        if missing:
            ops.add_schedules(self.using, missing, now)

    def fire_due(self, schedules: Sequence[Declared], now: datetime | None = None) -> list[Fired]:
        """Enqueue the jobs of every fire time that came and no worker has handled yet.

        ``now`` defaults to the database's clock. Safe on any number of workers
        at once: each fire time is enqueued by exactly one call.
        """
        now = now or self.now()
        grace = float(jobqueue_settings.SCHEDULE_GRACE)
        rows = ops.schedule_rows(self.using, [s.name for s in schedules])
        # A row deleted by a worker that no longer declares it (a rolling
        # deploy): this one still does, so it starts again from now.
        self._add_missing(schedules, rows, now)
        fired = []
        for schedule in schedules:
            row = rows.get(schedule.name)
            if row is None or row.paused or row.signature != schedule.signature:
                continue
            seen = ops.as_utc(row.handled_through)
            assert seen is not None
            plan = plan_fires(schedule, seen, now, grace)
            if plan is None:
                next_fire = schedule.next_after(now)
                if ops.as_utc(row.next_fire_at) != next_fire:
                    ops.note_next_fire(self.using, schedule.name, schedule.signature, next_fire)
                continue
            try:
                result = self._fire(schedule, seen, plan, now)
            except ValueError as exc:
                # Its declaration passed the system checks, so the job's code
                # changed under it; nothing was written, and the next call tries again.
                result = Fired(schedule.name, plan.fire_times, (), None, seen, error=str(exc))
            if result is not None:
                fired.append(result)
        return fired

    def _fire(self, schedule: Declared, seen: datetime, plan: FirePlan, now: datetime) -> Fired | None:
        last = plan.fire_times[-1] if plan.fire_times else None
        with transaction.atomic(using=self.using):
            moved = ops.advance(
                self.using,
                schedule.name,
                schedule.signature,
                seen,
                plan.through,
                last,
                schedule.next_after(plan.through),
                now,
            )
            if not moved:
                return None  # another worker fired it, or it was paused or redefined meanwhile
            jobs = self.client.push_many(_job_items(schedule, plan.fire_times))
            if jobs:
                ops.note_fired_job(self.using, schedule.name, jobs[-1].pk)
        if plan.skipped is not None:
            logger.warning(
                "schedule %s skipped %s, more than SCHEDULE_GRACE late (catch_up %r %s)",
                schedule.name,
                plan.skipped,
                schedule.catch_up,
                KEPT[schedule.catch_up],
            )
        job_ids = tuple(job.pk for job in jobs)
        return Fired(schedule.name, plan.fire_times, job_ids, plan.skipped, plan.through, more=plan.more)

    def states(self, schedules: Sequence[Declared], now: datetime | None = None) -> list[ScheduleState]:
        """Each declared schedule with its row's state; reads only."""
        now = now or self.now()
        rows = ops.schedule_rows(self.using, [s.name for s in schedules])
        states = []
        for schedule in schedules:
            row = rows.get(schedule.name)
            current = row is not None and row.signature == schedule.signature
            states.append(
                ScheduleState(
                    schedule=schedule,
                    next_fire_at=schedule.next_after(now),
                    last_fire_at=ops.as_utc(row.last_fire_at) if row is not None else None,
                    last_job_id=row.last_job_id if row is not None else None,
                    paused=bool(row is not None and row.paused and current),
                    row_id=row.pk if row is not None else None,
                )
            )
        return states

    def pause(self, names: Iterable[str]) -> list[str]:
        """Stop firing these schedules until resumed; return those that were running."""
        with transaction.atomic(using=self.using):
            return ops.set_paused(self.using, names, True, self.now())

    def resume(self, names: Iterable[str]) -> list[str]:
        """Fire these schedules again from now (what came while paused is skipped); return those resumed."""
        names = list(names)
        with transaction.atomic(using=self.using):
            now = self.now()
            rows = ops.schedule_rows(self.using, names)
            resumed = ops.set_paused(self.using, names, False, now)
        for name in resumed:
            logger.info(
                "schedule %s resumed: its fire times after %s up to %s, while it was paused, are skipped",
                name,
                _iso(ops.as_utc(rows[name].handled_through)),
                now.isoformat(),
            )
        return resumed

    def run_now(self, schedule: Declared) -> Job:
        """Enqueue one job of ``schedule`` to run now, besides its fire times; return it."""
        return self.client.push(schedule.job, schedule.payload, **_options(schedule))

    def run_now_once(self, schedule: Declared, already_ran: Callable[[], bool]) -> Job | None:
        """``run_now`` with the schedule's row locked, unless ``already_ran()`` says so there.

        The caller's own transaction (a form's receipt, written after this
        returns) decides once per request: two requests asking together are
        served one after the other, and the second finds the first's receipt.
        Return None if the row is gone or ``already_ran()``. Call inside
        ``transaction.atomic()``, so that the lock lasts until the receipt commits.
        """
        if not ops.lock_schedule(self.using, schedule.name) or already_ran():
            return None
        return self.run_now(schedule)

    def rows(self) -> dict[str, Schedule]:
        return ops.schedule_rows(self.using)


def _entry(schedule: Declared) -> dict[str, object]:
    return {
        "name": schedule.name,
        "job": schedule.job,
        "definition": schedule.definition(),
        "signature": schedule.signature,
    }


def _options(schedule: Declared) -> dict[str, object]:
    options: dict[str, object] = {}
    if schedule.queue is not None:
        options["queue"] = schedule.queue
    if schedule.priority is not None:
        options["priority"] = schedule.priority
    if schedule.concurrency_key is not None:
        options["concurrency_key"] = schedule.concurrency_key
    if schedule.concurrency_limit is not None:
        options["concurrency_limit"] = schedule.concurrency_limit
    return options


def _job_items(schedule: Declared, fire_times: Sequence[datetime]) -> list[tuple[str, dict, dict]]:
    options = _options(schedule)
    return [
        (schedule.job, dict(schedule.payload), {**options, "run_at": ops.as_stored(fire_time)})
        for fire_time in fire_times
    ]


def _iso(moment: datetime | None) -> str | None:
    return moment.isoformat() if moment is not None else None
