"""Time limits, cancels of running jobs and the process pool, with real ``runworker`` processes.

Each job notes its events (start, interrupted, saw_cancel, ran…) with its pid
and the time into a file (``tests/jobs_for_workers.py``): the tests wait on
those and on the worker's log lines, and measure with the events' own times.
Time limits are 1 s and ``--cancel-grace`` 1 s, to keep the whole file short.
"""

from __future__ import annotations

import os
import re
import signal
import time
from collections import Counter
from importlib.util import find_spec
from pathlib import Path

import pytest

from django_jobqueue import QueueClient
from django_jobqueue.models import DeadLetter, Job, Worker
from tests.jobs_for_workers import events, first, of
from tests.worker_support import wait_until

POOLS = pytest.mark.parametrize("pool", ["threads", "processes"])
# A first retry waits 0.3 to 0.6 s: long enough to see, short enough for the tests.
BACKOFF = {"JOBQUEUE_BACKOFF_BASE": "0.6", "JOBQUEUE_BACKOFF_MAX": "0.6"}
FAST = ("--poll-interval", "0.05", "--cancel-grace", "1")
# What a stuck job would run for if nothing stopped it.
LONG = 30.0
# How late after its cause an effect may come on a loaded two-core machine.
SLACK = 0.75


def gone(pid: int) -> bool:
    """Whether no process has ``pid`` any more (``os.kill(pid, 0)`` raises)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    return False


def descendants(pid: int) -> set[int]:
    """Every process below ``pid`` (children, theirs…), from /proc: the fork server's children too."""
    parents: dict[int, int] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue  # ended meanwhile
        # The command name, in parentheses, may hold spaces: the fields after it are fixed.
        parents[int(entry.name)] = int(stat.rpartition(")")[2].split()[1])
    found: set[int] = set()
    frontier = {pid}
    while frontier:
        frontier = {child for child, parent in parents.items() if parent in frontier} - found
        found |= frontier
    return found


# -- time limits -------------------------------------------------------------------------


@POOLS
@pytest.mark.parametrize("name", ["workers.spin", "workers.nap"])
def test_a_timed_out_attempt_fails_is_retried_then_dead_lettered_while_other_jobs_run(
    queue, start_worker, events_path, pool, name
):
    stuck = queue.push(name, {"path": events_path, "seconds": LONG}, timeout=1, max_attempts=2)
    worker = start_worker("--pool", pool, "--concurrency", "2", *FAST, env=BACKOFF)
    start = wait_until(lambda: first(events_path, stuck, "start"), 15, "the first attempt")

    # The other slot runs other jobs meanwhile: this one is done before the stuck one's deadline.
    quick = queue.push("workers.record", {"path": events_path, "value": "quick"})
    wait_until(lambda: Job.objects.filter(pk=quick.pk, status="done").exists(), 5, "the quick job")
    [quick_end] = of(events_path, quick, "end")
    assert quick_end["time"] < start["time"] + 1, "the quick job waited for the stuck one"

    # Attempt 1 fails with the timeout: the row's last_error says so (until the next attempt fails).
    failed = wait_until(
        lambda: Job.objects.filter(pk=stuck.pk).exclude(last_error="").first(), 10, "the first failure"
    )
    assert failed.last_error.startswith("JobTimeout: timed out after 1 s"), failed.last_error
    worker.wait_for_log(rf"job {re.escape(name)} id={stuck.pk} attempt=1: timed out after 1s; stopping it")
    retry = worker.wait_for_log(
        rf"job {re.escape(name)} id={stuck.pk} attempt=1/2 duration=\S+s outcome=retry "
        r"next_attempt_in=(\S+)s error='JobTimeout: timed out after 1 s"
    )
    assert 0.3 <= float(retry[1]) <= 0.6, retry[0]

    # Attempt 2 (its attempts were counted) fails the same way: its last, so to the dead letters.
    dead = wait_until(lambda: DeadLetter.objects.filter(job_id=stuck.pk).first(), 15, "the dead letter")
    assert dead.attempts == 2
    assert dead.error.startswith("JobTimeout: timed out after 1 s"), dead.error
    assert not Job.objects.filter(pk=stuck.pk).exists()
    worker.wait_for_log(
        rf"job {re.escape(name)} id={stuck.pk} attempt=2/2 .* outcome=dead moved_to=dead_letters"
    )

    starts = of(events_path, stuck, "start")
    assert [e["attempt"] for e in starts] == [1, 2]
    # The retry came after the deadline plus at least the shortest backoff.
    assert starts[1]["time"] - starts[0]["time"] >= 1 + 0.25
    interrupted = of(events_path, stuck, "interrupted")
    if pool == "threads" and name == "workers.nap":
        # A sleep is not interrupted by a thread's asynchronous exception: the thread was given up.
        assert interrupted == [], "a sleep returned early"
        assert "did not stop within --cancel-grace 1 s" in dead.error
        assert starts[1]["time"] - starts[0]["time"] >= 2 + 0.25, "given up only after the grace"
    else:
        # Interrupted right at the deadline: a Python loop in either pool, a sleep in a child.
        assert [e["error"] for e in interrupted] == ["JobTimeout", "JobTimeout"]
        for began, ended in zip(starts, interrupted, strict=True):
            # The deadline counts from the hand-over to the slot, a moment before the job's first line.
            assert 1 - 0.25 <= ended["time"] - began["time"] < 1 + SLACK, (began, ended)
    if pool == "processes":
        # Each attempt ran in a child, and a child whose job timed out is replaced before its slot's
        # next job: two jobs that hold both slots at once run in neither child.
        timed_out = {e["pid"] for e in starts}
        assert worker.pid not in timed_out
        release = Path(events_path).with_name("release")
        gates = [queue.push("workers.gate", {"path": events_path, "release": str(release)}) for _ in range(2)]
        wait_until(lambda: all(first(events_path, gate, "start") for gate in gates), 10, "both slots busy")
        release.touch()
        assert not timed_out & {first(events_path, gate, "start")["pid"] for gate in gates}
        for pid in timed_out:
            worker.wait_for_log(rf"replacing jobqueue-child-\d \(pid {pid}\): a job in it timed out")
    else:
        assert {e["pid"] for e in starts} == {worker.pid}


def test_a_thread_stuck_in_a_sleep_is_given_up_after_the_grace_and_keeps_its_slot(
    queue, start_worker, events_path
):
    nap_seconds = 4.0
    napper = queue.push(
        "workers.nap", {"path": events_path, "seconds": nap_seconds}, timeout=1, max_attempts=1
    )
    worker = start_worker("--concurrency", "1", *FAST)
    start = wait_until(lambda: first(events_path, napper, "start"), 15, "the nap")
    waiting = queue.push("workers.record", {"path": events_path, "value": "waiting"})

    # Its outcome is written at deadline + grace, while the sleep still runs.
    dead = wait_until(lambda: DeadLetter.objects.filter(job_id=napper.pk).first(), 10, "the dead letter")
    assert of(events_path, napper, "interrupted") == of(events_path, napper, "end") == [], "the sleep ended"
    assert 2 - 0.1 <= dead.failed_at.timestamp() - start["time"] < nap_seconds - 0.5
    assert dead.error.startswith("JobTimeout: timed out after 1 s (it did not stop within --cancel-grace 1 s")
    worker.wait_for_log(rf"job workers\.nap id={napper.pk} attempt=1/1 .* outcome=dead moved_to=dead_letters")
    assert Job.objects.get(pk=waiting.pk).status == "ready", "the stuck thread's slot was given away"

    # The one slot stays taken until the sleep returns (where JobTimeout finally surfaces).
    waited = wait_until(lambda: first(events_path, waiting, "start"), 10, "the waiting job")
    [interrupted] = of(events_path, napper, "interrupted")
    assert interrupted["error"] == "JobTimeout"
    assert interrupted["time"] - start["time"] >= nap_seconds
    assert waited["time"] >= interrupted["time"]
    # Given up at deadline + grace (2 s in), the thread returned when its 4 s sleep did.
    returned = worker.wait_for_log(
        rf"job workers\.nap id={napper.pk} attempt=1: its thread returned (\S+)s after the attempt was "
        r"given up \((\S+)s after it started\)"
    )
    after_give_up, after_start = float(returned[1]), float(returned[2])
    assert nap_seconds - 0.1 <= after_start < nap_seconds + SLACK, returned[0]
    assert nap_seconds - 2 - SLACK <= after_give_up <= after_start - 2 + 0.1, returned[0]
    wait_until(lambda: Job.objects.filter(pk=waiting.pk, status="done").exists(), 5, "the waiting job done")
    assert DeadLetter.objects.filter(job_id=napper.pk).count() == 1, "written once"


# -- cancelling running jobs ---------------------------------------------------------------


@POOLS
def test_a_cancel_reaches_a_cooperative_handler_and_is_final(queue, start_worker, events_path, pool):
    job = queue.push(
        "workers.spin", {"path": events_path, "seconds": LONG, "cooperative": True}, max_attempts=3
    )
    worker = start_worker("--pool", pool, *FAST, env=BACKOFF)
    wait_until(lambda: first(events_path, job, "start"), 15, "the job to start")

    cancelled_at = time.time()
    assert QueueClient().cancel(job)
    assert Job.objects.get(pk=job.pk).status == "cancelled", "cancelled at once, not when the job ends"

    saw = wait_until(lambda: first(events_path, job, "saw_cancel"), 5, "the handler to see the cancel")
    assert saw["time"] - cancelled_at < 2.0
    worker.wait_for_log(rf"job workers\.spin id={job.pk} attempt=1: cancelled while running; told to stop")
    worker.wait_for_log(rf"job workers\.spin id={job.pk} attempt=1/3 duration=\S+s outcome=cancelled")

    # The worker goes on; the cancelled job is never run again and never dead-lettered.
    later = queue.push("workers.record", {"path": events_path, "value": "later"})
    wait_until(lambda: Job.objects.filter(pk=later.pk, status="done").exists(), 10, "a later job")
    job.refresh_from_db()
    assert (job.status, job.attempts, job.result, job.last_error) == ("cancelled", 1, None, "")
    assert not DeadLetter.objects.filter(job_id=job.pk).exists()
    assert len(of(events_path, job, "start")) == 1
    assert of(events_path, job, "end") == []
    assert not re.search(rf"id={job.pk} .*outcome=(done|retry|dead)", worker.log()), worker.log()


def test_a_cancelled_child_that_ignores_it_is_killed_after_the_grace(queue, start_worker, events_path):
    job = queue.push("workers.stubborn", {"path": events_path, "seconds": LONG})
    worker = start_worker("--pool", "processes", "--concurrency", "1", *FAST)
    child = wait_until(lambda: first(events_path, job, "start"), 15, "the job to start")["pid"]
    assert child != worker.pid

    cancelled_at = time.monotonic()
    assert QueueClient().cancel(job)
    # Seen within a second (the cancel watch), killed one grace later.
    wait_until(lambda: gone(child), 1 + 2.5, "the child to be killed")
    assert time.monotonic() - cancelled_at >= 1, "killed before its grace was over"
    worker.wait_for_log(rf"job workers\.stubborn id={job.pk} attempt=1/5 duration=\S+s outcome=cancelled")

    # A new child takes the slot.
    after = queue.push("workers.pid", {"path": events_path})
    ran = wait_until(lambda: first(events_path, after, "ran"), 10, "a job after the kill")
    assert ran["pid"] not in (child, worker.pid)
    worker.wait_for_log(rf"replacing jobqueue-child-0 \(pid {child}\): it died \(was killed by signal 9\)")
    job.refresh_from_db()
    assert (job.status, job.attempts) == ("cancelled", 1)
    assert not DeadLetter.objects.filter(job_id=job.pk).exists()


# -- the process pool ----------------------------------------------------------------------


def test_a_child_runs_at_most_max_jobs_per_child(queue, start_worker, events_path):
    jobs = [queue.push("workers.pid", {"path": events_path}) for _ in range(8)]

    worker = start_worker("--burst", "--pool", "processes", "--concurrency", "2", "--max-jobs-per-child", "2")

    assert worker.wait() == 0, worker.log()
    assert Job.objects.filter(pk__in=[job.pk for job in jobs], status="done").count() == 8
    per_pid = Counter(e["pid"] for e in events(events_path))
    assert sum(per_pid.values()) == 8
    assert max(per_pid.values()) <= 2 and len(per_pid) >= 4, per_pid
    assert worker.pid not in per_pid
    replaced = re.findall(
        r"replacing jobqueue-child-\d \(pid (\d+)\): it ran 2 jobs \(--max-jobs-per-child 2\)", worker.log()
    )
    assert len(replaced) >= 2 and set(map(int, replaced)) <= set(per_pid), worker.log()
    assert re.search(r"worker \S+ started: .* pool=processes version=\S+$", worker.log(), re.MULTILINE)


def test_a_child_over_max_memory_per_child_is_replaced_after_that_job(queue, start_worker, events_path):
    leak = queue.push("workers.pid", {"path": events_path, "megabytes": 80}, priority=2)
    small = [queue.push("workers.pid", {"path": events_path}, priority=p) for p in (1, 0)]

    worker = start_worker(
        "--burst", "--pool", "processes", "--concurrency", "1", "--max-memory-per-child", "50"
    )

    assert worker.wait() == 0, worker.log()
    leaker, after, last = (first(events_path, job, "ran")["pid"] for job in [leak, *small])
    assert leaker != after, "the child kept 80 MB and was not replaced"
    assert after == last, "a child under the limit was replaced too"
    assert re.search(
        rf"replacing jobqueue-child-0 \(pid {leaker}\): its resident memory is \d+ MB "
        r"\(--max-memory-per-child 50\)",
        worker.log(),
    ), worker.log()


def test_bad_pool_options_are_refused_with_one_line(queue, start_worker):
    refused = {
        "--max-jobs-per-child and --max-memory-per-child need --pool processes": [
            start_worker("--max-jobs-per-child", "2"),
            start_worker("--pool", "threads", "--max-memory-per-child", "50"),
        ],
        "argument --pool: invalid choice: 'bogus'": [start_worker("--pool", "bogus")],
    }
    for message, workers in refused.items():
        for worker in workers:
            assert worker.wait() != 0, worker.log()
            log = worker.log()
            assert [line for line in log.splitlines() if "error" in line.lower()] == [
                line for line in log.splitlines() if message in line
            ], log
            assert message in log and "Traceback" not in log, log
    assert not Worker.objects.exists()


def test_sigterm_drains_the_process_pool_and_leaves_no_process_behind(
    queue, start_worker, events_path, tmp_path
):
    release = tmp_path / "release"
    job = queue.push("workers.gate", {"path": events_path, "release": str(release)})
    worker = start_worker("--pool", "processes", "--concurrency", "2", "--shutdown-timeout", "20", *FAST)
    child = wait_until(lambda: first(events_path, job, "start"), 15, "the job to start")["pid"]
    # The fork server, both children and multiprocessing's resource tracker, at least.
    below = descendants(worker.pid)
    assert child in below and len(below) >= 4, below

    worker.send(signal.SIGTERM)
    worker.wait_for_log(r"stopping \(SIGTERM\): waiting up to 20s for 1 running job")
    assert worker.proc.poll() is None, "the worker waits for its running job"
    assert not gone(child), "the child of the running job was stopped by the signal"
    release.touch()

    assert worker.wait() == 0, worker.log()
    job.refresh_from_db()
    assert (job.status, job.attempts, job.result) == ("done", 1, "released")
    assert re.search(rf"job workers\.gate id={job.pk} attempt=1/5 duration=\S+s outcome=done", worker.log())
    wait_until(lambda: all(gone(pid) for pid in below), 5, f"the worker's processes {below} to end")
    assert not Worker.objects.exists()


def test_sigterm_hands_back_a_job_that_outlives_the_shutdown_timeout_and_leaves_no_process(
    queue, start_worker, events_path, tmp_path
):
    job = queue.push("workers.gate", {"path": events_path, "release": str(tmp_path / "never")})
    worker = start_worker("--pool", "processes", "--concurrency", "2", "--shutdown-timeout", "0.5", *FAST)
    child = wait_until(lambda: first(events_path, job, "start"), 15, "the job to start")["pid"]
    below = descendants(worker.pid)

    worker.send(signal.SIGTERM)

    assert worker.wait() == 0, worker.log()
    job.refresh_from_db()
    assert (job.status, job.attempts, job.locked_by) == ("ready", 0, None), "handed back, attempt not counted"
    assert re.search(
        rf"job workers\.gate id={job.pk} attempt=1/5 duration=\S+s outcome=released", worker.log()
    )
    # The slot's thread still waited on the child it killed: it must not crash on the way out.
    assert "Traceback" not in worker.log(), worker.log()
    assert not Worker.objects.exists()
    wait_until(lambda: gone(child) and all(gone(pid) for pid in below), 5, "the worker's processes to end")


@pytest.mark.skipif(
    find_spec("django.tasks") is None and find_spec("django_tasks") is None,
    reason="needs Django's Tasks framework (Django 6, or django-tasks on 5.2)",
)
def test_a_django_task_runs_in_a_child_and_its_result_is_read_back(
    queue, start_worker, events_path, tmp_path
):
    from django_jobqueue.backends import TaskResultStatus
    from tests import tasks_for_workers as tasks

    signals_path = str(tmp_path / "signals.jsonl")
    added = tasks.add.enqueue(2, 3)
    described = tasks.describe.enqueue(events_path)

    worker = start_worker(
        "--burst",
        "--pool",
        "processes",
        "--worker-id",
        "child-tasks",
        env={"TASK_SIGNALS_PATH": signals_path},
    )

    assert worker.wait() == 0, worker.log()
    result = tasks.add.get_result(added.id)
    assert (result.status, result.return_value, result.worker_ids) == (
        TaskResultStatus.SUCCESSFUL,
        5,
        ["child-tasks"],
    )
    context = tasks.describe.get_result(described.id)
    assert context.status == TaskResultStatus.SUCCESSFUL
    assert (context.return_value["attempt"], context.return_value["result_id"]) == (1, described.id)
    [ran] = events(events_path)
    assert ran["pid"] != worker.pid, "the task ran in the worker, not a child"
    finished = [(e["result_id"], e["status"]) for e in events(signals_path) if e["event"] == "task_finished"]
    assert sorted(finished) == sorted([(added.id, "SUCCESSFUL"), (described.id, "SUCCESSFUL")])


@POOLS
def test_a_quick_job_with_a_timeout_is_done_as_before(queue, start_worker, events_path, pool):
    job = queue.push("workers.record", {"path": events_path, "value": 7}, timeout=1)

    worker = start_worker("--burst", "--pool", pool)

    assert worker.wait() == 0, worker.log()
    job.refresh_from_db()
    assert (job.status, job.attempts, job.result, job.last_error, job.timeout) == ("done", 1, 7, "", 1.0)
    assert re.search(rf"job workers\.record id={job.pk} attempt=1/5 duration=\S+s outcome=done", worker.log())
    assert "timed out" not in worker.log()
    assert [e["event"] for e in events(events_path)] == ["start", "end"]
