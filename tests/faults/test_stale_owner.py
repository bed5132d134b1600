"""A stale owner: worker A frozen with SIGSTOP past its claim, B runs the job, A wakes up.

A's every completion (extend, nack, fail, and its worker's ack) is refused and
changes nothing; B's ack succeeds. The same when A and B share one worker id:
the claim token fences them apart.
"""

from __future__ import annotations

import json
import signal
import sqlite3
import time
from datetime import timedelta
from pathlib import Path

import pytest
from django.db import connection
from django.utils import timezone

from django_jobqueue.models import DeadLetter, Job, Worker
from tests.worker_support import WorkerProcess, first_within, wait_until

from . import ledger
from .checker import EXPIRED, check

WORKER_ARGS = ("--visibility-timeout", "1", "--poll-interval", "0.1", "--concurrency", "1")


def write_lock_free() -> bool:
    """On SQLite, whether another process can take the write lock now (a frozen holder blocks it)."""
    if connection.vendor != "sqlite":
        return True
    probe = sqlite3.connect(connection.settings_dict["NAME"], timeout=0.5, isolation_level=None)
    try:
        probe.execute("BEGIN IMMEDIATE")
        probe.execute("ROLLBACK")
        return True
    except sqlite3.OperationalError:
        return False
    finally:
        probe.close()


def all_threads_stopped(pid: int) -> bool:
    """Whether every thread of process ``pid`` has come to a stop (state T in /proc)."""
    states = []
    for stat in Path(f"/proc/{pid}/task").glob("*/stat"):
        try:
            states.append(stat.read_text().rsplit(")", 1)[1].split()[0])
        except (FileNotFoundError, IndexError):
            continue  # a thread that ended as we read
    return bool(states) and all(state in ("T", "t") for state in states)


def freeze(worker: WorkerProcess) -> None:
    """SIGSTOP ``worker`` at a moment it holds no SQLite write lock.

    A process frozen inside a write transaction would block every writer on
    SQLite (PostgreSQL ends each autocommit statement on the server's side).
    SIGSTOP lands on each thread a moment after kill() returns, so the lock is
    probed only once every thread has stopped: probed sooner, a thread still
    running could take the lock just after the probe found it free.
    """
    for _ in range(20):
        worker.send(signal.SIGSTOP)
        if first_within(lambda: all_threads_stopped(worker.pid), 5) is None:
            pytest.fail(f"worker {worker.pid} did not stop within 5 s of SIGSTOP")
        if write_lock_free():
            return
        worker.send(signal.SIGCONT)
        time.sleep(0.05)
    pytest.fail("the worker held the write lock at every attempt to freeze it")


def runs(job_id: int) -> list[ledger.Execution]:
    return [run for run in ledger.executions() if run.job_id == job_id]


@pytest.mark.parametrize("shared_id", [False, True], ids=["own-ids", "one-shared-id"])
def test_a_stale_owner_is_refused_everything_and_the_new_owners_ack_succeeds(
    queue, fault_worker, tmp_path: Path, figures, shared_id: bool
):
    first_release, second_release = tmp_path / "release-a", tmp_path / "release-b"
    results = tmp_path / "results.json"
    job = queue.push(
        "faults.stale_probe",
        {"first_release": str(first_release), "second_release": str(second_release), "results": str(results)},
    )
    a_id, b_id = ("shared", "shared") if shared_id else ("owner-a", "owner-b")
    a = fault_worker(*WORKER_ARGS, "--worker-id", a_id)
    wait_until(lambda: runs(job.pk), 15, "A to start the job")
    freeze(a)
    frozen_at = time.monotonic()
    if shared_id:
        # A frozen worker stops beating its row; only once that row is stale may B take the id.
        Worker.objects.filter(worker_id=a_id).update(last_heartbeat=timezone.now() - timedelta(minutes=2))
    try:
        b = fault_worker(*WORKER_ARGS, "--worker-id", b_id)
        if first_within(lambda: len(runs(job.pk)) == 2, 20) is None:
            pytest.fail(
                "B did not claim the expired job and run it within 20 s; "
                f"SQLite write lock free: {write_lock_free()}; B's log:\n{b.log()}"
            )
        handed_over = time.monotonic() - frozen_at
    finally:
        a.send(signal.SIGCONT)
    before = Job.objects.get(pk=job.pk)
    assert (before.status, before.locked_by, before.attempts) == ("running", b_id, 2)

    first_release.touch()  # A, awake, tries every completion on its old claim
    wait_until(results.exists, 15, "A's attempts")
    a.wait_for_log(rf"job faults\.stale_probe id={job.pk} attempt=1/5 .* outcome=lost", 15)

    assert json.loads(results.read_text()) == {"extend": False, "nack": False, "fail": False}
    after = Job.objects.get(pk=job.pk)
    unchanged = ("status", "locked_by", "claim_token", "attempts", "last_error", "run_at", "result")
    assert {f: getattr(after, f) for f in unchanged} == {f: getattr(before, f) for f in unchanged}
    assert before.locked_until is not None and after.locked_until is not None
    assert after.locked_until < before.locked_until + timedelta(seconds=60), "A's hour was refused"
    assert not DeadLetter.objects.exists()
    assert [run.finished for run in runs(job.pk)] == [True, False], "B is still running it"

    second_release.touch()
    wait_until(lambda: Job.objects.filter(pk=job.pk, status="done").exists(), 15, "B's ack")
    done = Job.objects.get(pk=job.pk)
    assert (done.locked_by, done.attempts, done.result) == (b_id, 2, "attempt 2")
    b.wait_for_log(rf"job faults\.stale_probe id={job.pk} attempt=2/5 .* outcome=done")
    report = check([job.pk])
    figures(
        scenario="stale owner" + (" (one shared worker id)" if shared_id else ""),
        faults="A frozen with SIGSTOP past its 1 s claim, resumed while B runs the job",
        stale_calls_refused="extend, nack, fail, ack: 4 of 4",
        handed_over_after=round(handed_over, 1),
        **report.summary(),
    )
    report.assert_nothing_lost()
    assert (report.done_more, dict(report.extra_runs)) == (1, {EXPIRED: 1})
    for worker in (a, b):
        worker.send(signal.SIGTERM)
        assert worker.wait() == 0, worker.log()
