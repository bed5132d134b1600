"""Stopping a worker with real signals: finish, hand back, or exit at once."""

from __future__ import annotations

import re
import signal
from pathlib import Path

from django_jobqueue.models import Job, Worker
from tests.jobs_for_workers import events
from tests.worker_support import wait_until


def started(path: str, count: int = 1) -> bool:
    return sum(e["event"] == "start" for e in events(path)) >= count


def test_sigterm_lets_a_running_job_finish_then_exits_zero(queue, start_worker, events_path, tmp_path: Path):
    release = tmp_path / "release"
    job = queue.push("workers.gate", {"path": events_path, "release": str(release)})
    waiting = queue.push("workers.record", {"path": events_path, "value": "not started"})
    worker = start_worker("--concurrency", "1", "--shutdown-timeout", "20", "--poll-interval", "0.05")
    wait_until(lambda: started(events_path), 10, "the job to start")

    worker.send(signal.SIGTERM)
    worker.wait_for_log(r"stopping \(SIGTERM\): waiting up to 20s for 1 running job")
    assert worker.proc.poll() is None, "the worker waits for its running job"
    release.touch()

    assert worker.wait() == 0, worker.log()
    job.refresh_from_db()
    assert (job.status, job.attempts, job.result) == ("done", 1, "released")
    assert Job.objects.get(pk=waiting.pk).status == "ready", "no claim after the signal"
    assert not Worker.objects.exists()


def test_sigterm_hands_back_what_outlives_the_shutdown_timeout(queue, start_worker, events_path, tmp_path):
    release = tmp_path / "release"
    jobs = [queue.push("workers.gate", {"path": events_path, "release": str(release)}) for _ in range(2)]
    worker = start_worker("--concurrency", "2", "--shutdown-timeout", "0.5", "--worker-id", "deployed")
    wait_until(lambda: started(events_path, 2), 10, "both jobs to start")

    worker.send(signal.SIGINT)

    assert worker.wait(5) == 0, worker.log()
    for job in jobs:
        job.refresh_from_db()
        assert (job.status, job.attempts, job.locked_by) == ("ready", 0, None), (
            "handed back, attempt not counted"
        )
        # Its line tells how long it ran before it was handed back: at least the shutdown timeout.
        line = re.search(
            rf"job workers\.gate id={job.pk} attempt=1/5 duration=(\S+)s outcome=released", worker.log()
        )
        assert line and float(line[1]) >= 0.5, worker.log()

    # The handed-back jobs run on the next worker as first attempts.
    release.touch()
    assert start_worker("--burst", "--concurrency", "2").wait() == 0
    assert [Job.objects.get(pk=job.pk).attempts for job in jobs] == [1, 1]
    assert all(Job.objects.get(pk=job.pk).status == "done" for job in jobs)


def test_a_second_signal_exits_at_once(queue, start_worker, events_path, tmp_path):
    job = queue.push("workers.gate", {"path": events_path, "release": str(tmp_path / "never")})
    worker = start_worker("--shutdown-timeout", "60", "--worker-id", "impatient")
    wait_until(lambda: started(events_path), 10, "the job to start")

    worker.send(signal.SIGTERM)
    worker.wait_for_log("stopping")
    worker.send(signal.SIGTERM)

    assert worker.wait(5) == 128 + signal.SIGTERM
    assert "SIGTERM after SIGTERM: exiting now" in worker.log()
    job.refresh_from_db()
    # Nothing was handed back: the claim stays until it expires and is rescued.
    assert (job.status, job.locked_by) == ("running", "impatient")


def test_a_signal_while_the_database_is_unreachable_still_stops_the_worker(queue, start_worker):
    worker = start_worker(
        "--worker-id", "cut-off", env={"DATABASE_URL": "postgres://nobody@127.0.0.1:1/none"}
    )
    worker.wait_for_log("registering: database error")

    worker.send(signal.SIGTERM)

    assert worker.wait(5) == 0, worker.log()
