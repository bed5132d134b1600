"""SIGKILL chaos: 5,000 jobs of 50-500 ms on 4 workers, one SIGKILLed every 2 s for 30 s.

And the same with ``--pool processes``, smaller: workers and their children
killed in turn, among jobs that time out and jobs cancelled while they run.
"""

from __future__ import annotations

import random
import re
import time

import pytest

from django_jobqueue.models import DeadLetter, Job
from tests.worker_support import wait_until

from . import ledger, processes
from .checker import CHILD_KILL, KILL, TIMEOUT, check

JOBS = 5_000
WORKERS = 4
KILL_EVERY = 2.0
CHAOS_FOR = 30.0
KILLS = int(CHAOS_FOR / KILL_EVERY)
# 8 slots each: 4 workers hold about 50 connections, half of PostgreSQL's default max_connections
# (100), which the test database's server shares with everything else that runs on it.
SLOTS = 8
WORKER_ARGS = ("--concurrency", str(SLOTS), "--visibility-timeout", "3", "--poll-interval", "0.2")


@pytest.mark.slow
def test_sigkill_chaos_loses_nothing_and_every_duplicate_follows_a_kill(queue, start_fleet, figures):
    rng = random.Random(5)
    jobs = queue.push_many(
        [("faults.work", {"seconds": rng.uniform(0.05, 0.5), "n": n}, {}) for n in range(JOBS)]
    )
    fleet = start_fleet("chaos", WORKERS, WORKER_ARGS)
    began = time.monotonic()
    fleet.kill_in_order(times=KILLS, every=KILL_EVERY)

    # A deadline, not a pace: about 50 s here when the machine is quiet, 140 s under a load of 30.
    wait_until(lambda: Job.objects.filter(status="done").count() == JOBS, 300, "every job to be done")
    elapsed = time.monotonic() - began

    report = check([job.pk for job in jobs], kills=fleet.kills)
    figures(
        scenario="SIGKILL chaos",
        faults=f"{len(fleet.kills)} SIGKILLs, one every {KILL_EVERY:g} s for {CHAOS_FOR:g} s",
        workers=f"{WORKERS} x {SLOTS} slots, visibility timeout 3 s",
        drained_in=round(elapsed, 1),
        **report.summary(),
    )
    report.assert_nothing_lost()
    assert report.done_once + report.done_more == JOBS
    assert report.dead == 0
    assert set(report.extra_runs) <= {KILL}, report.summary()
    assert report.extra_runs[KILL] > 0, "the kills hit running jobs"
    fleet.stop()


# The process pool's chaos, sized for CI: fewer jobs and slots (a slot is a process here), and
# among them jobs that time out and jobs cancelled while they run.
POOL_JOBS = 800
POOL_WORKERS = 3
POOL_SLOTS = 3
POOL_KILLS = 10
# How long a kill waits for a worker or child in the middle of a job before it gives up its aim.
AIM_WITHIN = 10.0
# Jobs whose first attempt runs past its 0.5 s limit, retried and then done.
OVERRUN_ONCE = 12
# Jobs that run past their limit every time: dead-lettered after their 2 attempts.
HOPELESS = 3
# Long jobs cancelled once they run: half of them notice ctx.cancelled, half are killed after
# --cancel-grace.
LINGERING = 4
POOL_ARGS = (
    "--pool", "processes", "--concurrency", str(POOL_SLOTS), "--visibility-timeout", "3",
    "--poll-interval", "0.2", "--cancel-grace", "1",
)  # fmt: skip
# Retries due within a second: the timed-out jobs' second attempts come during the chaos.
POOL_ENV = {"JOBQUEUE_BACKOFF_BASE": "0.2"}


@pytest.mark.slow
def test_process_pool_chaos_loses_nothing_with_workers_and_children_killed(queue, start_fleet, figures):
    processes.needs_proc()
    rng = random.Random(15)
    lingering = queue.push_many(
        [
            ("faults.linger", {"seconds": 120, "cooperative": n % 2 == 0}, {"priority": 20})
            for n in range(LINGERING)
        ]
    )
    fleet = start_fleet("pool-chaos", POOL_WORKERS, POOL_ARGS, env=POOL_ENV)

    def logged(pattern: str) -> int:
        return sum(len(re.findall(pattern, log)) for log in fleet.logs().values())

    # The long jobs go first: cancel them once they all run, and let every worker tell its own
    # to stop (the cancel watch's next look, then --cancel-grace for those that do not notice)
    # before the first kill, so that each running attempt logs outcome=cancelled.
    linger_ids = {job.pk for job in lingering}
    wait_until(
        lambda: {run.job_id for run in ledger.executions() if run.job_id in linger_ids} == linger_ids,
        60,
        "the long jobs to run",
    )
    cancels = {job.pk: time.time() for job in lingering if queue.cancel(job)}
    wait_until(lambda: logged(r"job faults\.linger .* outcome=cancelled") == LINGERING, 20, "the cancels")

    # The rest is enqueued only now, so that it is still there for the kills to cut: on a loaded
    # machine the cancels took long enough for the workers to drain it all before the first kill.
    # Due once the chaos has begun, so that their time limits strike among the kills.
    timed = {"timeout": 0.5, "priority": 10, "delay": 4}
    overrun = queue.push_many(
        [("faults.overrun", {"seconds": 10, "overrun_attempts": 1}, timed) for _ in range(OVERRUN_ONCE)]
        + [("faults.overrun", {"seconds": 10, "overrun_attempts": 99}, {**timed, "max_attempts": 2})]
        * HOPELESS
    )
    work = queue.push_many(
        [("faults.work", {"seconds": rng.uniform(0.1, 0.4), "n": n}, {}) for n in range(POOL_JOBS)]
    )
    hopeless_ids = {job.pk for job in overrun[OVERRUN_ONCE:]}

    began = time.monotonic()
    # The chaos's own pace; each kill aimed at a worker, or a child, in the middle of a job, but
    # not at the hopeless jobs: each must reach its last time limit, whose dead letter is checked
    # below (a kill in every one's last attempt had left none to check, on a loaded machine).
    fleet.kill_in_turns(POOL_KILLS, KILL_EVERY, AIM_WITHIN, rng, spare=frozenset(hopeless_ids))

    def settled() -> bool:
        done = Job.objects.filter(status="done").count()
        dead = DeadLetter.objects.filter(job_id__in=hopeless_ids).count()
        return done == POOL_JOBS + OVERRUN_ONCE and dead == HOPELESS

    # A deadline, not a pace.
    wait_until(settled, 240, "every job to be done, the hopeless ones dead-lettered")
    elapsed = time.monotonic() - began
    fleet.stop()

    report = check(
        [job.pk for job in (*lingering, *overrun, *work)],
        kills=fleet.kills,
        child_kills=fleet.child_kills,
        cancels=cancels,
        logs=fleet.logs(),
    )
    figures(
        scenario="process pool chaos",
        faults=(
            f"{len(cancels)} running jobs cancelled; then {len(fleet.kills)} worker SIGKILLs and "
            f"{len(fleet.child_kills)} child SIGKILLs in turn, {KILL_EVERY:g} s apart, "
            "each at one running a job"
        ),
        workers=f"{POOL_WORKERS} x {POOL_SLOTS} child processes, visibility timeout 3 s, cancel grace 1 s",
        drained_in=round(elapsed, 1),
        **report.summary(),
    )
    report.assert_nothing_lost()
    assert (len(cancels), report.cancelled, report.cancelled_running) == (LINGERING,) * 3, report.summary()
    assert report.done_once + report.done_more == POOL_JOBS + OVERRUN_ONCE
    assert set(report.dead_ids) == hopeless_ids
    assert set(report.extra_runs) <= {KILL, CHILD_KILL, TIMEOUT}, report.summary()
    assert report.extra_runs[KILL] > 0 and report.extra_runs[CHILD_KILL] > 0, "the kills hit running jobs"
    assert report.timeouts_retried > 0 and report.timeouts_dead > 0, report.summary()
