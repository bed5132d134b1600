"""``--pool processes`` under SIGKILL: of the worker (no child may outlive it), and of one child.

A child that outlived its worker would go on running a job whose claim expires
and is handed to another worker: the job would run twice at once. One of the
jobs killed with the worker keeps the GIL in a C call, so that the child's
own Python threads cannot act for it.
"""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

import pytest

from django_jobqueue.models import Job
from tests.worker_support import WorkerProcess, wait_until

from . import ledger, processes
from .checker import CHILD_KILL, KILL, check

POOL_ARGS = ("--pool", "processes", "--visibility-timeout", "2", "--poll-interval", "0.1")
# Seconds the children, the fork server and the resource tracker get to be gone after the kill.
GONE_WITHIN = 2.0


def executions_of(job_id: int) -> list[ledger.Execution]:
    return [run for run in ledger.executions() if run.job_id == job_id]


def stop(*workers: WorkerProcess) -> None:
    """SIGTERM each worker and wait for its exit 0: its log is then complete."""
    for worker in workers:
        worker.send(signal.SIGTERM)
    for worker in workers:
        assert worker.wait(30) == 0, worker.log()


# Not marked slow, unlike its sibling: a few seconds, and what it proves rests on the internals of
# multiprocessing's fork server, which differ by Python version, so the Django 6 suites run it too.
def test_a_killed_worker_leaves_no_child_behind_and_its_jobs_are_rescued(
    queue, fault_worker, figures, tmp_path: Path
):
    processes.needs_proc()
    release = tmp_path / "release"
    jobs = [
        queue.push("faults.gate", {"release": str(release)}),
        queue.push("faults.gate", {"release": str(release)}),
        # On its first attempt, 60 s in one C call that keeps the GIL.
        queue.push("faults.hold_gil", {"seconds": 60}),
    ]
    first = fault_worker(*POOL_ARGS, "--concurrency", "3", "--worker-id", "pool-first")
    first.wait_started(60)
    running = wait_until(lambda: len(ledger.executions()) == 3 and ledger.executions(), 60, "3 jobs to start")
    children = sorted({run.pid for run in running})
    server = processes.fork_server_of(first.pid)
    helpers = processes.descendants(first.pid)  # the fork server, the resource tracker, the children
    assert len(children) == 3 and first.pid not in children, running
    assert server is not None and set(children) <= set(processes.children_of(server)), helpers
    try:
        first.send(signal.SIGKILL)
        killed_at = time.time()
        first.wait()
        began = time.monotonic()
        survivors = helpers
        while survivors and time.monotonic() - began < GONE_WITHIN:
            survivors = [pid for pid in helpers if not processes.gone(pid)]
            time.sleep(0.01)
        all_gone_in = time.monotonic() - began
        assert not survivors, f"still running {GONE_WITHIN:g} s after the worker's SIGKILL: " + (
            processes.describe(survivors)
        )
    finally:
        processes.kill_leftovers(helpers)

    release.touch()
    second = fault_worker(*POOL_ARGS, "--concurrency", "3", "--worker-id", "pool-second")
    wait_until(lambda: Job.objects.filter(status="done").count() == 3, 60, "the 3 jobs to be done")
    stop(second)
    report = check(
        [job.pk for job in jobs],
        kills={"pool-first": killed_at},
        logs={"pool-first": first.log(), "pool-second": second.log()},
    )
    figures(
        scenario="process pool, worker SIGKILLed",
        faults="SIGKILL to a worker with 3 children running jobs, one inside a C call keeping the GIL",
        processes_checked=len(helpers),
        all_gone_in=round(all_gone_in, 2),
        **report.summary(),
    )
    report.assert_nothing_lost()
    assert (report.done_more, dict(report.extra_runs)) == (3, {KILL: 3}), report.summary()
    rescued = [run for run in ledger.executions() if run.worker == "pool-second"]
    assert sorted(run.attempt for run in rescued) == [2, 2, 2]
    assert not set(children) & {run.pid for run in rescued}


@pytest.mark.slow
def test_a_killed_child_loses_its_attempt_which_is_rescued_while_the_worker_goes_on(
    queue, fault_worker, figures, tmp_path: Path
):
    release = tmp_path / "release"
    victim = queue.push("faults.gate", {"release": str(release)}, priority=10)
    others = queue.push_many([("faults.work", {"seconds": 0.05, "n": n}, {}) for n in range(60)])
    worker = fault_worker(*POOL_ARGS, "--concurrency", "2", "--worker-id", "pool")
    worker.wait_started(60)
    [first_run] = wait_until(lambda: executions_of(victim.pk), 60, "the victim to start")
    wait_until(lambda: Job.objects.filter(status="done").count() >= 5, 30, "other jobs to run beside it")
    os.kill(first_run.pid, signal.SIGKILL)
    killed_at = time.time()
    release.touch()

    worker.wait_for_log(rf"job faults\.gate id={victim.pk} attempt=1/\d+ duration=\S+ outcome=lost", 10)
    worker.wait_for_log(rf"replacing jobqueue-child-\d \(pid {first_run.pid}\): it died", 10)
    wait_until(lambda: Job.objects.filter(status="done").count() == 61, 60, "every job to be done")
    assert worker.proc.poll() is None, worker.log()
    stop(worker)

    runs = executions_of(victim.pk)
    report = check(
        [victim.pk, *(job.pk for job in others)],
        child_kills={first_run.pid: killed_at},
        logs={"pool": worker.log()},
    )
    other_ids = {job.pk for job in others}
    after_kill = [
        run for run in ledger.executions() if run.job_id in other_ids and run.started_at > killed_at
    ]
    figures(
        scenario="process pool, one child SIGKILLed",
        faults="SIGKILL to the child running a job, 2 slots, visibility timeout 2 s",
        victim_rescued_after=round(runs[-1].started_at - killed_at, 2),
        other_jobs_started_after_the_kill=len(after_kill),
        **report.summary(),
    )
    report.assert_nothing_lost()
    assert (report.child_killed, dict(report.extra_runs)) == (1, {CHILD_KILL: 1}), report.summary()
    # Rescued as attempt 2 once its claim expired (about 2/3 of the visibility timeout or more after
    # the kill: the heartbeat beats every third of it), in a new child.
    assert [run.attempt for run in runs] == [1, 2] and runs[1].finished
    assert runs[1].started_at - killed_at > 1.0
    assert runs[1].pid != first_run.pid
    # The other slot went on meanwhile, and the new child ran jobs too.
    assert after_kill and {run.pid for run in after_kill} - {first_run.pid}
