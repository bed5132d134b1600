"""``ScheduleBook``: the declared schedules against their rows, on one database.

The worker's scheduler calls ``sync`` once at start, ``fire_round`` on its
timer and ``add_missing`` now and then; the admin and ``manage.py jobqueue
schedules`` read ``states`` and call ``pause``, ``resume`` and ``run_now``.
Each fire is one transaction, with the schedule's row locked: the row's
``handled_through`` moves from the value read (``ops.advance``) and the jobs
for the fire times in between are inserted, or neither happens. A wake reads
only the rows whose stored next fire time has come (``ops.due_rows``), so
its cost follows the schedules that are due, not those declared.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime

from cronsim import CronSimError
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
class Round:
    """What one wake fired, and when the scheduler should wake again."""

    fired: list[Fired]
    held: list[str]  # due schedules whose rows another transaction held: come back to them soon
    next_due: datetime | None  # the earliest next fire time of any row after the wake's moment

    @property
    def again(self) -> bool:
        """On-time fire times are owed still: wake again at once."""
        return any(each.more for each in self.fired)


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
            missing = [schedule for schedule in schedules if schedule.name not in rows]
            if missing:
                self._add(missing, now)
            for schedule in schedules:
                row = rows.get(schedule.name)
                if row is not None and row.signature != schedule.signature:
                    restart = timing(row.definition) != schedule.timing
                    # New fire times: the row's next one is the new line's, wherever the old one's was.
                    next_fire = schedule.next_after(now) if restart else None
                    if not ops.redefine_schedule(self.using, _entry(schedule), now, restart=next_fire):
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

    def add_missing(self, schedules: Sequence[Declared], now: datetime | None = None) -> list[str]:
        """Insert a row, starting from now, for each schedule that has none; return their names.

        Change no other row: unlike ``sync`` it never redefines or deletes a
        row, which would take a schedule from workers that run other code (a
        rolling deploy), until they restart. For the admin, and for the
        scheduler now and then: a row deleted by a worker that no longer
        declares it comes back, starting from then. Reads the names alone.
        """
        names = ops.schedule_names(self.using)
        missing = [schedule for schedule in schedules if schedule.name not in names]
        if missing:
            self._add(missing, now or self.now())
        return [schedule.name for schedule in missing]

    def _add(self, schedules: Sequence[Declared], now: datetime) -> None:
        """Insert a row starting from ``now`` for each of ``schedules``, with its first fire time after it.

        One INSERT that skips a name inserted meanwhile by another process.
        """
        entries = [{**_entry(schedule), "next_fire_at": schedule.next_after(now)} for schedule in schedules]
        ops.add_schedules(self.using, entries, now)

    def fire_due(
        self, schedules: Sequence[Declared] | Mapping[str, Declared], now: datetime | None = None
    ) -> list[Fired]:
        """Enqueue the jobs of every fire time that came and no worker has handled yet.

        ``now`` defaults to the database's clock. Safe on any number of workers
        at once: each fire time is enqueued by exactly one call. See ``fire_round``.
        """
        return self.fire_round(schedules, now).fired

    def fire_round(
        self, schedules: Sequence[Declared] | Mapping[str, Declared], now: datetime | None = None
    ) -> Round:
        """Fire the schedules that are due: what a scheduler does when it wakes.

        Reads only the rows whose stored next fire time has come, and of
        those fires the ones whose declaration here is the row's (``schedules``,
        best a mapping by name, made once). Each is fired in a transaction of
        its own, with its row locked; a row another transaction holds is
        passed over, for the caller to come back to. A paused row, or one
        that owes nothing yet, has its next fire time moved on.
        """
        now = now or self.now()
        grace = float(jobqueue_settings.SCHEDULE_GRACE)
        by_name = schedules if isinstance(schedules, Mapping) else {s.name: s for s in schedules}
        fired: list[Fired] = []
        held: list[str] = []
        for row in ops.due_rows(self.using, now):
            schedule = by_name.get(row.name)
            if schedule is None or schedule.signature != row.signature:
                continue  # another declaration's (a rolling deploy): the workers that hold it fire it
            plan = None if row.paused else plan_fires(schedule, row.handled_through, now, grace)
            try:
                with transaction.atomic(using=self.using):
                    if not ops.try_lock_schedule(self.using, row.name):
                        held.append(row.name)
                        continue
                    if plan is None:
                        ops.move_on(self.using, row, schedule.next_after(now))
                        continue
                    result = self._fire(schedule, row.handled_through, plan, now)
            except ValueError as exc:
                # The enqueue refused the jobs. Their declaration passed the system checks,
                # so the job's code changed under it; nothing was written, the next wake tries again.
                assert plan is not None
                result = Fired(schedule.name, plan.fire_times, (), None, row.handled_through, error=str(exc))
            if result is None:
                continue  # another worker fired it meanwhile
            if result.skipped is not None:
                logger.warning(
                    "schedule %s skipped %s, more than SCHEDULE_GRACE late (catch_up %r %s)",
                    schedule.name,
                    result.skipped,
                    schedule.catch_up,
                    KEPT[schedule.catch_up],
                )
            fired.append(result)
        return Round(fired, held, ops.next_fire_after(self.using, now))

    def _fire(self, schedule: Declared, seen: datetime, plan: FirePlan, now: datetime) -> Fired | None:
        """Carry out ``plan`` in the caller's transaction; None if another worker moved the row first."""
        moved = ops.advance(
            self.using,
            schedule.name,
            schedule.signature,
            seen,
            plan.through,
            plan.fire_times[-1] if plan.fire_times else None,
            schedule.next_after(plan.through),
            now,
        )
        if not moved:
            return None
        jobs = self.client.push_many(_job_items(schedule, plan.fire_times))
        if jobs:
            ops.note_fired_job(self.using, schedule.name, jobs[-1].pk)
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
            paused = bool(row is not None and row.paused and current)
            states.append(
                ScheduleState(
                    schedule=schedule,
                    # A paused schedule fires at no time until it is resumed, as the admin says.
                    next_fire_at=None if paused else schedule.next_after(now),
                    last_fire_at=ops.as_utc(row.last_fire_at) if row is not None else None,
                    last_job_id=row.last_job_id if row is not None else None,
                    paused=paused,
                    row_id=row.pk if row is not None else None,
                )
            )
        return states

    def pause(self, names: Iterable[str]) -> list[str]:
        """Stop firing these schedules until resumed; return those that were running."""
        with transaction.atomic(using=self.using):
            return ops.pause(self.using, names, self.now())

    def resume(self, names: Iterable[str]) -> list[str]:
        """Fire these schedules again from now (what came while paused is skipped); return those resumed.

        Each fires next at its first fire time after now by the declaration
        its row holds (the one the workers that fire it hold).
        """
        names = list(names)
        resumed = []
        with transaction.atomic(using=self.using):
            now = self.now()
            rows = ops.schedule_rows(self.using, names)
            for name in names:
                row = rows.get(name)
                if row is None:
                    continue
                stored = stored_declaration(row)
                # A declaration this process cannot read: due now, for the workers to compute.
                next_fire = stored.next_after(now) if stored is not None else now
                if ops.resume(self.using, name, now, next_fire):
                    resumed.append(name)
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


def stored_declaration(row: Schedule) -> Declared | None:
    """The declaration a row holds, as a ``Schedule``; None if it is not one (written by other code)."""
    definition = row.definition if isinstance(row.definition, dict) else {}
    try:
        stored = Declared(name=row.name, **definition)
        stored.next_after(datetime.now().astimezone())  # a cron or time zone this process cannot read
    except (TypeError, ValueError, LookupError, AssertionError, CronSimError):
        return None
    return stored


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
