"""Catch-up at its bounds: every on-time fire time is enqueued, and every one skipped is logged.

With the clock passed in, as in test_schedules.py, whose helpers these use.
"""

from __future__ import annotations

import logging
from datetime import datetime, timedelta

import pytest
from django.test.utils import override_settings

from django_jobqueue.models import Schedule as ScheduleRow
from django_jobqueue.queue.timetable import MAX_CATCH_UP, ON_TIME_BATCH, plan_fires
from tests.test_schedules import declared, every, run_ats, utc


def test_on_time_fire_times_past_one_batch_are_owed_oldest_first_not_dropped():
    # 300 fire times within the grace: the plan takes the oldest ON_TIME_BATCH, settles only
    # up to them, and says more are owed; none is left behind as handled.
    start = utc(2026, 1, 1)
    plan = plan_fires(every(1, catch_up="none"), start, start + timedelta(seconds=300.3), 600)
    assert plan is not None and plan.more and plan.skipped is None
    assert plan.fire_times == tuple(start + timedelta(seconds=s) for s in range(1, ON_TIME_BATCH + 1))
    assert plan.through == plan.fire_times[-1]
    rest = plan_fires(every(1, catch_up="none"), plan.through, start + timedelta(seconds=300.3), 600)
    assert rest is not None and rest.fire_times[0] == plan.through + timedelta(seconds=1)


@override_settings(JOBQUEUE={"SCHEDULE_GRACE": 600})
def test_every_on_time_fire_time_is_enqueued_however_many_the_grace_holds(book):
    # The numbers: a grace of 600 s, every second, and the database back after 300 s.
    # All 300 fire times are on time: each is enqueued, a batch a call, whatever catch_up says,
    # and the row never says handled a fire time that has no job.
    schedules = declared(tick={"job": "tests.schedules.report", "every": 1, "catch_up": "none"})
    start = utc(2026, 1, 1)
    book.sync(schedules, now=start)
    back = start + timedelta(seconds=300, milliseconds=300)
    fired = []
    while batch := book.fire_due(schedules, now=back):
        assert len(fired) < 10, "still firing"
        fired.extend(batch)
        assert ScheduleRow.objects.get().handled_through == max(run_ats())
    assert run_ats() == [start + timedelta(seconds=s) for s in range(1, 301)]
    assert not any(each.skipped for each in fired)
    assert [each.more for each in fired] == [True, True, False]


@pytest.mark.parametrize(("catch_up", "kept"), [("latest", 1), ("none", 0), ("all", MAX_CATCH_UP)])
@override_settings(JOBQUEUE={"SCHEDULE_GRACE": 5})
def test_every_skipped_fire_time_is_logged(book, caplog, catch_up, kept):
    schedules = declared(tick={"job": "tests.schedules.report", "every": 1, "catch_up": catch_up})
    start = utc(2026, 1, 1)
    book.sync(schedules, now=start)
    caplog.set_level(logging.INFO, logger="django_jobqueue")
    # Down for 150 s: 00:00:01 .. 00:02:25 are past the grace, 00:02:26 .. 00:02:30 on time.
    book.fire_due(schedules, now=start + timedelta(seconds=150, milliseconds=300))
    missed = [start + timedelta(seconds=s) for s in range(1, 146)]
    skipped, caught_up = missed[: len(missed) - kept], missed[len(missed) - kept :]
    on_time = [start + timedelta(seconds=s) for s in range(146, 151)]
    assert run_ats() == caught_up + on_time
    # Each fire time that has no job is in the one line that says what was skipped.
    lines = [(r.levelname, r.getMessage()) for r in caplog.records if "skipped" in r.getMessage()]
    assert [level for level, _line in lines] == ["WARNING"]
    line = lines[0][1]
    assert (
        f"schedule tick skipped {len(skipped)} missed fire times, "
        f"from {skipped[0].isoformat()} to {skipped[-1].isoformat()}"
    ) in line
    assert f"catch_up {catch_up!r}" in line


def test_a_resume_and_a_new_timing_log_the_fire_times_they_skip(book, caplog):
    caplog.set_level(logging.INFO, logger="django_jobqueue")
    schedules = declared(tick={"job": "tests.schedules.report", "every": 10})
    book.sync(schedules, now=utc(2026, 1, 1))
    book.fire_due(schedules, now=utc(2026, 1, 1, 0, 0, 10))
    book.pause(["tick"])
    resumed_at = book.now()
    book.resume(["tick"])
    [line] = [r.getMessage() for r in caplog.records if "resumed" in r.getMessage()]
    assert line.startswith("schedule tick resumed: its fire times after 2026-01-01T00:00:10+00:00 up to ")
    assert datetime.fromisoformat(line.split(" up to ")[1].split(",")[0]) >= resumed_at
    retimed = declared(tick={"job": "tests.schedules.report", "every": 20})
    handled = ScheduleRow.objects.get().handled_through
    book.sync(retimed, now=handled + timedelta(minutes=5))
    [line] = [r.getMessage() for r in caplog.records if "changed" in r.getMessage()]
    assert line.endswith(
        f"starting again from now: its fire times after {handled.isoformat()} "
        f"up to {(handled + timedelta(minutes=5)).isoformat()} are skipped"
    )
