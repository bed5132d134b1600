"""Atomic jobs under SIGKILL: each job writes an effect row in its transaction and runs on in it for a
while before its ack commits both; workers are SIGKILLed, each at a job in that stretch.

Exactly one committed effect per job, never none and never two, and the one
kept is the one written by the run whose ack committed; every run that wrote
an effect and was killed before its commit left nothing. The ledger's rows of
these jobs are kept beside the database (``ledger.py``): on the job's own
connection they would be rolled back with it.

On SQLite an atomic job holds the database's write lock for its whole
transaction, so the jobs are short there and the workers few: every other
write of every worker waits behind each of them (docs/workflows.md). A write
that has waited a while is the last to get the lock when it frees (SQLite's
busy handler tries a long waiter again every 100 ms, a new one within a few),
so a slot waiting to begin its job's transaction, and the heartbeat waiting
to renew that job's claim, can wait past the claim's 2 s: the claim expires
and the job runs again elsewhere, and when the late run gets the lock its
ack is refused and its effect rolled back. There an extra run may follow an
expired claim as well as a kill; on PostgreSQL only a kill.
"""

from __future__ import annotations

import random
import time
from collections import Counter
from pathlib import Path

import pytest
from django.db import connection

from django_jobqueue.models import Job
from tests.worker_support import first_within, wait_until

from . import effects, ledger
from .checker import EXPIRED, KILL, check
from .jobs import WRITTEN

KILLS = 10
KILL_EVERY = 1.0
# How long a kill waits for a job between its write and its commit before it strikes a worker anyway.
AIM_WITHIN = 10.0
# Why a job may run again (the module's docstring).
EXPLAINED = {"postgresql": {KILL}, "mysql": {KILL}, "sqlite": {KILL, EXPIRED}}
# PostgreSQL and MySQL: transactions of their own, side by side.
# SQLite: one at a time, holding the write lock.
SIZES = {
    "postgresql": {"jobs": 500, "workers": 3, "slots": 4, "seconds": (0.1, 0.4)},
    "mysql": {"jobs": 500, "workers": 3, "slots": 4, "seconds": (0.1, 0.4)},
    "sqlite": {"jobs": 250, "workers": 2, "slots": 2, "seconds": (0.02, 0.08)},
}


@pytest.fixture
def effects_table(queue):
    effects.create()
    yield
    effects.drop()


@pytest.mark.slow
def test_sigkilled_atomic_jobs_commit_exactly_one_effect_each(
    queue, start_fleet, effects_table, figures, tmp_path: Path
):
    size = SIZES[connection.vendor]
    rng = random.Random(31)
    ledger_file = str(tmp_path / "atomic-ledger.sqlite3")
    ledger.create_beside(ledger_file)
    low, high = size["seconds"]
    payloads = [
        {"ledger_file": ledger_file, "seconds": rng.uniform(low, high), "n": n} for n in range(size["jobs"])
    ]
    jobs = queue.push_many([("faults.atomic_effect", payload, {}) for payload in payloads])
    worker_args = ("--concurrency", str(size["slots"]), "--visibility-timeout", "2", "--poll-interval", "0.1")
    fleet = start_fleet("atomic", size["workers"], worker_args)

    def between_write_and_commit() -> list[int]:
        """The slots of the workers running a job that has written its effect and not yet returned."""
        slots = {worker_id: slot for slot, (worker_id, _) in enumerate(fleet.workers)}
        return [
            slots[run.worker]
            for run in ledger.beside_executions(ledger_file)
            if run.ended_at is None and run.note == WRITTEN and run.worker in slots
        ]

    began = time.monotonic()
    for round_ in range(KILLS):
        time.sleep(KILL_EVERY)
        # Struck at once, not a moment later: the stretch between the write and the commit is
        # what a kill must cut (it may still land just after the job returned, before its commit).
        busy = first_within(between_write_and_commit, AIM_WITHIN)
        fleet.kill(busy[0] if busy else round_ % len(fleet))
    done_in_chaos = Job.objects.filter(status="done").count()

    wait_until(lambda: Job.objects.filter(status="done").count() == size["jobs"], 180, "every job to be done")
    elapsed = time.monotonic() - began
    fleet.stop()

    ledger.take_in(ledger_file)
    ids = [job.pk for job in jobs]
    report = check(ids, kills=fleet.kills, logs=fleet.logs())
    acked = dict(Job.objects.filter(pk__in=ids).values_list("pk", "claim_token"))
    runs = ledger.executions()
    acked_runs = {run.job_id: run for run in runs if acked.get(run.job_id) == run.claim_token}
    # Runs that wrote their effect and were killed before their commit: what the kills took back.
    taken_back = [
        run
        for run in runs
        if run.note == WRITTEN and run.worker in fleet.kills and acked[run.job_id] != run.claim_token
    ]
    kept = effects.committed()
    figures(
        scenario="atomic jobs under SIGKILL",
        faults=f"{len(fleet.kills)} SIGKILLs, {KILL_EVERY:g} s apart or more, each at a worker whose job had "
        "written its effect and not returned",
        workers=f"{size['workers']} x {size['slots']} slots, visibility timeout 2 s",
        job_seconds_after_the_write=f"{low:g}-{high:g}",
        drained_in=round(elapsed, 1),
        done_during_chaos=done_in_chaos,
        effects_committed=len(kept),
        effects_taken_back=len(taken_back),
        taken_back_after_the_function_returned=sum(run.finished for run in taken_back),
        **report.summary(),
    )
    report.assert_nothing_lost()
    assert report.done_once + report.done_more == size["jobs"] and report.dead == 0
    assert set(report.extra_runs) <= EXPLAINED[connection.vendor], report.summary()
    assert taken_back, "no kill came between a job's write and its commit"
    # Exactly once in the database's eyes: one effect per job, never none, never two.
    counts = Counter(effect.job_id for effect in kept)
    assert counts == Counter(ids), {job_id: n for job_id, n in counts.items() if n != 1}
    # And it is the acked run's: written by the claim that acked, on the worker that ran it.
    for effect in kept:
        run = acked_runs[effect.job_id]
        assert (effect.claim_token, effect.worker) == (run.claim_token, run.worker), (effect, run)
