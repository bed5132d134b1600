"""The checker's rules for the outcomes a worker decides itself, each shown to catch its breach.

The histories are made with ``QueueClient`` (claims, acks, nacks, cancels as a
worker makes them), ledger rows and log lines written here: no worker runs.
"""

from __future__ import annotations

import os
import time

import pytest

from django_jobqueue import QueueClient
from django_jobqueue.models import Job

from . import ledger
from .checker import CHILD_KILL, TIMEOUT, Report, check

WORKER = "w"
TIMED_OUT = "JobTimeout: timed out after 0.5 s"


@pytest.fixture
def claim(queue: QueueClient, ledger_table: None):
    """Claim the next job as worker ``w`` and note its execution in the ledger (unfinished)."""

    def take(visibility_timeout: float | None = None) -> Job:
        job = queue.pull(worker_id=WORKER, visibility_timeout=visibility_timeout)
        assert job is not None
        ledger.start(job.pk, job.claim_token, job.attempts, WORKER)
        return job

    return take


def line(job: Job, outcome: str, error: str = "", attempt: int | None = None) -> str:
    """The executor's log line for ``job``'s current attempt (or ``attempt``)."""
    suffix = f" error={error!r}" if error else ""
    return (
        "2026-12-01 10:00:00,000 INFO django_jobqueue.worker.executor: job "
        f"{job.name} id={job.pk} attempt={attempt or job.attempts}/{job.max_attempts} "
        f"duration=0.100s outcome={outcome}{suffix}\n"
    )


def violations(report: Report) -> str:
    return " | ".join(report.violations)


def test_a_job_cancelled_while_running_passes(queue, claim):
    job = queue.push("faults.work")
    claimed = claim()
    assert queue.cancel(job)
    report = check([job.pk], cancels={job.pk: time.time()}, logs={WORKER: line(claimed, "cancelled")})
    assert (report.violations, report.cancelled, report.cancelled_running) == ([], 1, 1)


def test_a_cancelled_job_that_ends_done_or_logged_done_is_caught(queue, claim):
    acked, logged_done = queue.push("faults.work"), queue.push("faults.work")
    first = claim()
    assert queue.ack(first, worker_id=WORKER)
    second = claim()
    assert queue.cancel(logged_done)
    report = check(
        [acked.pk, logged_done.pk],
        cancels={acked.pk: time.time(), logged_done.pk: time.time()},
        logs={WORKER: line(first, "done") + line(second, "done")},
    )
    assert f"job {acked.pk}: cancelled, but it ended done" in violations(report)
    assert f"job {logged_done.pk}: cancelled, but attempt 1 logged done" in violations(report)


def test_a_run_on_a_claim_after_the_cancel_is_caught(queue, claim):
    job = queue.push("faults.work")
    claimed = claim()
    assert queue.cancel(job)
    ledger.start(job.pk, claimed.claim_token + 1, 2, WORKER)  # a claim the cancel should have prevented
    report = check([job.pk], cancels={job.pk: time.time()})
    assert "ran on a claim newer than the one its cancel ended" in violations(report)


def test_a_job_cancelled_by_nobody_is_caught(queue, ledger_table):
    job = queue.push("faults.work")
    assert queue.cancel(job)
    assert "the scenario did not cancel it" in violations(check([job.pk], cancels={}))
    assert check([job.pk]).violations == []  # without cancels, as the older scenarios call it


def test_a_timed_out_attempt_retried_then_done_passes(queue, claim):
    job = queue.push("faults.work")
    first = claim()
    assert queue.nack(first, worker_id=WORKER, error=TIMED_OUT, delay=0)
    second = claim()
    assert queue.ack(second, worker_id=WORKER)
    report = check([job.pk], logs={WORKER: line(first, "retry", TIMED_OUT) + line(second, "done")})
    assert report.violations == []
    assert (report.timed_out, report.timeouts_retried, dict(report.extra_runs)) == (1, 1, {TIMEOUT: 1})


def test_a_timed_out_attempt_never_claimed_again_is_caught(queue, claim):
    job = queue.push("faults.work")
    first = claim()
    assert queue.nack(first, worker_id=WORKER, error=TIMED_OUT, delay=3600)
    report = check([job.pk], logs={WORKER: line(first, "retry", TIMED_OUT)})
    assert "timed out and was to be retried, but it ended ready after 1 attempt(s)" in violations(report)


def test_a_timed_out_last_attempt_is_dead_lettered_with_its_error(queue, claim):
    good, wrong_error = queue.push("faults.work", max_attempts=1), queue.push("faults.work", max_attempts=1)
    first = claim()
    assert queue.fail(first, worker_id=WORKER, error=TIMED_OUT)
    second = claim()
    assert queue.fail(second, worker_id=WORKER, error="ValueError: something else")
    logs = line(first, "dead", TIMED_OUT) + line(second, "dead", TIMED_OUT)
    report = check([good.pk, wrong_error.pk], logs={WORKER: logs})
    assert (report.timed_out, report.timeouts_dead, report.dead) == (2, 2, 2)
    assert [v.split(":")[0] for v in report.violations] == [f"job {wrong_error.pk}"], violations(report)


def test_a_timed_out_attempt_with_any_other_outcome_is_caught(queue, claim):
    job = queue.push("faults.work")
    first = claim()
    assert queue.ack(first, worker_id=WORKER)
    report = check([job.pk], logs={WORKER: line(first, "lost", TIMED_OUT) + line(first, "done")})
    assert "timed out and logged outcome=lost" in violations(report)


def test_an_attempt_cut_by_a_killed_child_rescued_as_a_new_attempt_passes(queue, claim):
    job = queue.push("faults.work")
    first = claim(visibility_timeout=1)
    killed_at = time.time()
    time.sleep(1.1)  # the claim expires: nothing beats it any more
    assert queue.tick_timeouts() == 1
    second = claim()
    assert queue.ack(second, worker_id=WORKER)
    lost = line(first, "lost", f"its child process {os.getpid()} was killed by signal 9")
    report = check([job.pk], child_kills={os.getpid(): killed_at}, logs={WORKER: lost + line(second, "done")})
    assert report.violations == []
    assert (report.child_killed, dict(report.extra_runs)) == (1, {CHILD_KILL: 1})


def test_an_attempt_cut_by_a_killed_child_handed_back_uncounted_is_caught(queue, claim):
    job = queue.push("faults.work")
    first = claim()
    killed_at = time.time()
    assert queue.release(first, worker_id=WORKER)  # the attempt given back instead of lost
    second = claim()
    assert queue.ack(second, worker_id=WORKER)
    assert second.attempts == first.attempts
    logs = line(first, "released") + line(second, "done")
    report = check([job.pk], child_kills={os.getpid(): killed_at}, logs={WORKER: logs})
    assert "the lost attempt was not counted" in violations(report)
    assert "attempt 1 cut by a killed child logged released, not outcome=lost" in violations(report)


def test_a_child_killed_idle_after_a_job_that_raised_cut_nothing(queue, claim):
    job = queue.push("faults.work")
    first = claim()
    assert queue.nack(first, worker_id=WORKER, error="ValueError: no", delay=0)
    killed_at = time.time()  # the child that sent that verdict back, killed while idle
    second = claim()
    assert queue.ack(second, worker_id=WORKER)
    logs = line(first, "retry", "ValueError: no") + line(second, "done")
    report = check([job.pk], child_kills={os.getpid(): killed_at}, logs={WORKER: logs})
    assert (report.violations, report.child_killed, dict(report.extra_runs)) == ([], 0, {"error": 1})


def test_every_execution_of_a_live_worker_logs_one_outcome_and_only_the_acked_one_done(queue, claim):
    unlogged, misreported = queue.push("faults.work"), queue.push("faults.work")
    first = claim()
    assert queue.ack(first, worker_id=WORKER)
    second = claim()
    assert queue.nack(second, worker_id=WORKER, error="ValueError: no", delay=0)
    third = claim()
    assert queue.ack(third, worker_id=WORKER)
    # The first job's line is missing; the second's failed attempt says done and its ack says retry.
    logs = line(second, "done") + line(third, "retry")
    report = check([unlogged.pk, misreported.pk], logs={WORKER: logs})
    assert f"job {unlogged.pk}: attempt 1 on w logged no outcome" in violations(report)
    assert f"job {misreported.pk}: its acked attempt 2 logged retry, not done" in violations(report)
    assert f"job {misreported.pk}: attempt 1 logged done, but its ack is not the job's" in violations(report)
    # A killed worker may die before its lines: none is required of it.
    report = check([unlogged.pk], kills={WORKER: time.time()}, logs={WORKER: ""})
    assert report.violations == []


def test_a_job_handed_back_before_it_started_then_run_again_passes(queue, claim):
    job = queue.push("faults.work")
    unstarted = queue.pull(worker_id=WORKER)  # its child died before taking it: no execution
    assert unstarted is not None and queue.release(unstarted, worker_id=WORKER)
    again = claim()  # attempt 1 again, on the same worker, and this time it runs
    assert again.attempts == 1 and queue.ack(again, worker_id=WORKER)
    logs = line(again, "released") + line(again, "done")
    assert check([job.pk], logs={WORKER: logs}).violations == []
    # The run's own line still has to say done.
    logs = line(again, "released") + line(again, "released")
    assert f"job {job.pk}: its acked attempt 1 logged released, not done" in violations(
        check([job.pk], logs={WORKER: logs})
    )


def test_a_job_deleted_once_done_is_done_only_when_the_scenario_says_so(queue, claim):
    job = queue.push("faults.work")
    claimed = claim()
    assert queue.ack(claimed, worker_id=WORKER)
    Job.objects.filter(pk=job.pk).delete()  # as an ack with KEEP_COMPLETED = 0, or a prune, deletes it
    assert check([job.pk]).lost_ids == [job.pk]
    report = check([job.pk], deleted_done={job.pk: (claimed.claim_token, claimed.attempts)})
    assert (report.lost, report.done_once, report.violations) == (0, 1, [])


def test_a_job_left_waiting_is_stuck(queue, ledger_table):
    first = queue.push("faults.work")
    waiting = queue.push("faults.work", depends_on=[first])
    report = check([waiting.pk])
    assert (report.stuck_ids, report.lost) == ([waiting.pk], 0)
