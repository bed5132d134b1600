"""Periodic jobs: fire times, DST, catch-up and the declarations, with a controlled clock."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from zoneinfo import ZoneInfo

import pytest
from django.test.utils import override_settings

from django_jobqueue import job, registry
from django_jobqueue.checks import check_jobqueue_settings
from django_jobqueue.models import Job
from django_jobqueue.models import Schedule as ScheduleRow
from django_jobqueue.queue.schedules import ScheduleBook
from django_jobqueue.queue.timetable import MAX_CATCH_UP, Schedule, plan_fires
from django_jobqueue.schedules import ScheduleError, declared_schedules, read_schedule, schedule_problems

AMSTERDAM = ZoneInfo("Europe/Amsterdam")
MINUTE = timedelta(minutes=1)


@job(name="tests.schedules.report")
def report(kind: str = "daily") -> str:
    return kind


@job(name="tests.schedules.needs_account")
def needs_account(account: str) -> str:
    return account


def utc(*args: int) -> datetime:
    return datetime(*args, tzinfo=UTC)


def local(*args: int, fold: int = 0) -> datetime:
    return datetime(*args, tzinfo=AMSTERDAM, fold=fold)


def cron(expression: str, timezone: str = "Europe/Amsterdam", **fields: object) -> Schedule:
    return Schedule(name="s", job="tests.schedules.report", cron=expression, timezone=timezone, **fields)


def every(seconds: int, **fields: object) -> Schedule:
    return Schedule(name="s", job="tests.schedules.report", every=seconds, **fields)


def fires_between(schedule: Schedule, start: datetime, end: datetime) -> list[datetime]:
    times, moment = [], start
    while (moment := schedule.next_after(moment)) <= end:
        times.append(moment)
    return times


# -- fire times ----------------------------------------------------------------


def test_every_fires_at_multiples_of_its_period_since_the_epoch():
    schedule = every(30)
    assert schedule.next_after(utc(2026, 5, 1, 12, 0, 10)) == utc(2026, 5, 1, 12, 0, 30)
    assert schedule.next_after(utc(2026, 5, 1, 12, 0, 30)) == utc(2026, 5, 1, 12, 1, 0)
    assert schedule.latest_until(utc(2026, 5, 1, 12, 0, 30)) == utc(2026, 5, 1, 12, 0, 30)
    seven = every(7)  # not a divisor of a minute: still the same times on every worker
    fire = seven.next_after(utc(2026, 5, 1))
    assert fire.timestamp() % 7 == 0 and fire - utc(2026, 5, 1) <= timedelta(seconds=7)


def test_cron_fires_at_the_local_time_on_both_sides_of_each_dst_change():
    nightly = cron("0 3 * * *")
    spring = fires_between(nightly, local(2026, 3, 27, 12), local(2026, 3, 31, 12))
    autumn = fires_between(nightly, local(2026, 10, 23, 12), local(2026, 10, 27, 12))
    for fires in (spring, autumn):
        assert [f.astimezone(AMSTERDAM).hour for f in fires] == [3, 3, 3, 3]
    # 03:00 is 02:00 UTC in winter, 01:00 UTC in summer.
    assert [f.hour for f in spring] == [2, 1, 1, 1]
    assert [f.hour for f in autumn] == [1, 2, 2, 2]  # the 25th is already winter time at 03:00


def test_a_wall_clock_time_that_occurs_twice_fires_once():
    # 2026-10-25: 02:00-03:00 happens twice in Amsterdam (CEST, then CET).
    assert fires_between(cron("30 2 * * *"), local(2026, 10, 24, 12), local(2026, 10, 25, 12)) == [
        local(2026, 10, 25, 2, 30).astimezone(UTC)
    ]
    hourly = fires_between(cron("0 * * * *"), local(2026, 10, 25, 0, 30), local(2026, 10, 25, 4, 30))
    assert [f.astimezone(AMSTERDAM).strftime("%H:%M") for f in hourly] == ["01:00", "02:00", "03:00", "04:00"]
    assert len(set(hourly)) == len(hourly)
    # And walking backwards (the catch-up's direction) agrees.
    backward = []
    for fire in cron("0 * * * *").backward(local(2026, 10, 25, 4, 30)):
        if fire <= local(2026, 10, 25, 0, 30):
            break
        backward.append(fire)
    assert sorted(backward) == hourly


def test_a_wall_clock_time_that_does_not_exist_fires_once_just_after_the_gap():
    # 2026-03-29: 02:00-03:00 does not exist in Amsterdam; 02:30 fires at 03:00 CEST.
    fires = fires_between(cron("30 2 * * *"), local(2026, 3, 28, 12), local(2026, 3, 30, 12))
    assert fires == [local(2026, 3, 29, 3, 0).astimezone(UTC), local(2026, 3, 30, 2, 30).astimezone(UTC)]


def test_cron_in_utc_and_in_other_zones():
    assert cron("0 9 * * 1", "UTC").next_after(utc(2026, 12, 1)) == utc(2026, 12, 7, 9)
    assert cron("0 9 * * *", "America/New_York").next_after(utc(2026, 12, 1)) == utc(2026, 12, 1, 14)


# -- which fire times a moment owes ----------------------------------------------


def test_on_time_fire_times_are_all_enqueued_even_when_the_scheduler_woke_late():
    plan = plan_fires(every(1, catch_up="none"), utc(2026, 1, 1, 0, 0, 0), utc(2026, 1, 1, 0, 0, 5, 500), 60)
    assert plan is not None
    assert plan.fire_times == tuple(utc(2026, 1, 1, 0, 0, s) for s in range(1, 6))
    assert plan.through == utc(2026, 1, 1, 0, 0, 5) and plan.skipped is None and not plan.more


def test_nothing_is_owed_between_fire_times():
    assert plan_fires(every(60), utc(2026, 1, 1, 0, 1), utc(2026, 1, 1, 0, 1, 59), 60) is None


@pytest.mark.parametrize(
    ("catch_up", "expected_hours", "missed"),
    [("latest", [9, 12], 4), ("none", [12], 5), ("all", [5, 6, 7, 8, 9, 12], 0)],
)
def test_catch_up_after_downtime(catch_up, expected_hours, missed):
    # Down from 04:30 to 12:00:10; fire times 05:00 .. 09:00 were missed (10:00 and 11:00 are not
    # fire times of this cron line), 12:00 is on time.
    schedule = cron("0 5-9,12 * * *", "UTC", catch_up=catch_up)
    plan = plan_fires(schedule, utc(2026, 1, 1, 4, 30), utc(2026, 1, 1, 12, 0, 10), 60)
    assert plan is not None
    assert [f.hour for f in plan.fire_times] == expected_hours
    assert plan.through == utc(2026, 1, 1, 12)
    assert (plan.skipped.count if plan.skipped else 0) == missed


def test_catch_up_all_is_bounded_to_the_newest_fire_times():
    plan = plan_fires(every(60, catch_up="all"), utc(2026, 1, 1), utc(2026, 1, 2), 0)
    assert plan is not None
    assert len(plan.fire_times) == MAX_CATCH_UP
    assert plan.fire_times[-1] == utc(2026, 1, 2)
    assert plan.skipped is not None and plan.skipped.count == 24 * 60 - MAX_CATCH_UP
    assert (plan.skipped.first, plan.skipped.last) == (utc(2026, 1, 1, 0, 1), plan.fire_times[0] - MINUTE)
    # A year of downtime of an every-minute cron line is not walked minute by minute.
    plan = plan_fires(cron("* * * * *", "UTC", catch_up="latest"), utc(2025, 1, 1), utc(2026, 1, 1), 0)
    assert plan is not None and plan.fire_times == (utc(2026, 1, 1),)
    assert plan.skipped is not None and not plan.skipped.exact
    assert (plan.skipped.first, plan.skipped.last) == (utc(2025, 1, 1, 0, 1), utc(2025, 12, 31, 23, 59))
    assert str(plan.skipped).startswith("more than 10,000 missed fire times, from 2025-01-01T00:01:00+00:00")


# -- declarations and checks -------------------------------------------------------


def schedules_setting(**schedules: object) -> override_settings:
    return override_settings(JOBQUEUE={"SCHEDULES": schedules})


def test_declarations_from_settings_and_from_job_shorthand():
    @job(name="tests.schedules.shorthand", every=timedelta(minutes=5))
    def shorthand() -> None: ...

    try:
        with schedules_setting(
            nightly={"job": "tests.schedules.report", "cron": "0  3 * * *", "payload": {"kind": "daily"}}
        ):
            declared = {s.name: s for s in declared_schedules()}
        assert declared["nightly"].cron == "0 3 * * *"
        assert declared["nightly"].timezone == "UTC"  # TIME_ZONE
        assert declared["nightly"].catch_up == "latest"
        assert declared["tests.schedules.shorthand"].every == 300
        assert declared["tests.schedules.shorthand"].payload == {}
    finally:
        registry.unregister("tests.schedules.shorthand")


@pytest.mark.parametrize(
    ("entry", "message"),
    [
        ({"job": "tests.schedules.report", "cron": "61 * * * *"}, "bad 'cron'"),
        ({"job": "tests.schedules.report", "cron": "* * * *"}, "five fields"),
        ({"job": "tests.schedules.report", "cron": "* * * * * *"}, "five fields"),
        ({"job": "tests.schedules.report", "cron": "0 0 30 2 *"}, "bad 'cron'"),
        (
            {"job": "tests.schedules.report", "cron": "0 3 * * *", "timezone": "Mars/Olympus"},
            "unknown 'timezone'",
        ),
        ({"job": "tests.nobody", "every": 5}, "not registered"),
        ({"job": "tests.schedules.report", "every": 0}, "'every' must be from 1"),
        ({"job": "tests.schedules.report", "every": 1.5}, "whole number"),
        ({"job": "tests.schedules.report", "every": True}, "whole number"),
        ({"job": "tests.schedules.report", "every": 5, "cron": "* * * * *"}, "exactly one"),
        ({"job": "tests.schedules.report"}, "exactly one"),
        ({"job": "tests.schedules.report", "every": 5, "paylod": {}}, "unknown key(s) 'paylod'"),
        ({"job": "tests.schedules.report", "every": 5, "payload": [1]}, "JSON object"),
        ({"job": "tests.schedules.report", "every": 5, "payload": {"kind": float("nan")}}, "payload"),
        ({"job": "tests.schedules.report", "every": 5, "payload": {"knd": "x"}}, "unexpected argument"),
        ({"job": "tests.schedules.needs_account", "every": 5}, "missing argument"),
        ({"job": "tests.schedules.report", "every": 5, "catch_up": "some"}, "'catch_up'"),
        ({"job": "tests.schedules.report", "every": 5, "queue": "bad queue"}, "queue"),
        ({"job": "tests.schedules.report", "every": 5, "priority": 101}, "priority"),
        ("0 3 * * *", "must be a dict"),
    ],
)
def test_bad_schedules_are_check_errors_naming_the_schedule(entry, message):
    with pytest.raises(ScheduleError) as raised:
        read_schedule("nightly", entry)
    assert "schedule 'nightly'" in str(raised.value) and message in str(raised.value)
    with schedules_setting(nightly=entry):
        errors = [m for m in check_jobqueue_settings() if m.id == "django_jobqueue.E011"]
    assert len(errors) == 1 and "'nightly'" in errors[0].msg


def test_every_bad_schedule_is_reported_not_only_the_first():
    with schedules_setting(
        a={"job": "tests.nobody", "every": 5}, b={"job": "tests.schedules.report", "every": 0}
    ):
        problems = schedule_problems()
        with pytest.raises(ScheduleError):
            declared_schedules()
    assert [p.split(":")[0] for p in problems] == ["schedule 'a'", "schedule 'b'"]


def test_a_schedule_declared_twice_is_an_error():
    @job(name="tests.schedules.twice", every=60)
    def twice() -> None: ...

    try:
        with schedules_setting(**{"tests.schedules.twice": {"job": "tests.schedules.report", "every": 5}}):
            assert any("declared twice" in p for p in schedule_problems())
    finally:
        registry.unregister("tests.schedules.twice")


def test_schedules_setting_must_be_a_dict():
    with override_settings(JOBQUEUE={"SCHEDULES": ["nightly"]}):
        assert "django_jobqueue.E011" in [m.id for m in check_jobqueue_settings()]
    with override_settings(JOBQUEUE={"SCHEDULE_GRACE": -1}):
        assert "django_jobqueue.E012" in [m.id for m in check_jobqueue_settings()]


def test_job_refuses_cron_and_every_together():
    with pytest.raises(ValueError, match="not both"):
        job(name="tests.schedules.both", cron="* * * * *", every=60)


def runworker(schedules: dict[str, object], *args: str) -> subprocess.CompletedProcess[str]:
    """Run ``manage.py runworker`` in its own process, with ``schedules`` as its JOBQUEUE['SCHEDULES']."""
    return subprocess.run(
        [sys.executable, "manage.py", "runworker", *args],
        cwd=Path(__file__).resolve().parent.parent,
        env={**os.environ, "JOBQUEUE_SCHEDULES": json.dumps(schedules)},
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_runworker_refuses_to_start_with_a_bad_schedule():
    finished = runworker({"nightly": {"job": "send_otp", "cron": "0 25 * * *"}}, "--burst")
    assert finished.returncode != 0
    assert "django_jobqueue.E011" in finished.stderr and "schedule 'nightly'" in finished.stderr
    assert "started" not in finished.stderr


def test_runworker_without_checks_still_refuses_a_bad_schedule():
    finished = runworker({"nightly": {"job": "send_otp", "every": 0}}, "--skip-checks")
    assert finished.returncode == 1
    assert "refusing to start: schedule 'nightly'" in finished.stderr
    assert "Traceback" not in finished.stderr


# -- the book: rows, fires, pauses, with the clock passed in -------------------------

NIGHTLY = {"job": "tests.schedules.report", "cron": "0 3 * * *", "timezone": "Europe/Amsterdam"}


def declared(**schedules: object) -> list[Schedule]:
    return [read_schedule(name, entry) for name, entry in schedules.items()]


def run_ats(name: str = "tests.schedules.report") -> list[datetime]:
    return [j.run_at for j in Job.objects.filter(name=name).order_by("run_at")]


def test_a_new_schedule_starts_from_now(book):
    schedules = declared(nightly=NIGHTLY)
    start = local(2026, 6, 1, 12).astimezone(UTC)
    book.sync(schedules, now=start)
    assert book.fire_due(schedules, now=start + timedelta(hours=1)) == []
    fired = book.fire_due(schedules, now=local(2026, 6, 2, 3, 0, 2).astimezone(UTC))
    assert [f.fire_times for f in fired] == [(local(2026, 6, 2, 3).astimezone(UTC),)]
    assert run_ats() == [local(2026, 6, 2, 3).astimezone(UTC)]
    row = ScheduleRow.objects.get(name="nightly")
    assert row.last_fire_at == local(2026, 6, 2, 3).astimezone(UTC)
    assert row.last_job_id == Job.objects.get().pk
    assert row.next_fire_at == local(2026, 6, 3, 3).astimezone(UTC)


def test_a_fire_time_is_enqueued_once_also_after_its_job_is_done_and_gone(book, queue):
    schedules = declared(nightly=NIGHTLY)
    at = local(2026, 6, 2, 3, 0, 5).astimezone(UTC)
    book.sync(schedules, now=at - timedelta(hours=1))
    assert len(book.fire_due(schedules, now=at)) == 1
    claimed = queue.pull(worker_id="w")
    assert claimed is not None and queue.ack(claimed, worker_id="w")
    time.sleep(0.01)  # prune(0) takes jobs finished before the database's now
    assert queue.prune(0) == 1
    # A restarted worker (a fresh book, synced again) at the same moment and later.
    again = ScheduleBook()
    again.sync(schedules, now=at)
    assert again.fire_due(schedules, now=at) == []
    assert again.fire_due(schedules, now=at + timedelta(hours=1)) == []
    assert Job.objects.count() == 0


def test_dst_days_fire_once_each_at_three_local(book):
    schedules = declared(nightly=NIGHTLY)
    book.sync(schedules, now=local(2026, 10, 23, 12).astimezone(UTC))
    moment = local(2026, 10, 23, 12).astimezone(UTC)
    while moment < local(2026, 10, 27, 12).astimezone(UTC):
        moment += timedelta(minutes=20)
        book.fire_due(schedules, now=moment)
    assert [t.astimezone(AMSTERDAM).strftime("%d %H:%M") for t in run_ats()] == [
        "24 03:00",
        "25 03:00",
        "26 03:00",
        "27 03:00",
    ]


def test_the_repeated_hour_fires_once_when_the_scheduler_ticks_through_it(book):
    schedules = declared(
        half={"job": "tests.schedules.report", "cron": "30 2 * * *", "timezone": "Europe/Amsterdam"}
    )
    book.sync(schedules, now=local(2026, 10, 25, 0).astimezone(UTC))
    moment = local(2026, 10, 25, 0).astimezone(UTC)
    while moment < local(2026, 10, 25, 5).astimezone(UTC):
        moment += timedelta(seconds=50)
        book.fire_due(schedules, now=moment)
    assert run_ats() == [local(2026, 10, 25, 2, 30).astimezone(UTC)]


@pytest.mark.parametrize(("catch_up", "count"), [("latest", 1), ("none", 0), ("all", 6)])
@override_settings(JOBQUEUE={"SCHEDULE_GRACE": 5})
def test_catch_up_after_every_worker_was_down(book, catch_up, count):
    schedules = declared(tick={"job": "tests.schedules.report", "every": 10, "catch_up": catch_up})
    book.sync(schedules, now=utc(2026, 1, 1))
    assert len(book.fire_due(schedules, now=utc(2026, 1, 1, 0, 0, 10))) == 1
    # Down for a minute: 00:00:20 .. 00:01:10 were missed; 00:01:20 is on time.
    fired = book.fire_due(schedules, now=utc(2026, 1, 1, 0, 1, 20, 300))
    assert len(run_ats()) == 1 + count + 1
    assert run_ats()[-1] == utc(2026, 1, 1, 0, 1, 20)
    assert (fired[0].skipped.count if fired[0].skipped else 0) == 6 - count


def test_a_removed_schedule_stops_and_a_changed_one_starts_again_from_now(book):
    book.sync(
        declared(nightly=NIGHTLY, tick={"job": "tests.schedules.report", "every": 60}), now=utc(2026, 1, 1)
    )
    changed = declared(nightly={**NIGHTLY, "cron": "0 4 * * *"})
    book.sync(changed, now=utc(2026, 1, 1, 5))
    assert list(ScheduleRow.objects.values_list("name", flat=True)) == ["nightly"]
    # 04:00 Amsterdam (03:00 UTC) on Jan 1 came before the change: not owed.
    assert book.fire_due(changed, now=utc(2026, 1, 1, 6)) == []
    assert len(book.fire_due(changed, now=utc(2026, 1, 2, 3, 0, 1))) == 1
    # A payload change keeps its place.
    repaid = declared(nightly={**NIGHTLY, "cron": "0 4 * * *", "payload": {"kind": "weekly"}})
    book.sync(repaid, now=utc(2026, 1, 2, 12))
    assert len(book.fire_due(repaid, now=utc(2026, 1, 3, 3, 0, 1))) == 1
    assert Job.objects.order_by("id").last().payload == {"kind": "weekly"}


def test_a_worker_with_an_older_declaration_does_not_fire(book):
    old, new = declared(nightly=NIGHTLY), declared(nightly={**NIGHTLY, "payload": {"kind": "weekly"}})
    book.sync(old, now=utc(2026, 1, 1))
    book.sync(new, now=utc(2026, 1, 1))
    assert book.fire_due(old, now=utc(2026, 1, 2, 3)) == []
    assert len(book.fire_due(new, now=utc(2026, 1, 2, 3))) == 1


def test_pause_skips_fire_times_and_resume_starts_from_now(book):
    schedules = declared(tick={"job": "tests.schedules.report", "every": 1})
    book.sync(schedules)
    assert book.pause(["tick"]) == ["tick"] and book.pause(["tick"]) == []
    later = book.now() + timedelta(seconds=5)
    assert book.fire_due(schedules, now=later) == []
    assert book.states(schedules)[0].paused
    assert book.resume(["tick"]) == ["tick"]
    resumed_at = ScheduleRow.objects.get().handled_through
    assert resumed_at >= later - timedelta(seconds=5)
    fired = book.fire_due(schedules, now=resumed_at + timedelta(seconds=2))
    assert all(t > resumed_at for t in fired[0].fire_times)


def test_run_now_adds_one_job_and_leaves_the_schedule_alone(book):
    schedules = declared(nightly={**NIGHTLY, "payload": {"kind": "adhoc"}, "queue": "reports", "priority": 7})
    book.sync(schedules)
    before = ScheduleRow.objects.get()
    made = book.run_now(schedules[0])
    assert (made.queue, made.priority, made.payload) == ("reports", 7, {"kind": "adhoc"})
    after = ScheduleRow.objects.get()
    assert (after.handled_through, after.last_fire_at) == (before.handled_through, before.last_fire_at)


def test_states_read_without_writing(book):
    schedules = declared(nightly=NIGHTLY)
    state = book.states(schedules, now=utc(2026, 6, 1))[0]
    assert state.row_id is None and not state.paused and state.last_fire_at is None
    assert state.as_json()["next_fire_at"] == "2026-06-01T01:00:00+00:00"
    assert not ScheduleRow.objects.exists()


def test_a_row_deleted_by_a_worker_that_no_longer_declares_it_comes_back(book):
    schedules = declared(tick={"job": "tests.schedules.report", "every": 10})
    book.sync(schedules, now=utc(2026, 1, 1))
    book.sync([], now=utc(2026, 1, 1, 0, 0, 5))  # a worker with other code started
    assert not ScheduleRow.objects.exists()
    assert book.fire_due(schedules, now=utc(2026, 1, 1, 0, 0, 6)) == []
    # The scheduler gives its schedules their rows back now and then (every MAX_PAUSE).
    assert book.add_missing(schedules, now=utc(2026, 1, 1, 0, 0, 6)) == ["tick"]
    assert book.add_missing(schedules, now=utc(2026, 1, 1, 0, 0, 7)) == []
    assert ScheduleRow.objects.get().handled_through == utc(2026, 1, 1, 0, 0, 6)
    assert len(book.fire_due(schedules, now=utc(2026, 1, 1, 0, 0, 10))) == 1
