"""Three workers over 1,500 jobs while one of them is SIGKILLed every 1.5 s: nothing is lost."""

from __future__ import annotations

import signal
import time

import pytest

from django_jobqueue.models import DeadLetter, Job
from tests.jobs_for_workers import events

JOBS = 1_500
KILL_EVERY = 1.5
WORKER_ARGS = ("--concurrency", "4", "--visibility-timeout", "1", "--poll-interval", "0.1")


@pytest.mark.slow
def test_every_job_is_done_while_workers_are_killed(queue, start_worker, events_path):
    queue.push_many(
        [("workers.record", {"path": events_path, "value": i, "seconds": 0.1}, {}) for i in range(JOBS)]
    )
    workers = [start_worker(*WORKER_ARGS, "--worker-id", f"chaos-{n}") for n in range(3)]
    started = time.monotonic()
    kills = 0

    def finished() -> bool:
        return Job.objects.filter(status="done").count() == JOBS

    while not finished():
        assert time.monotonic() - started < 50, f"{Job.objects.filter(status='done').count()} of {JOBS} done"
        time.sleep(KILL_EVERY)  # the chaos's own pace, not a wait for an event
        slot = kills % 3
        workers[slot].send(signal.SIGKILL)
        workers[slot].wait()
        kills += 1
        workers[slot] = start_worker(*WORKER_ARGS, "--worker-id", f"chaos-{kills + 2}")

    assert kills >= 5
    assert not DeadLetter.objects.exists()
    ended = {e["value"] for e in events(events_path) if e["event"] == "end"}
    assert ended == set(range(JOBS))
    assert Job.objects.filter(attempts__gt=1).exists(), "the kills hit running jobs"
    for worker in workers:
        worker.wait_started()  # a replacement may still be starting up, before its signal handlers
        worker.send(signal.SIGTERM)
    for worker in workers:
        assert worker.wait() == 0, worker.log()
