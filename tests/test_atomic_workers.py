"""Atomic jobs in real ``runworker`` processes: both pools, a timeout, a claim outliving its
visibility timeout, and SIGKILLs (PostgreSQL) that leave exactly one effect per job."""

from __future__ import annotations

import random
import signal
import time
from collections.abc import Iterator

import pytest
from django.db import connection

from django_jobqueue import QueueClient
from django_jobqueue.models import Job
from tests.jobs_for_workers import events
from tests.worker_support import wait_until

from . import atomic_jobs
from .atomic_jobs import effects

MODULES = {"JOBQUEUE_MODULES": "tests.atomic_jobs"}


@pytest.fixture
def effects_table(queue: QueueClient) -> Iterator[None]:
    atomic_jobs.create_table()
    yield
    atomic_jobs.drop_table()


def done(count: int) -> bool:
    return Job.objects.filter(status="done").count() == count


@pytest.mark.parametrize("pool", ["threads", "processes"])
def test_a_worker_runs_atomic_jobs_and_rolls_back_a_timed_out_attempt(
    queue, effects_table, start_worker, events_path, pool
):
    credits = [queue.push("atomic.credit", {"amount": n}) for n in range(5)]
    overrun = queue.push("atomic.overruns", {"seconds": 5, "path": events_path})
    worker = start_worker("--pool", pool, "--concurrency", "2", "--poll-interval", "0.1", env=MODULES)
    wait_until(lambda: done(6), 30, "every job to be done")
    assert effects() == {job.pk: 1 for job in [*credits, overrun]}
    row = Job.objects.get(pk=overrun.pk)
    assert row.attempts == 2 and "timed out" in row.last_error
    assert len(events(events_path)) == 2, "the timed-out attempt ran, and its effect was rolled back"
    worker.send(signal.SIGTERM)
    assert worker.wait() == 0, worker.log()


def test_the_heartbeat_keeps_an_atomic_job_past_its_visibility_timeout(queue, effects_table, start_worker):
    # The job's open transaction must not keep the heartbeat (nor the ticker) from its work.
    slow = queue.push("atomic.credit", {"seconds": 4})
    worker = start_worker("--visibility-timeout", "1", "--poll-interval", "0.1", env=MODULES)
    wait_until(lambda: done(1), 30, "the job to be done")
    row = Job.objects.get(pk=slow.pk)
    assert row.attempts == 1, "its claim was never rescued"
    assert effects() == {slow.pk: 1}
    worker.send(signal.SIGTERM)
    assert worker.wait() == 0, worker.log()


@pytest.mark.slow
def test_sigkilled_atomic_workers_leave_exactly_one_effect_per_job(
    queue, effects_table, start_worker, events_path, postgresql_only
):
    jobs_count, workers_count, kill_every, chaos_for = 500, 3, 1.0, 10.0
    rng = random.Random(18)
    jobs = queue.push_many(
        [
            ("atomic.credit", {"seconds": rng.uniform(0.2, 0.5), "path": events_path}, {})
            for _ in range(jobs_count)
        ]
    )
    args = ("--concurrency", "4", "--visibility-timeout", "2", "--poll-interval", "0.1")
    workers = [start_worker(*args, env=MODULES) for _ in range(workers_count)]
    began = time.monotonic()
    kills = 0
    while time.monotonic() - began < chaos_for:
        time.sleep(kill_every)
        slot = kills % workers_count
        workers[slot].wait_started()  # a kill meant to land among running jobs, not in a boot
        workers[slot].kill()
        kills += 1
        workers[slot] = start_worker(*args, env=MODULES)
    wait_until(lambda: done(jobs_count), 120, "every job to be done")
    # The ledger: every job ran at least once, some more (their runs cut by a kill), and
    # each left exactly one committed effect, the one of the run whose ack committed.
    runs: dict[int, int] = {}
    for event in events(events_path):
        runs[event["job"]] = runs.get(event["job"], 0) + 1
    assert set(runs) == {job.pk for job in jobs}
    assert sum(runs.values()) > jobs_count, "the kills hit running jobs"
    assert effects() == {job.pk: 1 for job in jobs}
    assert Job.objects.filter(pk__in=[job.pk for job in jobs], status="done").count() == jobs_count
    # The one effect kept is the one of the claim that acked: written in the same transaction.
    with connection.cursor() as cursor:
        cursor.execute(f"SELECT job_id, claim_token FROM {atomic_jobs.TABLE}")
        kept = dict(cursor.fetchall())
    assert kept == dict(Job.objects.filter(pk__in=kept).values_list("pk", "claim_token"))
    for worker in workers:
        worker.send(signal.SIGTERM)
    for worker in workers:
        worker.wait()
