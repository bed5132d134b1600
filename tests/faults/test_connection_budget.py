"""Two workers over the server's connection limit: they back off instead of burning attempts.

The role the workers log in as may hold 12 connections; two ``--concurrency 8``
workers need about 24 when every slot's job queries. A slot that cannot
connect must sit out with its job, hand back a job that could not start and
claim nothing meanwhile, so that no attempt is counted for a run that never
happened and nothing expires while both workers live.
"""

from __future__ import annotations

import os
import resource
import signal
from collections import Counter
from collections.abc import Iterator
from urllib.parse import quote

import pytest
from django.db import connection

from django_jobqueue import QueueClient, enqueue_many
from django_jobqueue.models import DeadLetter, Job
from tests.worker_support import WorkerProcess, wait_until

from . import ledger

JOBS = 300
CONNECTION_LIMIT = 12
WORKER_ARGS = ("--concurrency", "8", "--visibility-timeout", "2", "--poll-interval", "0.2")


@pytest.fixture
def limited_role(postgresql_only: None, ledger_table: None) -> Iterator[str]:
    """A login role on the test database that may hold at most ``CONNECTION_LIMIT`` connections."""
    role = f"{connection.settings_dict['NAME']}_budget"
    with connection.cursor() as cursor:
        _drop_role(cursor, role)
        cursor.execute(f"CREATE ROLE {role} LOGIN CONNECTION LIMIT {CONNECTION_LIMIT}")
        cursor.execute(f"GRANT ALL ON ALL TABLES IN SCHEMA public TO {role}")
        cursor.execute(f"GRANT ALL ON ALL SEQUENCES IN SCHEMA public TO {role}")
    yield role
    with connection.cursor() as cursor:
        _drop_role(cursor, role)


def _drop_role(cursor, role: str) -> None:
    cursor.execute("SELECT 1 FROM pg_roles WHERE rolname = %s", [role])
    if cursor.fetchone():
        cursor.execute(f"DROP OWNED BY {role}")
        cursor.execute(f"DROP ROLE {role}")


def url_as(role: str) -> str:
    settings = connection.settings_dict
    host = settings.get("HOST") or "127.0.0.1"
    port = f":{settings['PORT']}" if settings.get("PORT") else ""
    return f"postgres://{role}@{host}{port}/{quote(settings['NAME'])}"


def attempts_beyond_runs(jobs: list[Job]) -> dict[int, tuple[int, int]]:
    """The jobs whose attempts outnumber their runs in the ledger: ``{id: (attempts, runs)}``."""
    runs = Counter(execution.job_id for execution in ledger.executions())
    attempts = dict(Job.objects.filter(pk__in=[job.pk for job in jobs]).values_list("pk", "attempts"))
    return {pk: (count, runs[pk]) for pk, count in attempts.items() if count > runs[pk]}


@pytest.mark.slow
def test_workers_over_the_connection_limit_back_off_without_burning_attempts(
    queue: QueueClient, limited_role: str, fault_worker, figures
):
    jobs = enqueue_many([("faults.work", {"seconds": 0.01, "n": n}) for n in range(JOBS)])
    env = {"DATABASE_URL": url_as(limited_role)}
    workers = [fault_worker(*WORKER_ARGS, "--worker-id", f"budget-{n}", env=env) for n in range(2)]

    wait_until(
        lambda: Job.objects.filter(status="done").count() + DeadLetter.objects.count() == JOBS,
        60,
        "every job to finish",
    )
    for worker in workers:
        worker.send(signal.SIGTERM)
    codes = [worker.wait(30) for worker in workers]

    burnt = attempts_beyond_runs(jobs)
    logs = "".join(worker.log() for worker in workers)
    figures(jobs=JOBS, runs=len(ledger.executions()), dead=DeadLetter.objects.count(), burnt=len(burnt))
    assert codes == [0, 0]
    assert DeadLetter.objects.count() == 0
    assert not burnt, f"attempts counted beyond the runs (attempts, runs): {list(burnt.items())[:10]}"
    assert "stopped without finishing" not in "".join(Job.objects.values_list("last_error", flat=True))
    assert "backing off" in logs


def open_files(worker: WorkerProcess) -> int:
    """One more than the highest file descriptor the worker holds open."""
    return max(int(fd) for fd in os.listdir(f"/proc/{worker.pid}/fd")) + 1


def test_slots_that_cannot_open_a_connection_sit_out_and_hand_back(
    queue: QueueClient, sqlite_only: None, fault_worker
):
    """SQLite has no connection limit: the worker's file descriptors run out instead."""
    worker = fault_worker("--concurrency", "4", "--visibility-timeout", "2", "--poll-interval", "0.1")
    worker.wait_started()
    # The claimer, heartbeat and ticker hold their connections; a slot cannot open one.
    limits = resource.prlimit(worker.pid, resource.RLIMIT_NOFILE)
    resource.prlimit(worker.pid, resource.RLIMIT_NOFILE, (open_files(worker), limits[1]))
    jobs = enqueue_many([("faults.work", {"seconds": 0.05, "n": n}) for n in range(40)])

    worker.wait_for_log(r"backing off|could not record its outcome", 20)
    resource.prlimit(worker.pid, resource.RLIMIT_NOFILE, limits)
    wait_until(
        lambda: Job.objects.filter(status="done").count() + DeadLetter.objects.count() == len(jobs),
        30,
        "every job to finish",
    )
    worker.send(signal.SIGTERM)

    assert worker.wait() == 0
    assert DeadLetter.objects.count() == 0
    assert not attempts_beyond_runs(jobs)
    assert "backing off" in worker.log()
    assert "outcome=released" in worker.log()
