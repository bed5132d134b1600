"""Every worker stopped with SIGTERM under load, with a long and a short shutdown timeout."""

from __future__ import annotations

import random
import signal
import time

import pytest

from django_jobqueue.models import Job
from tests.worker_support import wait_until

from . import ledger
from .checker import SHUTDOWN, check

JOBS = 400
WORKERS = 3


@pytest.mark.parametrize("shutdown_timeout", [10.0, 0.1], ids=["long-timeout", "short-timeout"])
def test_stopping_every_worker_under_load_leaves_nothing_running(
    queue, fault_worker, figures, shutdown_timeout: float
):
    rng = random.Random(11)
    jobs = queue.push_many(
        [("faults.work", {"seconds": rng.uniform(0.2, 1.0), "n": n}, {}) for n in range(JOBS)]
    )
    args = ("--concurrency", "8", "--poll-interval", "0.1", "--shutdown-timeout", str(shutdown_timeout))
    workers = [fault_worker(*args, "--worker-id", f"stopped-{n}") for n in range(WORKERS)]
    for worker in workers:
        worker.wait_started()
    wait_until(lambda: Job.objects.filter(status="done").count() >= 100, 30, "the workers to get busy")
    running_at_signal = Job.objects.filter(status="running").count()

    stopped_at = time.time()
    for worker in workers:
        worker.send(signal.SIGTERM)
    for worker in workers:
        assert worker.wait(shutdown_timeout + 15) == 0, worker.log()
    stop_took = time.time() - stopped_at

    assert not Job.objects.filter(status="running").exists(), "nothing stuck running"
    handed_back = sum(worker.log().count("outcome=released") for worker in workers)
    cut_short = [run for run in ledger.executions() if not run.finished]
    if shutdown_timeout > 1.0:
        # Only a job claimed as the signal came may be handed back, before it started.
        assert not cut_short, "every running job was let finish"
    else:
        assert handed_back > 0, "the short timeout handed running jobs back"
    assert Job.objects.filter(status="ready", attempts=0).count() >= handed_back

    finisher = fault_worker("--burst", "--concurrency", "16", "--worker-id", "finisher")
    assert finisher.wait(120) == 0, finisher.log()
    report = check([job.pk for job in jobs], stops={f"stopped-{n}": stopped_at for n in range(WORKERS)})
    figures(
        scenario=f"graceful stop, --shutdown-timeout {shutdown_timeout:g}",
        faults=f"SIGTERM to all {WORKERS} workers (8 slots each) with {running_at_signal} jobs running",
        handed_back=handed_back,
        stopped_in=round(stop_took, 1),
        **report.summary(),
    )
    report.assert_nothing_lost()
    assert (report.done_once + report.done_more, report.dead) == (JOBS, 0)
    assert set(report.extra_runs) <= {SHUTDOWN}, report.summary()
