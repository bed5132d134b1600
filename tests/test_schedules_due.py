"""How a wake finds the due schedules: each row's stored next fire time, and its index.

With the clock passed in, as in test_schedules.py, whose helpers these use.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, fields
from datetime import datetime, timedelta
from typing import ClassVar

from django.db import connection

from django_jobqueue.models import Schedule as ScheduleRow
from django_jobqueue.queue.ops.schedules import due_query
from django_jobqueue.queue.timetable import Schedule
from tests.test_schedules import NIGHTLY, declared, run_ats, utc

SECOND = timedelta(seconds=1)


@dataclass(frozen=True)
class Watched(Schedule):
    """A schedule that notes each time its fire times are computed, by its name."""

    computed: ClassVar[list[str]] = []

    def _forward(self, moment: datetime) -> Iterator[datetime]:
        self.computed.append(self.name)
        return super()._forward(moment)

    def _backward(self, moment: datetime) -> Iterator[datetime]:
        self.computed.append(self.name)
        return super()._backward(moment)


def watched(schedule: Schedule) -> Watched:
    return Watched(**{field.name: getattr(schedule, field.name) for field in fields(schedule)})


def next_fire_at(name: str) -> datetime | None:
    return ScheduleRow.objects.get(name=name).next_fire_at


def test_a_wake_computes_the_fire_times_of_the_due_schedules_alone(book):
    entries = {f"daily-{n:03d}": {**NIGHTLY, "cron": f"{n % 60} {n % 24} * * *"} for n in range(300)}
    schedules = [watched(s) for s in declared(tick={"job": "tests.schedules.report", "every": 1}, **entries)]
    by_name = {schedule.name: schedule for schedule in schedules}
    start = utc(2026, 6, 1, 12, 0, 0, 500_000)
    book.sync(schedules, now=start)
    Watched.computed.clear()

    fired = book.fire_due(schedules, now=start + 2 * SECOND)
    owed = (utc(2026, 6, 1, 12, 0, 1), utc(2026, 6, 1, 12, 0, 2))
    assert [each.fire_times for each in fired] == [owed]
    assert set(Watched.computed) == {"tick"}, "a wake computed the fire times of schedules not due"
    Watched.computed.clear()
    round_ = book.fire_round(by_name, now=start + 2.2 * SECOND)
    assert round_.fired == [] and Watched.computed == []
    assert round_.next_due == utc(2026, 6, 1, 12, 0, 3), "the scheduler's next wake"


def test_the_due_rows_are_read_through_the_index_of_next_fire_times(book):
    entries = {f"daily-{n:04d}": {**NIGHTLY, "cron": f"{n % 60} {n % 24} * * *"} for n in range(2_000)}
    schedules = declared(**entries)
    start, now = utc(2026, 6, 1, 12), utc(2026, 6, 1, 12, 5)
    book.sync(schedules, now=start)
    with connection.cursor() as cursor:
        table = "TABLE " if connection.vendor == "mysql" else ""
        cursor.execute(f"ANALYZE {table}{ScheduleRow._meta.db_table}")
        if cursor.description:
            cursor.fetchall()  # MySQL's ANALYZE TABLE answers with a row
    plan = due_query(book.using, now).explain()
    # Two ranges of the index: no walk of the table (PostgreSQL, MySQL) or of the whole index (SQLite).
    assert "jobqueue_schedule_due_idx" in plan, plan
    assert "Seq Scan" not in plan and "SCAN django_jobqueue_schedule" not in plan, plan
    assert " ALL " not in plan, plan  # MySQL's full table scan
    due = {schedule.name for schedule in schedules if schedule.next_after(start) <= now}
    assert 0 < len(due) < 100
    assert {name for name, *_row in due_query(book.using, now)} == due


def test_a_changed_schedule_fires_by_its_new_line_whichever_worker_started_last(book):
    # A rolling deploy: workers of the old settings (a nightly line) and of the new ones
    # (every minute) start in turns. The row's next fire time is always that of the
    # declaration it holds, and only the workers that hold it fire it.
    old = declared(job=NIGHTLY)
    new = declared(job={"job": "tests.schedules.report", "every": 60})
    start = utc(2026, 6, 1, 12)
    book.sync(old, now=start)
    assert next_fire_at("job") == utc(2026, 6, 2, 1)  # 03:00 in Amsterdam
    book.sync(new, now=start + 30 * 60 * SECOND)
    assert next_fire_at("job") == utc(2026, 6, 1, 12, 31)
    assert book.fire_due(old, now=utc(2026, 6, 1, 12, 31, 0, 500)) == []
    assert next_fire_at("job") == utc(2026, 6, 1, 12, 31), "an old worker moved the new line's row"
    [fired] = book.fire_due(new, now=utc(2026, 6, 1, 12, 31, 0, 500))
    assert fired.fire_times == (utc(2026, 6, 1, 12, 31),)
    assert next_fire_at("job") == utc(2026, 6, 1, 12, 32)

    book.sync(old, now=utc(2026, 6, 1, 12, 31, 30))  # an old worker restarts: its line again
    assert next_fire_at("job") == utc(2026, 6, 2, 1)
    assert book.fire_due(new, now=utc(2026, 6, 1, 12, 32, 1)) == []
    [fired] = book.fire_due(old, now=utc(2026, 6, 2, 1, 0, 1))
    assert fired.fire_times == (utc(2026, 6, 2, 1),)
    assert run_ats() == [utc(2026, 6, 1, 12, 31), utc(2026, 6, 2, 1)]

    # A row that older code left without a next fire time is due: the next wake gives it one.
    ScheduleRow.objects.update(next_fire_at=None)
    assert book.fire_due(old, now=utc(2026, 6, 2, 1, 0, 2)) == []
    assert next_fire_at("job") == utc(2026, 6, 3, 1)


def test_a_paused_row_moves_on_and_fires_at_its_next_fire_time_once_resumed(book):
    schedules = declared(tick={"job": "tests.schedules.report", "every": 10})
    tick = schedules[0]
    # The resume reads the database's clock: the rest of the test is set around it.
    now = book.now()
    book.sync(schedules, now=now - 40 * SECOND)
    book.pause(["tick"])
    assert book.fire_due(schedules, now=now - 15 * SECOND) == []
    # Not fired, but moved along its timetable: the workers still wake for it.
    assert next_fire_at("tick") == tick.next_after(now - 15 * SECOND)
    assert book.fire_round(schedules, now=now - 14 * SECOND).next_due == next_fire_at("tick")

    assert book.resume(["tick"]) == ["tick"]
    resumed_at = ScheduleRow.objects.get().handled_through
    assert next_fire_at("tick") == tick.next_after(resumed_at)
    round_ = book.fire_round(schedules, now=tick.next_after(resumed_at) + SECOND / 10)
    assert [each.fire_times for each in round_.fired] == [(tick.next_after(resumed_at),)]
    assert run_ats() == [tick.next_after(resumed_at)], "the fire times of the pause were skipped"
