"""Periodic jobs fired by real ``runworker`` processes: one job per fire time, whatever the fleet does.

The workers get their schedules from the environment (``JOBQUEUE_SCHEDULES``,
``JOBQUEUE_SCHEDULE_GRACE``: testproject/settings.py). Each schedule enqueues
``workers.record`` with its own ``value``, so the jobs of a schedule are told
apart by their payload. Expected fire times are computed from the database's
clock and the schedule rows, not from the test's clock.
"""

from __future__ import annotations

import json
import re
import signal
import time
from collections import Counter
from collections.abc import Iterable, Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from django.conf import settings
from django.db import transaction

from django_jobqueue import QueueClient
from django_jobqueue.models import Job, Schedule
from django_jobqueue.queue.schedules import ScheduleBook
from django_jobqueue.schedules import read_schedule
from tests.jobs_for_workers import events  # also registers the jobs in this process
from tests.pooler import terminate_sessions
from tests.worker_support import WorkerProcess, wait_until

SECOND = timedelta(seconds=1)
FIRED_LINE = re.compile(r"schedule (\S+) fired for (\S+): job (\d+)")
POLL = ("--poll-interval", "0.2")


def every(seconds: int, path: str, value: str, **options: Any) -> dict[str, Any]:
    return {"job": "workers.record", "every": seconds, "payload": {"path": path, "value": value}, **options}


def schedules_env(schedules: dict[str, dict[str, Any]], grace: float | None = None) -> dict[str, str]:
    env = {"JOBQUEUE_SCHEDULES": json.dumps(schedules)}
    if grace is not None:
        env["JOBQUEUE_SCHEDULE_GRACE"] = str(grace)
    return env


def db_now() -> datetime:
    return ScheduleBook().now()


def utc(moment: datetime | None) -> datetime:
    assert moment is not None
    return moment.astimezone(UTC) if moment.tzinfo else moment.replace(tzinfo=UTC)


def jobs_of(value: str) -> dict[int, datetime]:
    """The jobs whose payload's value is ``value``: id -> run_at (UTC)."""
    return {
        job.pk: utc(job.run_at) for job in Job.objects.order_by("id") if job.payload.get("value") == value
    }


def handled_through(name: str) -> datetime:
    return utc(Schedule.objects.get(name=name).handled_through)


def row_reaches(name: str, moment: datetime) -> bool:
    row = Schedule.objects.filter(name=name).first()
    return row is not None and utc(row.handled_through) >= moment


def seconds_in(after: datetime, through: datetime, step: int = 1) -> list[datetime]:
    """The multiples of ``step`` seconds since the epoch in (``after``, ``through``]."""
    epoch = datetime(1970, 1, 1, tzinfo=UTC)
    first = int((after - epoch) // timedelta(seconds=step)) + 1
    last = int((through - epoch) // timedelta(seconds=step))
    return [epoch + timedelta(seconds=n * step) for n in range(first, last + 1)]


def assert_once_each(times: Iterable[datetime]) -> list[datetime]:
    listed = sorted(times)
    twice = sorted(t.isoformat() for t, n in Counter(listed).items() if n > 1)
    assert not twice, f"fire times enqueued more than once: {twice}"
    return listed


def clock(times: Iterable[datetime]) -> list[str]:
    """Fire times as HH:MM:SS, oldest first: for failure messages."""
    return [t.strftime("%H:%M:%S") for t in sorted(times)]


def fired_lines(workers: Sequence[WorkerProcess], name: str) -> list[str]:
    """The fire times the workers logged for schedule ``name`` (ISO), all of them."""
    return [
        match.group(2)
        for worker in workers
        for match in FIRED_LINE.finditer(worker.log())
        if match.group(1) == name
    ]


def stop(*workers: WorkerProcess) -> None:
    for worker in workers:
        worker.wait_started()  # before its SIGTERM handler, a signal would just kill it
        worker.send(signal.SIGTERM)
    for worker in workers:
        assert worker.wait(30) == 0, worker.log()


@pytest.mark.slow
def test_three_workers_fire_every_second_once_and_leave_no_gap(queue, start_worker, events_path):
    env = schedules_env({"tick": every(1, events_path, "tick")})
    workers = [start_worker("--worker-id", f"tick-{n}", *POLL, env=env) for n in range(3)]
    for worker in workers:
        worker.wait_started(30)
    began = db_now()
    wait_until(lambda: row_reaches("tick", began + 6 * SECOND), 20, "six seconds of fire times")
    stop(*workers)

    row = Schedule.objects.get(name="tick")
    times = assert_once_each(jobs_of("tick").values())
    # A new schedule starts from now: its first fire time is the first second after its row
    # was made; from there every second up to where the row says it fired is there, once.
    assert times == seconds_in(utc(row.created_at), utc(row.handled_through))
    assert len(times) >= 6
    assert all(t.microsecond == 0 and t.utcoffset() == timedelta(0) for t in times)
    assert utc(row.last_fire_at) == times[-1]
    logged = fired_lines(workers, "tick")
    assert sorted(logged) == [t.isoformat() for t in times], "one log line per fire time, in one worker"
    # The workers ran them (one fired just before the stop may still wait).
    assert Job.objects.filter(status="done").count() >= len(times) - 3


@pytest.mark.slow
def test_a_restarted_worker_fires_nothing_twice_even_after_the_jobs_are_pruned(
    queue, start_worker, events_path
):
    env = schedules_env({"tick": every(1, events_path, "tick")})
    first = start_worker("--worker-id", "before", *POLL, env=env)
    wait_until(lambda: Job.objects.filter(status="done").count() >= 3, 30, "three jobs done")
    stop(first)
    before = jobs_of("tick")
    handled = handled_through("tick")
    assert max(before.values()) == handled

    done = Job.objects.filter(status="done").count()
    assert done >= 3
    pruned = [QueueClient().prune(0)]
    # prune(0) deletes what finished before the database's now: not within the same tick.
    wait_until(
        lambda: sum(pruned) == done or pruned.append(QueueClient().prune(0)), 5, "the done jobs pruned"
    )
    assert not Job.objects.filter(status="done").exists()
    # A fire time passes while no worker runs (within the grace: the next worker enqueues it).
    wait_until(lambda: db_now() >= handled + 1.2 * SECOND, 10, "a fire time with no worker")
    second = start_worker("--worker-id", "after", *POLL, env=env)
    wait_until(lambda: row_reaches("tick", handled + 4 * SECOND), 30, "the new worker to fire")
    stop(second)

    after = jobs_of("tick")
    new = {pk: t for pk, t in after.items() if pk not in before}
    assert new and min(new.values()) > handled, "a fire time already fired was enqueued again"
    row = Schedule.objects.get(name="tick")
    times = assert_once_each({**before, **after}.values())
    assert times == seconds_in(utc(row.created_at), utc(row.handled_through)), "no gap across the restart"
    assert sorted(fired_lines([second], "tick")) == sorted(t.isoformat() for t in new.values())


MODES = ("latest", "none", "all")
GRACE = 1.5


def expected_after_downtime(mode: str, handled: datetime, now: datetime, through: datetime) -> set[datetime]:
    """What a worker firing first at ``now`` owes a schedule handled up to ``handled``, up to ``through``."""
    late = now - timedelta(seconds=GRACE)
    missed = seconds_in(handled, late)
    kept = {"latest": missed[-1:], "none": [], "all": missed}[mode]
    return set(kept) | set(seconds_in(max(handled, late), through))


@pytest.mark.slow
def test_downtime_is_caught_up_as_each_schedule_says(queue, start_worker, events_path):
    names = {mode: f"catch-{mode}" for mode in MODES}
    env = schedules_env(
        {names[mode]: every(1, events_path, names[mode], catch_up=mode) for mode in MODES}, grace=GRACE
    )
    first = start_worker("--worker-id", "killed", *POLL, env=env)
    wait_until(lambda: all(jobs_of(name) for name in names.values()), 30, "each schedule to fire")
    first.kill()
    handled = {name: handled_through(name) for name in names.values()}
    before = {name: jobs_of(name) for name in names.values()}
    for name in names.values():
        assert max(before[name].values()) == handled[name], "the row is exactly as far as its jobs"

    # Down until three fire times of each schedule are past the grace.
    wait_until(
        lambda: db_now() > max(handled.values()) + (3 + GRACE + 0.2) * SECOND, 15, "three missed fire times"
    )
    restarted_at = db_now()
    second = start_worker("--worker-id", "restarted", *POLL, env=env)
    wait_until(
        lambda: all(row_reaches(name, restarted_at + 3 * SECOND) for name in names.values()),
        30,
        "regular fires after the restart",
    )
    stop(second)

    through = {name: handled_through(name) for name in names.values()}
    new = {
        name: {pk: t for pk, t in jobs_of(name).items() if pk not in before[name]} for name in names.values()
    }
    for name in names.values():
        assert_once_each(new[name].values())
        assert min(new[name].values()) > handled[name], "nothing handled before the kill came again"
    # The restarted worker fired first at some moment N between its start and the first job
    # of its catch-up; where a fire time sits within that window of the grace's edge, either
    # side is honest. What each schedule got must match one N for all three.
    created = Job.objects.filter(pk__in=[*new[names["latest"]], *new[names["all"]]]).order_by("created_at")
    first_fire_by = utc(created.first().created_at)
    edges = [
        t + timedelta(seconds=GRACE)
        for t in seconds_in(restarted_at - 2 * timedelta(seconds=GRACE), first_fire_by)
        if restarted_at <= t + timedelta(seconds=GRACE) <= first_fire_by
    ]
    got = {name: set(new[name].values()) for name in names.values()}
    candidates = []
    for now in [restarted_at, *edges, first_fire_by]:
        owed = {
            names[mode]: expected_after_downtime(mode, handled[names[mode]], now, through[names[mode]])
            for mode in MODES
        }
        candidates.append(owed)
        if owed == got:
            break
    else:
        shown = [{name: clock(times) for name, times in owed.items()} for owed in candidates]
        got_shown = {name: clock(times) for name, times in got.items()}
        pytest.fail(f"no first fire moment explains the jobs:\ngot {got_shown}\nexpected one of {shown}")
    # The downtime really left missed fire times for catch_up to decide on.
    missed = seconds_in(handled[names["all"]], restarted_at - timedelta(seconds=GRACE))
    assert len(missed) >= 3
    # "latest" kept one missed fire time: the newest at its first fire, this one or a later one.
    assert not set(missed[:-1]) & got[names["latest"]]
    assert not set(missed) & got[names["none"]]
    assert set(missed) <= got[names["all"]]


@pytest.mark.slow
def test_every_fire_time_of_a_long_grace_is_enqueued_after_an_outage(queue, start_worker, events_path):
    # SCHEDULE_GRACE 600 s, every second, 150 s since the fleet last fired: all 150 fire times
    # are on time, more than one fire enqueues at once (ON_TIME_BATCH). The row is made as a
    # worker that started 150 s ago and stopped at once would have left it.
    declaration = every(1, events_path, "tick", catch_up="none")
    env = schedules_env({"tick": declaration}, grace=600)
    outage_began = db_now().replace(microsecond=0) - 150 * SECOND
    ScheduleBook().sync([read_schedule("tick", declaration)], now=outage_began)

    restarted_at = db_now()
    worker = start_worker("--worker-id", "back", *POLL, env=env)
    wait_until(lambda: row_reaches("tick", restarted_at + 2 * SECOND), 30, "the worker to catch up")
    stop(worker)

    times = assert_once_each(jobs_of("tick").values())
    missing = sorted(set(seconds_in(outage_began, handled_through("tick"))) - set(times))
    assert not missing, f"{len(missing)} on-time fire times not enqueued: {clock(missing[:5])} ..."
    assert times == seconds_in(outage_began, handled_through("tick"))
    assert "skipped" not in worker.log()


@pytest.mark.slow
def test_a_row_an_operator_holds_is_passed_over_then_fired_in_full(
    queue, postgresql_only, start_worker, events_path
):
    # An operator's run now holds the row of "a-held" in a transaction left open for
    # seconds. The worker fires "b-free" meanwhile instead of waiting on the lock, and
    # once the transaction ends, enqueues every fire time "a-held" owed (on time: within
    # the grace), each once.
    declarations = {name: every(1, events_path, name) for name in ("a-held", "b-free")}
    worker = start_worker("--worker-id", "passer", *POLL, env=schedules_env(declarations))
    wait_until(lambda: jobs_of("a-held") and jobs_of("b-free"), 30, "both schedules to fire")
    held_from = db_now()
    with transaction.atomic():
        extra = ScheduleBook().run_now_once(read_schedule("a-held", declarations["a-held"]), lambda: False)
        assert extra is not None
        wait_until(lambda: row_reaches("b-free", held_from + 3 * SECOND), 15, "the free schedule to fire")
        assert handled_through("a-held") < held_from + SECOND, "fired through an operator's lock"
    released_at = db_now()
    wait_until(lambda: row_reaches("a-held", released_at + SECOND), 15, "the held schedule to catch up")
    stop(worker)

    for name in declarations:
        row = Schedule.objects.get(name=name)
        times = assert_once_each(t for pk, t in jobs_of(name).items() if pk != extra.pk)
        assert times == seconds_in(utc(row.created_at), utc(row.handled_through)), f"{name}: a gap"
    assert "ERROR" not in worker.log()


@pytest.mark.slow
def test_burst_and_no_schedules_workers_fire_nothing(queue, start_worker, events_path):
    env = schedules_env({"tick": every(1, events_path, "tick")})
    # A job that keeps the burst worker up across a few fire times.
    queue.push("workers.record", {"path": events_path, "value": "long", "seconds": 2.5}, queue="long")
    burst = start_worker("--burst", "--queue", "long", "--worker-id", "burst", env=env)
    # It runs the jobs of the schedule's queue, but fires none.
    quiet = start_worker("--no-schedules", "--queue", "default", "--worker-id", "quiet", *POLL, env=env)
    quiet.wait_started(30)

    assert burst.wait(30) == 0, burst.log()
    assert quiet.proc.poll() is None
    ran = [(e["event"], e["worker"]) for e in events(events_path) if e["value"] == "long"]
    assert ran == [("start", "burst"), ("end", "burst")], "the burst worker was up for 2.5 s"
    assert not jobs_of("tick"), "nothing fired"
    assert not Schedule.objects.exists(), "neither worker even made the rows"
    assert "schedules=off burst" in burst.log()
    assert "schedules=off" in quiet.log()

    firing = start_worker("--worker-id", "firing", *POLL, env=env)
    firing.wait_started(30)
    started = db_now()
    wait_until(lambda: row_reaches("tick", started + 3 * SECOND), 20, "the firing worker to fire")
    stop(firing, quiet)
    times = assert_once_each(jobs_of("tick").values())
    assert len(times) >= 3
    assert sorted(fired_lines([firing], "tick")) == [t.isoformat() for t in times]
    assert not fired_lines([quiet, burst], "tick")


@pytest.mark.slow
def test_a_changed_schedule_applies_at_the_next_start_and_a_removed_one_stops(
    queue, start_worker, events_path
):
    old = schedules_env(
        {
            "keep": every(1, events_path, "keep/1"),
            "retime": every(1, events_path, "retime/1"),
            "gone": every(1, events_path, "gone"),
        }
    )
    new = schedules_env(
        {"keep": every(1, events_path, "keep/2"), "retime": every(2, events_path, "retime/2")}
    )
    first = start_worker("--worker-id", "old-settings", *POLL, env=old)
    wait_until(
        lambda: all(jobs_of(value) for value in ("keep/1", "retime/1", "gone")),
        30,
        "each schedule to fire",
    )
    stop(first)
    handled = {name: handled_through(name) for name in ("keep", "retime", "gone")}
    gone = jobs_of("gone")
    retimed_before = jobs_of("retime/1")
    # Two fire times pass while no worker runs: one of them of the retimed schedule too.
    wait_until(lambda: db_now() >= max(handled.values()) + 2.2 * SECOND, 10, "fire times with no worker")

    restarted_at = db_now()
    second = start_worker("--worker-id", "new-settings", *POLL, env=new)
    wait_until(lambda: not Schedule.objects.filter(name="gone").exists(), 30, "the removed schedule's row")
    wait_until(lambda: len(jobs_of("retime/2")) >= 2, 30, "the retimed schedule to fire twice")
    stop(second)

    assert jobs_of("gone") == gone, "a removed schedule stopped firing"
    assert jobs_of("retime/1") == retimed_before
    # Its fire times changed: it starts again from the worker's start, every two seconds.
    retimed = assert_once_each(jobs_of("retime/2").values())
    row = Schedule.objects.get(name="retime")
    assert retimed[0] > restarted_at, "the fire times of the downtime were not caught up"
    assert retimed == seconds_in(retimed[0] - SECOND, utc(row.handled_through), step=2)
    assert row.definition["every"] == 2
    # Only its payload changed: it goes on where it was, the downtime's fire time included,
    # with the new payload from the next start.
    kept = {**jobs_of("keep/1"), **jobs_of("keep/2")}
    times = assert_once_each(kept.values())
    row = Schedule.objects.get(name="keep")
    assert times == seconds_in(utc(row.created_at), utc(row.handled_through))
    assert max(jobs_of("keep/1").values()) == handled["keep"] < min(jobs_of("keep/2").values())


@pytest.mark.slow
def test_the_scheduler_rides_out_killed_connections(queue, row_locks_only, start_worker, events_path):
    """The sessions under a worker terminated three times: each fire time is enqueued once, none lost.

    Directly, each cut ends the scheduler's own session, and its log shows its
    recovery. Behind a pooler a cut ends PgBouncer's server connections, which
    it replaces unseen between the scheduler's transactions: each cut lasts from
    a fire time on, to meet the scheduler's transaction of that fire time, and
    the fire times are asserted there, and that the cuts hit the pool.
    """
    env = schedules_env({"tick": every(1, events_path, "tick")})
    worker = start_worker("--worker-id", "cut-off", *POLL, env=env)
    wait_until(lambda: len(jobs_of("tick")) >= 2, 30, "the first fires")

    for _ in range(3):
        fired = handled_through("tick")
        # From the next fire time on, for a tenth of a second: behind a pooler only a cut that
        # meets the scheduler's transaction reaches the scheduler at all.
        time.sleep(max(0.0, (fired + SECOND - db_now()).total_seconds()))
        cut = terminate_sessions(during=0.1)
        # Behind a pooler, among them the server connections the scheduler's transactions run on.
        assert (cut.pooled if settings.POOLER_DATABASE else cut.sessions) >= 1, cut
        wait_until(lambda: handled_through("tick") > fired, 15, "the schedule to fire again")  # noqa: B023
    if not settings.POOLER_DATABASE:
        worker.wait_for_log(r"scheduler: database reachable again", 15)
    stop(worker)

    row = Schedule.objects.get(name="tick")
    times = assert_once_each(jobs_of("tick").values())
    assert times == seconds_in(utc(row.created_at), utc(row.handled_through)), "no fire time lost"
