"""A rate limit across the process pool under SIGKILLs: 3 ``--pool processes`` workers serve a queue
limited to 8 starts a second while workers and children are killed in the middle of jobs.

What the limit promises is a count of claims: at most N of the queue's jobs
claimed in any window of its length, on the database's clock, a retry or a
rescue counting as a start again (docs/flow-control.md). So the truth is the
rate limit's own ledger, ``QueueStart``: one row per claim, written by the
claim with the database's clock, and what every later claim counts. The
queue deletes those rows as they leave the window; a trigger keeps a copy of
each (``trails.py``), and its count is checked against the claims the jobs
show (each claim adds one to a job's claim token). Neither of the other
times would do: a job's ``started_at`` is its first claim only, and the
ledger's start is when a child began the function, which follows its claim
by the time the parent takes to hand it over (a job claimed ahead waits for
a free child), so the runs of jobs claimed a window apart may begin closer
together. The figures show how much.
"""

from __future__ import annotations

import json
import random
import time

import pytest

from django_jobqueue.models import Job
from tests.flow_checks import most_in_any_window
from tests.worker_support import wait_until

from . import ledger, processes, trails
from .checker import CHILD_KILL, KILL, check

QUEUE = "rated"
RATE, WINDOW = 8, 1.0  # "8/s"
JOBS = 160
WORKERS = 3
CHILDREN = 3
KILLS = 8
KILL_EVERY = 1.5
# How long a kill waits for a worker or child in the middle of a job before it gives up its aim.
AIM_WITHIN = 10.0
WORKER_ARGS = (
    "--pool", "processes", "--queue", QUEUE, "--concurrency", str(CHILDREN),
    "--visibility-timeout", "2", "--poll-interval", "0.1",
)  # fmt: skip
WORKER_ENV = {"JOBQUEUE_QUEUES": json.dumps({QUEUE: {"rate_limit": f"{RATE}/s"}})}


@pytest.mark.slow
def test_a_rate_limit_holds_across_the_process_pool_with_workers_and_children_killed(
    queue, start_fleet, trail_tables, figures
):
    processes.needs_proc()
    rng = random.Random(23)
    # Longer than the window's share of a slot (9 slots at 8 a second: about 1.1 s each) is not
    # needed: 0.2-0.6 s keeps a few jobs running at any moment for the kills to aim at, and leaves
    # the slots enough room that the rate, not the slots, holds the queue back.
    jobs = queue.push_many(
        [("faults.work", {"seconds": rng.uniform(0.2, 0.6), "n": n}, {"queue": QUEUE}) for n in range(JOBS)]
    )
    fleet = start_fleet("rated", WORKERS, WORKER_ARGS, env=WORKER_ENV)
    fleet.wait_started()

    began = time.monotonic()
    # Aimed at one in the middle of a job, in turn a worker and a child, as in the pool's chaos.
    fleet.kill_in_turns(KILLS, KILL_EVERY, AIM_WITHIN, rng)
    done_in_chaos = Job.objects.filter(status="done").count()

    wait_until(lambda: Job.objects.filter(status="done").count() == JOBS, 180, "every job to be done")
    elapsed = time.monotonic() - began
    fleet.stop()

    report = check(
        [job.pk for job in jobs], kills=fleet.kills, child_kills=fleet.child_kills, logs=fleet.logs()
    )
    window = round(WINDOW * 1_000_000)
    starts = trails.starts(QUEUE)
    claims = sum(Job.objects.filter(pk__in=[job.pk for job in jobs]).values_list("claim_token", flat=True))
    runs = ledger.executions()
    run_starts = sorted(round(run.started_at * 1_000_000) for run in runs)
    figures(
        scenario="rate limit across the process pool under SIGKILLs",
        faults=(
            f"{len(fleet.kills)} worker SIGKILLs and {len(fleet.child_kills)} child SIGKILLs in turn, "
            f"{KILL_EVERY:g} s apart or more, each at one running a job"
        ),
        workers=f"{WORKERS} x {CHILDREN} child processes, visibility timeout 2 s, rate {RATE}/s",
        drained_in=round(elapsed, 1),
        done_during_chaos=done_in_chaos,
        claims=claims,
        starts_recorded=len(starts),
        most_claims_in_a_window=most_in_any_window(starts, window),
        claims_per_second=round(len(starts) / ((starts[-1] - starts[0]) / 1_000_000), 2),
        # The children's own starts, on the machine's clock: not what the limit counts. Each follows
        # its claim by a few milliseconds or tens of them, not always the same.
        most_runs_begun_in_a_window=most_in_any_window(run_starts, window),
        most_runs_begun_in_90_percent_of_one=most_in_any_window(run_starts, window * 9 // 10),
        **report.summary(),
    )
    report.assert_nothing_lost()
    assert report.done_once + report.done_more == JOBS and report.dead == 0
    assert set(report.extra_runs) <= {KILL, CHILD_KILL}, report.summary()
    assert report.extra_runs[KILL] > 0 and report.extra_runs[CHILD_KILL] > 0, "the kills hit running jobs"
    # Every claim wrote its start, and nothing else did: the copy is the whole of what was counted.
    assert len(starts) == claims, (len(starts), claims)
    assert claims >= len(runs) > JOBS, "every run was a claim of its own, and the kills cost runs"
    # The limit, in every window of its length on the database's clock; and reached, so that it
    # is the limit that held the starts back, not slots with nothing to do.
    assert most_in_any_window(starts, window) == RATE, report.summary()
