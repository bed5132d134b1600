"""A poison pill that SIGKILLs its worker on every run, among 1,000 ordinary jobs."""

from __future__ import annotations

import random
import signal
import time

import pytest

from django_jobqueue.models import DeadLetter, Job
from tests.worker_support import wait_until

from . import ledger
from .checker import KILL, check

JOBS = 1_000
MAX_ATTEMPTS = 3
WORKER_ARGS = ("--concurrency", "8", "--visibility-timeout", "1", "--poll-interval", "0.1")


@pytest.mark.slow
def test_a_poison_pill_is_dead_lettered_after_max_attempts_and_the_rest_is_done(queue, start_fleet, figures):
    rng = random.Random(7)
    jobs = queue.push_many(
        [("faults.work", {"seconds": rng.uniform(0.01, 0.1), "n": n}, {}) for n in range(JOBS // 2)]
    )
    pill = queue.push("faults.poison", {}, max_attempts=MAX_ATTEMPTS)
    jobs += queue.push_many(
        [("faults.work", {"seconds": rng.uniform(0.01, 0.1), "n": n}, {}) for n in range(JOBS // 2, JOBS)]
    )
    fleet = start_fleet("pill", 2, WORKER_ARGS)
    died: list[str] = []
    began = time.monotonic()

    def settled() -> bool:
        # A supervisor's duty, done here: restart whichever worker the pill killed.
        for slot, (worker_id, worker) in enumerate(fleet.workers):
            if worker.proc.poll() is not None:
                assert worker.proc.returncode == -signal.SIGKILL, worker.log()
                died.append(worker_id)
                fleet.replace(slot)
        done = Job.objects.filter(status="done").count() == JOBS
        return done and DeadLetter.objects.filter(job_id=pill.pk).exists()

    wait_until(settled, 240, "every job done and the pill dead-lettered")
    elapsed = time.monotonic() - began

    pill_runs = [run for run in ledger.executions() if run.job_id == pill.pk]
    kills = {run.worker: run.started_at for run in pill_runs}
    report = check([job.pk for job in jobs], kills=kills)
    dead = DeadLetter.objects.get(job_id=pill.pk)
    figures(
        scenario="poison pill",
        faults=f"a job SIGKILLing its worker at every run (max_attempts={MAX_ATTEMPTS}); 2 workers x 8 slots",
        pill_runs=len(pill_runs),
        pill_dead_letter_error=dead.error,
        workers_killed_by_the_pill=len(died),
        drained_in=round(elapsed, 1),
        **report.summary(),
    )
    assert len(pill_runs) == MAX_ATTEMPTS and sorted(died) == sorted(kills)
    assert dead.attempts == MAX_ATTEMPTS
    assert f"stopped without finishing attempt {MAX_ATTEMPTS}" in dead.error
    report.assert_nothing_lost()
    assert (report.done_once + report.done_more, report.dead) == (JOBS, 0)
    assert set(report.extra_runs) <= {KILL}, report.summary()
    fleet.stop()
