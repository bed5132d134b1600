"""``runworker --concurrency MIN:MAX``: real workers grow under a backlog, shrink when idle, drain on SIGTERM.

Each scenario runs a real ``runworker`` with a short ``--resize-interval`` and
``--shrink-after``, and reads what happened from three places the worker
cannot fake: the jobs' own start and end times (how many ran at once), the
worker row (the slots it says it runs) and its log lines.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
from pathlib import Path
from typing import Any

import pytest
from django.db import connection

from django_jobqueue import QueueClient, enqueue_many
from django_jobqueue.models import DeadLetter, Job, Worker
from django_jobqueue.worker.pools.autoscale import SlotPolicy, SlotRange
from tests.jobs_for_workers import events
from tests.worker_support import database_url, run_manage, wait_until

MODULES = {"JOBQUEUE_MODULES": "tests.jobs_for_workers,tests.jobs_for_autoscale"}
FAST = ("--resize-interval", "0.2", "--poll-interval", "0.1")


def naps(path: str, count: int, seconds: float = 0.3, **extra: Any) -> list[Job]:
    payload = {"path": path, "seconds": seconds, **extra}
    return enqueue_many([("autoscale.nap", payload) for _ in range(count)])


def peak_running(path: str) -> int:
    """The most jobs that ran at once, from their start and end events."""
    changes = sorted((e["time"], 1 if e["event"] == "start" else -1) for e in events(path))
    peak = running = 0
    for _time, change in changes:
        running += change
        peak = max(peak, running)
    return peak


def row_slots(worker_id: str) -> int | None:
    row = Worker.objects.filter(worker_id=worker_id).first()
    return None if row is None else row.concurrency


def row_range(worker_id: str) -> tuple[int | None, int | None]:
    """The MIN:MAX the worker row records, for the admin; (None, None) for a fixed --concurrency."""
    row = Worker.objects.get(worker_id=worker_id)
    return row.min_concurrency, row.max_concurrency


def all_done(count: int) -> bool:
    return Job.objects.filter(status="done").count() == count


def test_a_backlog_grows_the_slots_to_max_and_idle_shrinks_them_to_min(queue, start_worker, events_path):
    worker = start_worker(
        "--concurrency", "1:4", "--shrink-after", "0.5", *FAST, "--worker-id", "elastic", env=MODULES
    )
    worker.wait_started()
    assert "concurrency=1:4" in worker.log()
    assert row_slots("elastic") == 1
    assert row_range("elastic") == (1, 4)

    naps(events_path, 16, seconds=0.2)
    wait_until(lambda: row_slots("elastic") == 4, 10, "the worker row to say 4 slots")
    wait_until(lambda: all_done(16), 30, "every nap to finish")

    assert peak_running(events_path) == 4
    log = worker.log()
    assert "worker elastic: 1 -> 2 slots (due jobs were waiting; range 1:4)" in log
    assert "worker elastic: 2 -> 4 slots (due jobs were waiting; range 1:4)" in log
    assert not re.search(r"-> [5-9]\d* slots", log), "never above MAX"
    worker.wait_for_log(r"worker elastic: \d -> 1 slots \(slots unneeded for 0.5s", 10)
    wait_until(lambda: row_slots("elastic") == 1, 5, "the worker row to say 1 slot")
    assert row_range("elastic") == (1, 4), "resizing keeps the range"

    worker.send(signal.SIGTERM)
    assert worker.wait() == 0
    assert "stopped (SIGTERM) after 16 job(s)" in worker.log()


@pytest.mark.slow
def test_shrinking_retires_idle_slots_only_and_grows_again(queue, start_worker, events_path):
    """One long job holds a slot through the shrink: the worker keeps it, then grows for a new backlog."""
    worker = start_worker(
        "--concurrency", "1:4", "--shrink-after", "0.5", *FAST, "--worker-id", "steady", env=MODULES
    )
    worker.wait_started()
    naps(events_path, 8, seconds=0.2)
    wait_until(lambda: all_done(8), 20, "the first backlog")
    long = naps(events_path, 1, seconds=2.5)[0]
    worker.wait_for_log(r"worker steady: \d -> 1 slots", 10)
    assert Job.objects.get(pk=long.pk).status == "running", "the slot holding a job is kept"

    naps(events_path, 12, seconds=0.2)
    wait_until(lambda: all_done(21), 30, "the second backlog and the long job")

    assert len(re.findall(r"worker steady: 1 -> 2 slots", worker.log())) == 2
    runs = [e["job"] for e in events(events_path) if e["event"] == "start"]
    assert len(runs) == len(set(runs)) == 21, "every job ran once"
    worker.send(signal.SIGTERM)
    assert worker.wait() == 0


@pytest.mark.slow
def test_sigterm_while_growing_drains_every_slot(queue, start_worker, events_path):
    jobs = naps(events_path, 40, seconds=0.5)
    worker = start_worker(
        "--concurrency", "1:8", "--resize-interval", "0.3", "--poll-interval", "0.1", env=MODULES
    )
    worker.wait_for_log(r"-> 4 slots", 15)
    wait_until(lambda: len(events(events_path)) >= 4, 10, "the grown slots to start jobs")

    worker.send(signal.SIGTERM)  # on its way to 8 slots

    assert worker.wait(30) == 0
    started = [e["job"] for e in events(events_path) if e["event"] == "start"]
    ended = [e["job"] for e in events(events_path) if e["event"] == "end"]
    assert sorted(started) == sorted(ended), "every job a slot started finished before the exit"
    assert len(started) == len(set(started)), "no job ran twice"
    statuses = dict(Job.objects.values_list("pk", "status"))
    assert {statuses[pk] for pk in started} == {"done"}
    assert {statuses[job.pk] for job in jobs if job.pk not in started} <= {"ready"}
    assert not DeadLetter.objects.exists()
    assert Job.objects.filter(status="ready", attempts__gt=0).count() == 0, "no attempt lost"
    assert len(started) >= 4


def alive(pid: int) -> bool:
    """True if ``pid`` runs and is not a zombie waiting to be reaped."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except (FileNotFoundError, ProcessLookupError):
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


@pytest.mark.slow
def test_process_pool_grows_children_and_retires_them(queue, start_worker, events_path):
    worker = start_worker(
        "--pool", "processes", "--concurrency", "1:3", "--shrink-after", "0.5", *FAST, env=MODULES
    )
    worker.wait_started(60)
    naps(events_path, 18, seconds=0.3)
    wait_until(lambda: all_done(18), 30, "every nap to finish")

    children = {e["pid"] for e in events(events_path)}
    assert worker.pid not in children, "the jobs ran in children"
    assert len(children) == 3
    assert peak_running(events_path) == 3
    worker.wait_for_log(r"\d -> 1 slots", 10)
    wait_until(lambda: sum(alive(pid) for pid in children) == 1, 10, "the retired slots' children to exit")

    worker.send(signal.SIGTERM)
    assert worker.wait() == 0
    wait_until(lambda: not any(alive(pid) for pid in children), 10, "every child to exit with the worker")


def worker_connections(name: str) -> int:
    with connection.cursor() as cursor:
        cursor.execute("SELECT count(*) FROM pg_stat_activity WHERE application_name = %s", [name])
        return int(cursor.fetchone()[0])


@pytest.mark.slow
def test_connections_of_a_worker_at_max_and_after_it_shrank(
    queue: QueueClient, postgresql_only: None, start_worker, events_path
):
    """MAX + 5 while every slot's job queries (no schedules: no scheduler connection); MIN + 5 once shrunk.

    The 5: the claimer, the heartbeat, the ticker, the cancel watch and the
    listener. ``conn_max_age`` keeps each slot's connection after its job, so
    only a retired slot's exit closes it.
    """
    url = f"{database_url()}?application_name=jq-budget&conn_max_age=600"
    worker = start_worker(
        "--concurrency", "2:6", "--shrink-after", "1", *FAST, env={**MODULES, "DATABASE_URL": url}
    )
    worker.wait_started()
    naps(events_path, 36, seconds=0.4, query=True)

    peak = 0

    def at_max() -> bool:
        nonlocal peak
        peak = max(peak, worker_connections("jq-budget"))
        return Job.objects.filter(status="done").count() >= 24

    wait_until(at_max, 30, "most naps to finish")
    wait_until(lambda: all_done(36), 30, "every nap to finish")
    assert peak == 6 + 5
    worker.wait_for_log(r"\d -> 2 slots", 10)
    wait_until(lambda: worker_connections("jq-budget") == 2 + 5, 5, "the retired slots' connections to close")

    worker.send(signal.SIGTERM)
    assert worker.wait() == 0
    wait_until(lambda: worker_connections("jq-budget") == 0, 5, "every connection to close")


@pytest.mark.parametrize(
    ("value", "says"),
    [
        ("0", "must be 1 or more, got 0"),
        ("0:4", "must be 1 or more, got 0"),
        ("4:2", "MIN must not be above MAX, got '4:2'"),
        ("a:b", "must be a whole number, got 'a'"),
        ("2:", "must be a whole number, got ''"),
        ("1:1001", "must be at most 1000, got 1001"),
        ("1:2:3", "must be a whole number, got '2:3'"),
    ],
)
def test_bad_concurrency_is_refused(value: str, says: str):
    from django_jobqueue.management.arguments import concurrency

    with pytest.raises(Exception, match=re.escape(says)):
        concurrency(value)


def runworker(*args: str) -> subprocess.CompletedProcess[str]:
    """A real runworker on the test database, to its end."""
    return run_manage("runworker", *args, env={**os.environ, "DATABASE_URL": database_url()})


def test_runworker_refuses_a_bad_range_before_starting(queue):
    """A real runworker: usage and one line naming the argument, exit status 2; nothing registered."""
    done = runworker("--concurrency", "8:2")
    assert done.returncode == 2
    assert "argument --concurrency: MIN must not be above MAX, got '8:2'" in done.stderr
    assert not Worker.objects.exists()


def test_resize_options_need_a_range(queue):
    done = runworker("--concurrency", "4", "--shrink-after", "5")
    assert done.returncode == 1
    assert "--shrink-after need --concurrency MIN:MAX with MIN below MAX" in done.stderr


# -- the policy alone --------------------------------------------------------------


def policy(low: int = 1, high: int = 6, grow: float = 1.0, shrink: float = 10.0) -> SlotPolicy:
    return SlotPolicy(SlotRange(low, high), resize_interval=grow, shrink_after=shrink, now=0.0)


def test_policy_doubles_at_most_once_per_interval_up_to_max():
    slots = policy(high=6)
    assert slots.decide(0.0, held=0) == 1, "no backlog: no growth"
    slots.claimed(filled_every_slot=True)
    assert [slots.decide(t, held=slots.slots) for t in (0.0, 0.5, 1.0, 1.9, 2.0, 3.0)] == [2, 2, 4, 4, 6, 6]
    assert slots.seconds_to_growth(3.0) is None, "at MAX"


def test_policy_stops_growing_once_a_round_leaves_a_slot_empty():
    slots = policy()
    slots.claimed(filled_every_slot=True)
    assert slots.decide(0.0, held=1) == 2
    assert slots.seconds_to_growth(0.25) == 0.75
    slots.claimed(filled_every_slot=False)
    assert slots.decide(5.0, held=2) == 2
    assert slots.seconds_to_growth(5.0) is None


def test_policy_retires_slots_unneeded_for_shrink_after_never_below_min_or_held():
    slots = policy(low=2, high=8, grow=0.0, shrink=10.0)
    slots.claimed(filled_every_slot=True)
    for t in (0.0, 0.1):
        slots.decide(t, held=slots.slots)
    assert slots.slots == 8
    slots.claimed(filled_every_slot=False)
    slots.decide(1.0, held=8)  # all 8 needed at t=1
    slots.decide(5.0, held=5)  # 5 needed at t=5
    assert slots.decide(10.9, held=3) == 8, "no slot unneeded for 10 s yet"
    assert slots.decide(11.0, held=3) == 5, "slots 6 to 8 were last needed at t=1"
    assert slots.decide(15.0, held=3) == 3, "slots 4 and 5 were last needed at t=5; 3 hold jobs"
    assert slots.decide(40.0, held=0) == 2, "never below MIN"


def test_policy_resizes_at_most_once_per_interval_either_way():
    slots = policy(low=1, high=4, grow=1.0, shrink=0.5)
    slots.claimed(filled_every_slot=True)
    assert slots.decide(0.0, held=1) == 2
    assert slots.decide(1.0, held=2) == 4
    slots.claimed(filled_every_slot=False)
    slots.decide(1.2, held=3)
    assert slots.decide(1.9, held=0) == 4, "slot 4 unneeded for 0.9 s, but the last resize was 0.9 s ago"
    assert slots.decide(2.0, held=0) == 1, "every slot unneeded since 1.5 retires at once"
    slots.claimed(filled_every_slot=True)
    assert slots.seconds_to_growth(2.5) == 0.5
    assert slots.decide(2.5, held=1) == 1
    assert slots.decide(3.0, held=1) == 2


@pytest.mark.parametrize(("low", "high"), [(0, 1), (3, 2)])
def test_slot_range_refuses_bad_bounds(low: int, high: int):
    with pytest.raises(ValueError, match="1 or more|MIN must not be above MAX"):
        SlotRange(low, high)


def test_a_worker_without_concurrency_gets_ten_threads_or_a_child_per_cpu():
    from django_jobqueue.management.commands.runworker import Command

    assert Command.slot_range({}, "threads") == SlotRange(10, 10)
    assert Command.slot_range({"concurrency": None}, "processes") == SlotRange(os.cpu_count(), os.cpu_count())
    assert Command.slot_range({"concurrency": SlotRange(1, 1)}, "processes") == SlotRange(1, 1)


def test_runworker_at_its_defaults_starts_ten_slots(queue, start_worker):
    worker = start_worker("--worker-id", "defaults", env=MODULES, defaults=True)
    worker.wait_started()
    assert " concurrency=10 " in worker.log()
    assert row_slots("defaults") == 10
    assert row_range("defaults") == (None, None)
