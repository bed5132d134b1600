"""``runworker --pool asyncio``, with real worker processes: coroutine jobs as tasks of one loop.

The jobs (``tests/coroutine_jobs.py``) note their events with the time into a
file; the tests read them back and the worker's log. Time limits are 1 s and
``--cancel-grace`` 1 s, as in ``test_worker_time_limits.py``.
"""

from __future__ import annotations

import os
import re
import signal
import time
from importlib.util import find_spec

import pytest
from django.contrib.auth.models import User

from django_jobqueue import QueueClient, batch, enqueue_many, job
from django_jobqueue.models import DeadLetter, Job, Worker
from tests import coroutine_jobs  # noqa: F401 - registered here too: push takes their @job options
from tests.jobs_for_workers import events, first, of
from tests.worker_support import database_url, wait_until, worker_sessions

MODULES = {"JOBQUEUE_MODULES": "tests.jobs_for_workers,tests.coroutine_jobs"}
BACKOFF = {"JOBQUEUE_BACKOFF_BASE": "0.6", "JOBQUEUE_BACKOFF_MAX": "0.6"}
FAST = ("--pool", "asyncio", "--poll-interval", "0.05", "--cancel-grace", "1")
# How late after its cause an effect may come on a loaded two-core machine.
SLACK = 0.75


def most_at_once(spans: list[tuple[float, float]]) -> int:
    """The most of ``spans`` (start, end) that were open at one moment."""
    edges = sorted([(start, 1) for start, _ in spans] + [(end, -1) for _, end in spans])
    most = now = 0
    for _, step in edges:
        now += step
        most = max(most, now)
    return most


def spans(path: str, jobs: list[Job]) -> list[tuple[float, float]]:
    noted = events(path)
    ids = {job.pk for job in jobs}
    starts = {e["job"]: e["time"] for e in noted if e["event"] == "start" and e.get("job") in ids}
    ends = {e["job"]: e["time"] for e in noted if e["event"] == "end" and e.get("job") in ids}
    return [(starts[pk], ends[pk]) for pk in ids]


def all_done(jobs: list[Job]) -> bool:
    return Job.objects.filter(pk__in=[job.pk for job in jobs], status="done").count() == len(jobs)


# -- many I/O-bound jobs at once -------------------------------------------------------------


def test_two_hundred_jobs_awaiting_a_second_overlap_in_one_worker(queue, start_worker, events_path):
    jobs = [queue.push("aio.wait", {"path": events_path, "seconds": 1.0, "value": n}) for n in range(200)]
    worker = start_worker(*FAST, "--concurrency", "200", env=MODULES)
    wait_until(lambda: all_done(jobs), 20, "every job done")

    ran = spans(events_path, jobs)
    assert most_at_once(ran) >= 190, "the jobs did not wait side by side"
    first_start = min(start for start, _ in ran)
    last_end = max(end for _, end in ran)
    assert last_end - first_start < 1 + 1.5, f"200 one-second waits took {last_end - first_start:.2f}s"
    assert {e["pid"] for e in events(events_path)} == {worker.pid}
    assert [row.result for row in Job.objects.filter(pk__in=[j.pk for j in jobs]).order_by("pk")] == list(
        range(200)
    )


def test_plain_functions_run_beside_coroutines_in_at_most_ten_threads(queue, start_worker, events_path):
    plain = [
        queue.push("workers.record", {"path": events_path, "value": n, "seconds": 0.3}) for n in range(30)
    ]
    coroutines = [
        queue.push("aio.wait", {"path": events_path, "seconds": 0.3, "value": n}) for n in range(30)
    ]
    start_worker(*FAST, "--concurrency", "60", env=MODULES)
    wait_until(lambda: all_done(plain + coroutines), 20, "every job done")

    assert most_at_once(spans(events_path, plain)) == 10, "plain functions ran beyond the pool's ten threads"
    assert most_at_once(spans(events_path, coroutines)) >= 25, "the coroutines waited for the threads"


def test_a_coroutine_job_uses_the_orm_the_django_way(queue, start_worker, events_path):
    ran = queue.push("aio.orm", {"path": events_path, "username": "aio-ann"})
    start_worker(*FAST, env=MODULES)

    wait_until(lambda: Job.objects.filter(pk=ran.pk, status="done").exists(), 15, "the ORM job")
    user = User.objects.get(username="aio-ann")
    assert Job.objects.get(pk=ran.pk).result == 1
    # It enqueued a plain job with aenqueue, which the same worker ran in a thread.
    follow_up = wait_until(lambda: Job.objects.filter(name="workers.record", status="done").first(), 10)
    assert follow_up.result == "aio-ann"
    [noted] = of(events_path, ran, "orm")
    assert noted["user"] == user.pk


@pytest.mark.skipif(bool(os.environ.get("DATABASE_POOLER_URL")), reason="counts the server's own sessions")
def test_three_hundred_coroutine_jobs_querying_at_once_hold_at_most_ten_connections(
    queue, postgresql_only, start_worker
):
    name = "jq-asyncio-budget"
    jobs = enqueue_many([("aio.queries", {"seconds": 1.5})] * 300)
    start_worker(
        *FAST,
        "--concurrency",
        "300",
        env={**MODULES, "DATABASE_URL": f"{database_url()}?application_name={name}"},
    )
    seen = []
    while not all_done(jobs):
        seen.append(worker_sessions(name))
        time.sleep(0.05)

    # Ten lanes for the jobs' queries, and the worker's own: claimer, heartbeat, ticker, cancel
    # watch, listener (a writer, or the listener's check, for a moment). Not a connection per job.
    assert 10 + 4 <= max(seen) <= 10 + 5 + 2, max(seen)
    assert Job.objects.get(pk=jobs[0].pk).result == 0


def test_retries_dead_letters_and_progress_as_in_the_other_pools(queue, start_worker, events_path):
    failing = queue.push("aio.fails", {"path": events_path})
    fatal = queue.push("aio.fails", {"path": events_path, "fatal": True})
    reporting = queue.push("aio.progress", {"path": events_path, "steps": 3})
    worker = start_worker(*FAST, "--concurrency", "5", env={**MODULES, **BACKOFF})

    dead = wait_until(lambda: DeadLetter.objects.filter(job_id=failing.pk).first(), 15, "the retried job")
    assert (dead.attempts, dead.error) == (2, "ValueError: the partner API said 503")
    assert "await asyncio.sleep(0)" in dead.traceback or "coroutine_jobs.py" in dead.traceback
    fatal_dead = wait_until(lambda: DeadLetter.objects.filter(job_id=fatal.pk).first(), 10, "the failed job")
    assert (fatal_dead.attempts, fatal_dead.error) == (1, "Fail: not worth another try")
    worker.wait_for_log(rf"job aio\.fails id={failing.pk} attempt=1/2 .* outcome=retry")

    wait_until(lambda: Job.objects.filter(pk=reporting.pk, status="done").exists(), 10, "the reporting job")
    assert Job.objects.get(pk=reporting.pk).progress == {"current": 3, "total": 3, "message": "step 3"}
    assert first(events_path, reporting, "end")["extended"] is True


def test_dependencies_batches_and_concurrency_keys_hold_for_coroutine_jobs(queue, start_worker, events_path):
    with batch(on_finish="workers.batch_done", payload={"path": events_path, "report": "aio"}) as opened:
        parts = [queue.push("aio.wait", {"path": events_path, "seconds": 0.2, "value": n}) for n in range(10)]
    after = queue.push("aio.wait", {"path": events_path, "value": "after"}, depends_on=parts)
    keyed = [
        queue.push(
            "aio.wait",
            {"path": events_path, "seconds": 0.3, "value": f"k{n}"},
            concurrency_key="tenant",
            concurrency_limit=1,
        )
        for n in range(4)
    ]
    start_worker(*FAST, "--concurrency", "50", env=MODULES)
    wait_until(lambda: all_done([*parts, after, *keyed]), 20, "every job done")

    [callback] = wait_until(lambda: [e for e in events(events_path) if e["event"] == "batch_done"], 10)
    assert (callback["batch_id"], callback["done"], callback["report"]) == (opened.id, 10, "aio")
    assert first(events_path, after, "start")["time"] >= max(end for _, end in spans(events_path, parts))
    assert most_at_once(spans(events_path, keyed)) == 1, "a key of limit 1 ran twice at once"


# -- time limits, cancels, and a job that will not stop ----------------------------------------


def test_a_coroutine_past_its_time_limit_is_cancelled_its_finally_runs_and_it_is_retried(
    queue, start_worker, events_path
):
    stuck = queue.push("aio.stuck", {"path": events_path, "seconds": 60}, timeout=1, max_attempts=2)
    worker = start_worker(*FAST, env={**MODULES, **BACKOFF})
    began = wait_until(lambda: first(events_path, stuck, "start"), 15, "the first attempt")

    ended = wait_until(lambda: first(events_path, stuck, "finally"), 5, "the cancel inside the job")
    assert ended["error"] == "CancelledError"
    assert ended["cancelled_seen"] is True, "ctx.cancelled was still False in its finally"
    assert 1 - 0.25 <= ended["time"] - began["time"] < 1 + SLACK

    dead = wait_until(lambda: DeadLetter.objects.filter(job_id=stuck.pk).first(), 15, "the dead letter")
    assert dead.attempts == 2
    assert dead.error.startswith("JobTimeout: timed out after 1 s"), dead.error
    assert [entry["outcome"] for entry in dead.attempt_history] == ["timeout", "timeout"]
    worker.wait_for_log(rf"job aio\.stuck id={stuck.pk} attempt=1/2 .* outcome=retry")


def test_a_cancel_from_the_admin_cancels_the_task_within_two_seconds(queue, start_worker, events_path):
    running = queue.push("aio.stuck", {"path": events_path, "seconds": 60}, max_attempts=3)
    worker = start_worker(*FAST, env=MODULES)
    wait_until(lambda: first(events_path, running, "start"), 15, "the job to start")

    cancelled_at = time.time()
    assert QueueClient().cancel(running)
    ended = wait_until(lambda: first(events_path, running, "finally"), 3, "the cancel inside the job")
    assert ended["error"] == "CancelledError"
    assert ended["time"] - cancelled_at < 2.0
    worker.wait_for_log(rf"job aio\.stuck id={running.pk} attempt=1/3 duration=\S+s outcome=cancelled")

    later = queue.push("aio.wait", {"path": events_path, "value": "later"})
    wait_until(lambda: Job.objects.filter(pk=later.pk, status="done").exists(), 10, "a later job")
    running.refresh_from_db()
    assert (running.status, running.attempts) == ("cancelled", 1)
    assert not DeadLetter.objects.filter(job_id=running.pk).exists()


def test_a_coroutine_that_swallows_its_cancel_is_reported_and_keeps_its_slot(
    queue, start_worker, events_path
):
    stubborn = queue.push("aio.swallow", {"path": events_path, "after": 3.0}, timeout=1, max_attempts=1)
    worker = start_worker(*FAST, "--concurrency", "1", env=MODULES)
    began = wait_until(lambda: first(events_path, stubborn, "start"), 15, "the stubborn job")
    waiting = queue.push("aio.wait", {"path": events_path, "value": "waiting"})

    wait_until(lambda: first(events_path, stubborn, "swallowed"), 3, "the cancel to be caught")
    worker.wait_for_log(
        rf"job aio\.swallow id={stubborn.pk} attempt=1: still running 1s after it was cancelled \(timeout\): "
        r"it caught asyncio.CancelledError"
    )
    # Given up at deadline + grace: its timeout is written while it still runs...
    dead = wait_until(lambda: DeadLetter.objects.filter(job_id=stubborn.pk).first(), 5, "the dead letter")
    assert dead.error.startswith("JobTimeout: timed out after 1 s"), dead.error
    assert first(events_path, stubborn, "end") is None
    assert first(events_path, waiting, "start") is None, "its slot was given away"
    # ... and its one slot is taken until it returns.
    ended = wait_until(lambda: first(events_path, stubborn, "end"), 5, "the stubborn job's end")
    waited = wait_until(lambda: first(events_path, waiting, "start"), 5, "the waiting job")
    assert ended["time"] - began["time"] >= 1 + 3 - 0.1
    assert waited["time"] >= ended["time"]
    assert DeadLetter.objects.filter(job_id=stubborn.pk).count() == 1, "written once"


def test_a_loop_blocked_by_synchronous_code_is_reported_with_its_job_and_line(
    queue, start_worker, events_path
):
    blocker = queue.push("aio.blocks", {"path": events_path, "seconds": 1.2})
    worker = start_worker(*FAST, env=MODULES)
    wait_until(lambda: Job.objects.filter(pk=blocker.pk, status="done").exists(), 15, "the blocking job")

    report = worker.wait_for_log(r"the event loop has been blocked for (\S+)s by job aio\.blocks id=(\d+)")
    assert int(report[2]) == blocker.pk
    assert float(report[1]) >= 0.5
    warning = worker.log()[report.start() :].split("\n20", 1)[0]  # up to the next log line
    assert 'coroutine_jobs.py", line' in warning and "time.sleep(seconds)" in warning, warning
    assert "django_jobqueue" not in warning.split("at:", 1)[1], "the worker's own frames are shown"
    worker.wait_for_log(r"the event loop turns again after \S+s")


# -- stopping and dying --------------------------------------------------------------------------


def test_sigterm_lets_short_jobs_finish_and_hands_back_the_rest_cancelled(queue, start_worker, events_path):
    short = queue.push("aio.wait", {"path": events_path, "seconds": 0.5, "value": "short"})
    long = queue.push("aio.stuck", {"path": events_path, "seconds": 60})
    worker = start_worker(*FAST, "--concurrency", "4", "--shutdown-timeout", "1.5", env=MODULES)
    wait_until(lambda: first(events_path, short, "start") and first(events_path, long, "start"), 15)

    worker.send(signal.SIGTERM)
    assert worker.wait() == 0, worker.log()

    assert Job.objects.get(pk=short.pk).status == "done"
    long.refresh_from_db()
    assert (long.status, long.attempts, long.locked_by) == ("ready", 0, None), "handed back, not counted"
    ended = wait_until(lambda: first(events_path, long, "finally"), 2, "the handed-back job's cancel")
    assert ended["error"] == "CancelledError"
    assert re.search(rf"job aio\.stuck id={long.pk} attempt=1/5 duration=\S+s outcome=released", worker.log())
    assert "Traceback" not in worker.log(), worker.log()
    assert not Worker.objects.exists()


def test_a_worker_killed_mid_flight_loses_nothing(queue, start_worker, events_path):
    jobs = [queue.push("aio.wait", {"path": events_path, "seconds": 2.0, "value": n}) for n in range(50)]
    doomed = start_worker(*FAST, "--concurrency", "50", "--visibility-timeout", "2", env=MODULES)
    wait_until(
        lambda: len([e for e in events(events_path) if e["event"] == "start"]) == 50, 15, "every start"
    )

    doomed.kill()
    assert Job.objects.filter(status="running").count() == 50, "the claims outlived their worker"
    start_worker(*FAST, "--concurrency", "50", env=MODULES)
    wait_until(lambda: all_done(jobs), 30, "every job done by the second worker")

    assert not DeadLetter.objects.exists()
    rerun = {e["job"] for e in events(events_path) if e["event"] == "start" and e["attempt"] == 2}
    assert rerun == {job.pk for job in jobs}, "a job the killed worker held was not run again"


# -- Django Tasks, autoscaling, and the other pools ---------------------------------------------


@pytest.mark.skipif(
    find_spec("django.tasks") is None and find_spec("django_tasks") is None,
    reason="needs Django's Tasks framework (Django 6, or django-tasks on 5.2)",
)
def test_a_coroutine_task_runs_on_the_loop_and_a_plain_one_in_a_thread(queue, start_worker, tmp_path):
    from django_jobqueue.backends import TaskResultStatus
    from tests import tasks_for_workers as tasks

    signals_path = str(tmp_path / "signals.jsonl")
    awaited = tasks.async_add.enqueue(20, 22)
    added = tasks.add.enqueue(2, 3)
    worker = start_worker("--burst", *FAST, env={**MODULES, "TASK_SIGNALS_PATH": signals_path})

    assert worker.wait() == 0, worker.log()
    for task, result_id, value in ((tasks.async_add, awaited.id, 42), (tasks.add, added.id, 5)):
        result = task.get_result(result_id)
        assert (result.status, result.return_value) == (TaskResultStatus.SUCCESSFUL, value)
    finished = [(e["result_id"], e["status"]) for e in events(signals_path) if e["event"] == "task_finished"]
    assert sorted(finished) == sorted([(awaited.id, "SUCCESSFUL"), (added.id, "SUCCESSFUL")])


def test_the_tasks_grow_within_concurrency_min_max(queue, start_worker, events_path):
    jobs = [queue.push("aio.wait", {"path": events_path, "seconds": 1.0, "value": n}) for n in range(64)]
    worker = start_worker(
        *FAST, "--concurrency", "2:64", "--resize-interval", "0.1", "--shrink-after", "1", env=MODULES
    )
    wait_until(lambda: all_done(jobs), 30, "every job done")

    assert most_at_once(spans(events_path, jobs)) >= 32, "the slots did not grow"
    worker.wait_for_log(r"-> 64 slots \(due jobs were waiting; range 2:64\)")
    worker.wait_for_log(r"-> 2 slots \(slots unneeded for 1s", timeout=15)


@pytest.mark.parametrize("pool", ["threads", "processes"])
def test_the_other_pools_run_a_coroutine_job_in_a_loop_of_its_own(queue, start_worker, events_path, pool):
    ran = queue.push("aio.wait", {"path": events_path, "seconds": 0.1, "value": pool})
    stuck = queue.push("aio.stuck", {"path": events_path, "seconds": 30}, timeout=1, max_attempts=1)
    worker = start_worker("--burst", "--pool", pool, "--concurrency", "2", "--cancel-grace", "1", env=MODULES)

    assert worker.wait(20) == 0, worker.log()
    assert Job.objects.get(pk=ran.pk).result == pool
    # Stopped at its time limit, its finally run: not left awaiting for 30 s.
    dead = DeadLetter.objects.get(job_id=stuck.pk)
    assert dead.error == "JobTimeout: timed out after 1 s", dead.error
    began, ended = first(events_path, stuck, "start"), first(events_path, stuck, "finally")
    assert ended is not None and ended["time"] - began["time"] < 1 + SLACK
    assert ended["error"] == "CancelledError"


def test_an_atomic_coroutine_job_is_refused_where_it_is_declared():
    async def transfer() -> None: ...

    with pytest.raises(TypeError, match=r"@job\(atomic=True\) cannot be used on the coroutine function"):
        job(name="aio.atomic", atomic=True)(transfer)
