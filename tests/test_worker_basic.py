"""``runworker`` as a real process: draining, outcomes, the registry, limits and its own row."""

from __future__ import annotations

import re
import signal
import time
from datetime import timedelta

from django.utils import timezone

import django_jobqueue
from django_jobqueue.models import DeadLetter, Job, Worker
from tests.jobs_for_workers import events
from tests.worker_support import wait_until

FAST_BACKOFF = {"JOBQUEUE_BACKOFF_BASE": "0.05", "JOBQUEUE_BACKOFF_MAX": "0.2"}


def test_burst_drains_every_queue_then_exits_zero(queue, start_worker, events_path):
    jobs = [
        queue.push("workers.record", {"path": events_path, "value": i}, queue=f"q{i % 3}") for i in range(30)
    ]

    worker = start_worker("--burst", "--concurrency", "4", "--worker-id", "drainer")

    assert worker.wait() == 0, worker.log()
    assert Job.objects.filter(status="done").count() == 30
    assert sorted(e["value"] for e in events(events_path) if e["event"] == "end") == list(range(30))
    assert [job.result for job in Job.objects.order_by("id")] == list(range(30))
    log = worker.log()
    assert re.search(r"worker drainer started: queues=\* concurrency=4 database=default \(\w+ .+\)", log)
    version = re.escape(django_jobqueue.__version__)
    assert re.search(rf"worker drainer started: .* version={version}$", log, re.MULTILINE)
    for job in jobs:
        assert re.search(rf"job workers\.record id={job.pk} attempt=1/5 duration=\d+\.\d+s outcome=done", log)
    assert "stopped (burst: no job due) after 30 job(s)" in log
    assert not Worker.objects.exists(), "a stopping worker deletes its row"


def test_burst_ignores_jobs_not_due_yet(queue, start_worker, events_path):
    queue.push("workers.record", {"path": events_path, "value": "now"})
    later = queue.push("workers.record", {"path": events_path, "value": "later"}, delay=3600)

    assert start_worker("--burst").wait() == 0

    assert Job.objects.get(pk=later.pk).status == "ready"
    assert [e["value"] for e in events(events_path) if e["event"] == "end"] == ["now"]


def test_unknown_names_are_nacked_and_never_imported(queue, start_worker, tmp_path):
    touched = tmp_path / "os-system-ran"
    canary = tmp_path / "canary"
    system = queue.push("os.system", {"command": f"touch {touched}"}, max_attempts=3)
    canary_job = queue.push("tests.canary_module.run", {}, max_attempts=1)

    worker = start_worker("--burst", env={"JOBQUEUE_CANARY": str(canary)})

    assert worker.wait() == 0, worker.log()
    system.refresh_from_db()
    assert (system.status, system.attempts) == ("ready", 1)
    assert "no job registered as 'os.system'" in system.last_error
    assert system.last_error.endswith("(retried later: a newer deploy may have it)")
    # Retried later, after the first backoff step (at least half of BACKOFF_BASE, 1 s).
    assert system.run_at - system.created_at >= timedelta(seconds=0.4)
    dead = DeadLetter.objects.get(job_id=canary_job.pk)
    assert "no job registered as 'tests.canary_module.run'" in dead.error
    # Its one attempt was its last: neither its error nor its log line promises a retry.
    assert dead.error.endswith("(no attempts left: moved to the dead letters)")
    [line] = [line for line in worker.log().splitlines() if f"id={canary_job.pk} " in line]
    assert "retried later" not in line and "outcome=dead moved_to=dead_letters" in line
    assert not touched.exists(), "os.system ran"
    assert not canary.exists(), "a job name was imported as a module path"


def test_failures_are_retried_then_dead_lettered_with_their_traceback(queue, start_worker):
    job = queue.push("workers.boom", {"message": "kaput"}, max_attempts=3)

    worker = start_worker("--worker-id", "retrier", "--poll-interval", "0.05", env=FAST_BACKOFF)

    dead = wait_until(lambda: DeadLetter.objects.filter(job_id=job.pk).first(), 15, "the dead letter")
    assert (dead.attempts, dead.worker_id, dead.error) == (3, "retrier", "ValueError: kaput")
    assert "raise ValueError(message)" in dead.traceback and "jobs_for_workers.py" in dead.traceback
    assert not Job.objects.filter(pk=job.pk).exists()
    log = worker.wait_for_log(
        rf"job workers\.boom id={job.pk} attempt=3/3 .* outcome=dead moved_to=dead_letters error="
    ).string
    retries = re.findall(
        rf"id={job.pk} attempt=[12]/3 .* outcome=retry next_attempt_in=(\d+\.\d{{3}})s "
        "error='ValueError: kaput'",
        log,
    )
    # FAST_BACKOFF: the first two steps wait from 0.025 s to 0.1 s.
    assert len(retries) == 2 and all(0.025 <= float(due) <= 0.1 for due in retries), log


def test_retry_with_a_delay_and_fail(queue, start_worker, events_path):
    retried = queue.push("workers.retry_then_succeed", {"path": events_path, "retries": 2, "delay": 0.3})
    failed = queue.push("workers.fail_now", {"reason": "number not on WhatsApp"})

    start_worker("--poll-interval", "0.05")

    wait_until(lambda: Job.objects.filter(pk=retried.pk, status="done").exists(), 15, "the retried job")
    retried.refresh_from_db()
    assert (retried.attempts, retried.result) == (3, {"attempt": 3})
    starts = [e["time"] for e in events(events_path)]
    assert len(starts) == 3
    assert all(later - earlier >= 0.25 for earlier, later in zip(starts, starts[1:], strict=False))
    dead = wait_until(lambda: DeadLetter.objects.filter(job_id=failed.pk).first(), 10, "the failed job")
    assert (dead.attempts, dead.error) == (1, "Fail: number not on WhatsApp")


def test_context_results_and_bad_calls(queue, start_worker):
    context = queue.push("workers.context", {})
    not_json = queue.push("workers.not_json", {})

    assert start_worker("--burst", "--worker-id", "ctx-worker").wait() == 0

    context.refresh_from_db()
    assert context.result == {"job_id": context.pk, "attempt": 1, "worker_id": "ctx-worker", "extended": True}
    dead = DeadLetter.objects.get(job_id=not_json.pk)
    assert "JobPayloadError: result['when'] is a module" in dead.error
    assert dead.attempts == 1, "a job that returned is not run again for its result"


def test_concurrency_runs_that_many_jobs_at_once(queue, start_worker, events_path, tmp_path):
    release = tmp_path / "release"
    jobs = [queue.push("workers.gate", {"path": events_path, "release": str(release)}) for _ in range(5)]
    worker = start_worker("--concurrency", "4", "--poll-interval", "0.05")

    wait_until(lambda: sum(e["event"] == "start" for e in events(events_path)) == 4, 10, "four jobs at once")
    assert Job.objects.filter(status="running").count() == 4
    assert Job.objects.filter(status="ready").count() == 1, "no fifth claim while four slots are busy"
    release.touch()

    wait_until(lambda: Job.objects.filter(status="done").count() == len(jobs), 10, "every job")
    worker.send(signal.SIGTERM)
    assert worker.wait() == 0


def test_strict_priority_inside_a_queue(queue, start_worker, events_path):
    for priority in (0, 5, -3, 10, 5):
        queue.push("workers.record", {"path": events_path, "value": priority}, priority=priority)

    assert start_worker("--burst", "--concurrency", "1").wait() == 0

    assert [e["value"] for e in events(events_path) if e["event"] == "start"] == [10, 5, 5, 0, -3]


def test_max_jobs_exits_after_that_many(queue, start_worker, events_path):
    for i in range(10):
        queue.push("workers.record", {"path": events_path, "value": i})

    worker = start_worker("--max-jobs", "3", "--concurrency", "2")

    assert worker.wait() == 0, worker.log()
    assert Job.objects.filter(status="done").count() == 3
    assert Job.objects.filter(status="ready", attempts=0).count() == 7


def test_a_busy_queue_cannot_starve_another(queue, start_worker, events_path, tmp_path):
    backlog = [("workers.record", {"path": events_path, "value": "bulk", "seconds": 0.01}, {"queue": "bulk"})]
    queue.push_many(backlog * 10_000)
    worker = start_worker(
        "--queue", "bulk:1", "--queue", "urgent", "--concurrency", "2", "--poll-interval", "0.5"
    )
    wait_until(lambda: len(events(events_path)) >= 20, 15, "the backlog to be under way")

    enqueued = time.time()
    urgent = [
        queue.push("workers.record", {"path": events_path, "value": i}, queue="urgent") for i in range(5)
    ]

    wait_until(lambda: Job.objects.filter(queue="urgent", status="done").count() == 5, 10, "the urgent jobs")
    finished = max(e["time"] for e in events(events_path) if e["value"] in range(5) and e["event"] == "end")
    # Each urgent job waits for one slot at most (the bulk jobs take 10 ms), plus one poll interval.
    assert finished - enqueued < 3.0
    assert Job.objects.filter(queue="bulk", status="ready").count() > 9_000
    assert all(Job.objects.get(pk=job.pk).attempts == 1 for job in urgent)
    worker.send(signal.SIGTERM)
    assert worker.wait() == 0


def test_worker_row_lives_with_the_process_and_stale_rows_are_cleaned(queue, start_worker):
    long_gone = timezone.now() - timedelta(minutes=5)
    Worker.objects.create(
        worker_id="dead-host-1-aaaaaa",
        hostname="dead-host",
        pid=1,
        queues=[],
        concurrency=1,
        started_at=long_gone,
        last_heartbeat=long_gone,
    )

    worker = start_worker(
        "--worker-id",
        "alive",
        "--queue",
        "a:2",
        "--queue",
        "b",
        "--concurrency",
        "3",
        "--visibility-timeout",
        "1",
    )
    worker.wait_started()

    row = wait_until(lambda: Worker.objects.filter(worker_id="alive").first(), 5, "the worker row")
    assert (row.pid, row.queues, row.concurrency) == (worker.pid, ["a", "b"], 3)
    wait_until(
        lambda: not Worker.objects.filter(worker_id="dead-host-1-aaaaaa").exists(), 5, "stale row pruned"
    )
    worker.send(signal.SIGTERM)
    assert worker.wait() == 0
    assert not Worker.objects.exists()


def test_bad_options_are_refused(queue, start_worker):
    for args in (["--queue", "no spaces"], ["--concurrency", "0"], ["--queue", "a", "--queue", "a"]):
        worker = start_worker(*args)
        assert worker.wait() != 0
        assert "error" in worker.log().lower(), worker.log()
    assert not Worker.objects.exists()
