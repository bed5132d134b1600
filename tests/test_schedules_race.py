"""Many callers of ``ScheduleBook.fire_due`` at one moment: each fire time is enqueued once.

Threads with a connection each stand in for workers whose schedulers woke
together; ``race`` (tests/faults/row_locks.py) forces the interleaving where a
second caller reads the row before the first commits.
"""

from __future__ import annotations

from collections import Counter
from datetime import UTC, datetime, timedelta

from django_jobqueue.models import Job
from django_jobqueue.queue.schedules import Fired, ScheduleBook
from django_jobqueue.queue.timetable import Schedule
from tests.faults.row_locks import race
from tests.jobs_for_workers import events  # noqa: F401 - registers workers.record here
from tests.racing import run_threads
from tests.worker_support import wait_until

THREADS = 4
ROUNDS = 20
STEP = timedelta(seconds=7.3)  # several fire times of the 1 s schedule a round; a minute now and then


def declared(path: str) -> list[Schedule]:
    def record(value: str) -> dict[str, str]:
        return {"path": path, "value": value}

    return [
        Schedule(name="race-1s", job="workers.record", every=1, payload=record("race-1s")),
        Schedule(name="race-3s", job="workers.record", every=3, payload=record("race-3s")),
        Schedule(name="race-cron", job="workers.record", cron="* * * * *", payload=record("race-cron")),
    ]


def fire_times(schedule: Schedule, after: datetime, through: datetime) -> list[datetime]:
    """The fire times of ``schedule`` in (``after``, ``through``], oldest first."""
    times = []
    for fire_time in schedule.backward(through):
        if fire_time <= after:
            break
        times.append(fire_time)
    return times[::-1]


def run_ats(value: str) -> list[datetime]:
    """The run_at of each job of the schedule whose payload value is ``value``, oldest first."""
    return sorted(
        job.run_at.astimezone(UTC) for job in Job.objects.all() if job.payload.get("value") == value
    )


def fire_together(schedules: list[Schedule], now: datetime) -> list[Fired]:
    """``fire_due(schedules, now)`` from THREADS threads released at once; what they all fired."""
    fired = run_threads(THREADS, lambda _: ScheduleBook().fire_due(schedules, now=now), timeout=60)
    return [each for one_caller in fired for each in one_caller]


def test_workers_firing_at_the_same_moment_enqueue_each_fire_time_once(queue, events_path):
    schedules = declared(events_path)
    book = ScheduleBook()
    start = book.now()
    book.sync(schedules, now=start)

    before = start
    for round_ in range(1, ROUNDS + 1):
        now = start + round_ * STEP
        fired = fire_together(schedules, now)
        for schedule in schedules:
            owed = fire_times(schedule, before, now)
            mine = [each for each in fired if each.schedule == schedule.name]
            assert all(each.error is None for each in mine)
            # One caller moved the row and enqueued the round's fire times; the others nothing.
            assert len(mine) == (1 if owed else 0), (round_, schedule.name, mine)
            assert [t for each in mine for t in each.fire_times] == owed
            assert sum(len(each.job_ids) for each in mine) == len(owed)
        before = now

    for schedule in schedules:
        times = run_ats(schedule.name)
        assert not [t for t, n in Counter(times).items() if n > 1], f"{schedule.name}: a fire time twice"
        assert times == fire_times(schedule, start, before)
    assert len(run_ats("race-cron")) >= 2, "the rounds crossed minutes"


def test_a_done_and_pruned_job_does_not_free_its_fire_time(queue, events_path):
    schedules = declared(events_path)[:1]
    book = ScheduleBook()
    # In the past, so that the jobs are due to be claimed; on a whole second, so that
    # now and now + 0.4 s owe the same three fire times.
    start = (book.now() - timedelta(seconds=10)).replace(microsecond=0)
    book.sync(schedules, now=start)
    now = start + timedelta(seconds=3.1)

    [fired] = book.fire_due(schedules, now=now)
    assert len(fired.job_ids) == 3
    claimed = queue.pull_many(worker_id="runner", limit=10)
    assert sorted(job.pk for job in claimed) == sorted(fired.job_ids)
    for job in claimed:
        assert queue.ack(job, worker_id="runner")
    # prune(0) deletes what finished before the database's now: not within the same tick.
    wait_until(lambda: queue.prune(0) >= 0 and not Job.objects.exists(), 5, "the done jobs pruned")

    assert book.fire_due(schedules, now=now) == []
    assert book.fire_due(schedules, now=now + timedelta(seconds=0.4)) == [], "the same fire times"
    assert not Job.objects.exists()
    [later] = book.fire_due(schedules, now=now + timedelta(seconds=1))
    assert later.fire_times == tuple(fire_times(schedules[0], now, now + timedelta(seconds=1)))
    assert len(later.job_ids) == 1


def test_a_second_firer_passes_over_the_first_then_finds_it_fired(queue, events_path, row_locks):
    schedules = declared(events_path)[:1]
    book = ScheduleBook()
    start = book.now()
    book.sync(schedules, now=start)
    now = start + timedelta(seconds=2.5)
    first: list[Fired] = []

    raced = race(
        lambda: first.extend(book.fire_due(schedules, now=now)),
        lambda: ScheduleBook().fire_round(schedules, now=now),
    )

    owed = fire_times(schedules[0], start, now)
    assert [each.fire_times for each in first] == [tuple(owed)]
    assert raced.result.fired == [], "the second caller fired the same fire times again"
    # PostgreSQL: it read the row before the first committed and passed over its lock, to
    # come back (SKIP LOCKED: a scheduler waits on no row); SQLite runs one writer at a
    # time, so it came after the commit and found the row fired.
    assert not raced.blocked
    assert raced.result.held == (["race-1s"] if row_locks else [])
    assert ScheduleBook().fire_round(schedules, now=now).held == [], "back: nothing held, nothing owed"
    assert run_ats("race-1s") == owed
