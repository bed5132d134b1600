"""Rescue racing ack: 0.2 s claims, handlers as long as the claim, two processes ticking nonstop.

Whichever wins each race, a job whose ack succeeded is never handed out again,
and every job is acked exactly once.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest

from django_jobqueue.models import Job
from tests.worker_support import ROOT, database_url, wait_until

from . import ledger
from .checker import check

JOBS = 400


@pytest.mark.slow
def test_no_job_whose_ack_succeeded_is_handed_out_again(queue, ledger_table, tmp_path: Path, figures):
    jobs = queue.push_many([("faults.race", {"n": n}, {"max_attempts": 1000}) for n in range(JOBS)])
    stop = tmp_path / "stop"
    env = {**os.environ, "DATABASE_URL": database_url(), "PYTHONUNBUFFERED": "1"}

    def spawn(*args: str) -> subprocess.Popen[str]:
        return subprocess.Popen(
            [sys.executable, "-m", "tests.faults.racer", *args, str(stop)],
            cwd=ROOT,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )

    tickers = [spawn("ticker") for _ in range(2)]
    pullers = [spawn("puller", str(stop), f"racer-{n}") for n in range(2)]
    processes = tickers + pullers
    try:
        wait_until(lambda: Job.objects.filter(status="done").count() == JOBS, 240, "every job to be acked")
    finally:
        stop.touch()
        outputs = [process.communicate(timeout=30)[0] for process in processes]
    assert [process.returncode for process in processes] == [0] * 4, outputs

    runs = ledger.executions()
    notes = Counter(run.note for run in runs)
    acked = Counter(run.job_id for run in runs if run.note == "acked")
    assert set(acked.values()) == {1} and len(acked) == JOBS, "each job acked exactly once"
    for run in runs:
        if run.note == "acked":
            later = [o for o in runs if o.job_id == run.job_id and o.claim_token > run.claim_token]
            assert not later, f"job {run.job_id} handed out again after its ack: {later}"
    report = check([job.pk for job in jobs])
    rescued = sum(int(out.split("handled=")[1]) for out in outputs[:2])
    figures(
        scenario="rescue racing ack",
        faults="0.2 s claims, handlers of 0.2 s, 2 processes running tick_timeouts nonstop",
        acks_succeeded=notes["acked"],
        acks_refused=notes["refused"],
        claims_rescued=rescued,
        **report.summary(),
    )
    report.assert_nothing_lost()
    assert report.done_once + report.done_more == JOBS
    assert notes["refused"] > 0, "some rescues won their race"
