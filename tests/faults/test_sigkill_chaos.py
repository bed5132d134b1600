"""SIGKILL chaos: 5,000 jobs of 50-500 ms on 4 workers, one SIGKILLed every 2 s for 30 s."""

from __future__ import annotations

import random
import signal
import time

import pytest

from django_jobqueue.models import Job
from tests.worker_support import WorkerProcess, wait_until

from .checker import KILL, check

JOBS = 5_000
WORKERS = 4
KILL_EVERY = 2.0
CHAOS_FOR = 30.0
# 8 slots each: 4 workers hold about 50 connections, half of PostgreSQL's default max_connections
# (100), which the test database's server shares with everything else that runs on it.
SLOTS = 8
WORKER_ARGS = ("--concurrency", str(SLOTS), "--visibility-timeout", "3", "--poll-interval", "0.2")


@pytest.mark.slow
def test_sigkill_chaos_loses_nothing_and_every_duplicate_follows_a_kill(queue, fault_worker, figures):
    rng = random.Random(5)
    jobs = queue.push_many(
        [("faults.work", {"seconds": rng.uniform(0.05, 0.5), "n": n}, {}) for n in range(JOBS)]
    )
    serial = iter(range(1_000))

    def start() -> tuple[str, WorkerProcess]:
        worker_id = f"chaos-{next(serial)}"
        return worker_id, fault_worker(*WORKER_ARGS, "--worker-id", worker_id)

    workers = [start() for _ in range(WORKERS)]
    began = time.monotonic()
    kills: dict[str, float] = {}
    next_kill = began + KILL_EVERY
    while next_kill <= began + CHAOS_FOR:
        time.sleep(max(0.0, next_kill - time.monotonic()))  # the chaos's own pace
        slot = len(kills) % WORKERS
        worker_id, worker = workers[slot]
        worker.send(signal.SIGKILL)
        kills[worker_id] = time.time()
        worker.wait()
        workers[slot] = start()
        next_kill += KILL_EVERY

    # A deadline, not a pace: about 50 s here when the machine is quiet, 140 s under a load of 30.
    wait_until(lambda: Job.objects.filter(status="done").count() == JOBS, 300, "every job to be done")
    elapsed = time.monotonic() - began

    report = check([job.pk for job in jobs], kills=kills)
    figures(
        scenario="SIGKILL chaos",
        faults=f"{len(kills)} SIGKILLs, one every {KILL_EVERY:g} s for {CHAOS_FOR:g} s",
        workers=f"{WORKERS} x {SLOTS} slots, visibility timeout 3 s",
        drained_in=round(elapsed, 1),
        **report.summary(),
    )
    report.assert_nothing_lost()
    assert report.done_once + report.done_more == JOBS
    assert report.dead == 0
    assert set(report.extra_runs) <= {KILL}, report.summary()
    assert report.extra_runs[KILL] > 0, "the kills hit running jobs"
    for _worker_id, worker in workers:
        worker.wait_started()
        worker.send(signal.SIGTERM)
    for _worker_id, worker in workers:
        assert worker.wait() == 0, worker.log()
