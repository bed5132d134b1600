"""A batch under SIGKILLs: 2,000 jobs on 4 workers, one SIGKILLed every second, some jobs failing
for good and some cancelled: exactly one callback, with the right counts."""

from __future__ import annotations

import json
import random
import time

import pytest

from django_jobqueue import batch
from django_jobqueue.models import Batch, DeadLetter, Job
from tests.worker_support import wait_until

from . import ledger
from .checker import EXPIRED, KILL, check

JOBS = 2_000
FAILING = 40  # Fail at once: dead letters of the batch
CANCELLED = 30  # cancelled by the test while they wait, during the kills
WORKERS = 4
SLOTS = 6
KILL_EVERY = 1.0
CHAOS_FOR = 12.0
KILLS = int(CHAOS_FOR / KILL_EVERY)
CANCEL_AFTER = 3  # kills, then the test cancels its jobs
WORKER_ARGS = ("--concurrency", str(SLOTS), "--visibility-timeout", "3", "--poll-interval", "0.2")


@pytest.mark.slow
def test_a_batch_under_sigkills_enqueues_one_callback_with_the_right_counts(queue, start_fleet, figures):
    rng = random.Random(18)
    failing = set(rng.sample(range(JOBS - CANCELLED), FAILING))
    with batch(on_finish="faults.batch_done", payload={"scenario": "kills"}) as opened:
        jobs = queue.push_many(
            [
                ("faults.batch_part", {"seconds": rng.uniform(0.02, 0.2), "n": n, "fail": n in failing}, {})
                for n in range(JOBS - CANCELLED)
            ]
            # Last in line (lowest priority): still waiting when the test cancels them.
            + [("faults.batch_part", {"n": n}, {"priority": -10}) for n in range(JOBS - CANCELLED, JOBS)]
        )
    assert opened.total == JOBS
    to_cancel = jobs[JOBS - CANCELLED :]
    fleet = start_fleet("batch-kill", WORKERS, WORKER_ARGS)
    fleet.wait_started()  # the first kill strikes a worker that runs jobs
    began = time.monotonic()
    fleet.kill_in_order(times=CANCEL_AFTER, every=KILL_EVERY)
    # Amid the kills, while the batch's other jobs run.
    cancels = {job.pk: time.time() for job in to_cancel if queue.cancel(job)}
    fleet.kill_in_order(times=KILLS - CANCEL_AFTER, every=KILL_EVERY)

    def called_back() -> bool:
        return any(run.finished and run.note for run in ledger.executions())

    wait_until(called_back, 240, "the batch's callback to run")
    elapsed = time.monotonic() - began
    fleet.stop()

    assert len(cancels) == CANCELLED, "the cancelled jobs were still waiting"
    row = Batch.objects.get(pk=opened.id)
    expected = {"done": JOBS - FAILING - CANCELLED, "failed": FAILING, "cancelled": CANCELLED}
    assert {"done": row.done, "failed": row.failed, "cancelled": row.cancelled} == expected
    # Exactly one callback job, the one the batch names; it may have run more than once if a kill
    # struck it (at least once), but every run saw the same counts.
    callbacks = list(Job.objects.filter(name="faults.batch_done")) + list(
        DeadLetter.objects.filter(name="faults.batch_done")
    )
    assert [job.pk for job in callbacks] == [row.callback_job_id]
    notes = [json.loads(run.note) for run in ledger.executions() if run.finished and run.note]
    assert notes and all(note == {"scenario": "kills", "batch_id": opened.id, **expected} for note in notes)
    assert {run.job_id for run in ledger.executions() if run.note} == {row.callback_job_id}

    report = check([job.pk for job in jobs], kills=fleet.kills, cancels=cancels)
    figures(
        scenario="batch under SIGKILLs",
        faults=f"{len(fleet.kills)} SIGKILLs, one every {KILL_EVERY:g} s for {CHAOS_FOR:g} s; "
        f"{CANCELLED} jobs cancelled, {FAILING} failing for good",
        workers=f"{WORKERS} x {SLOTS} slots, visibility timeout 3 s",
        drained_in=round(elapsed, 1),
        callback_runs=len(notes),
        **report.summary(),
    )
    report.assert_nothing_lost()
    assert report.dead == FAILING and report.cancelled == CANCELLED
    # Every extra run follows a kill, or a claim that expired while 24 slots shared a small
    # machine: at least once, as everywhere; the counts above are what is exact.
    assert set(report.extra_runs) <= {KILL, EXPIRED}, report.summary()
    assert report.extra_runs[KILL] > 0, "the kills hit running jobs"
