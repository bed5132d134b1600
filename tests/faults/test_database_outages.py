"""The database restarted under load, and worker connections killed every second.

On a throwaway server of the test's own (a PostgreSQL cluster, or a MariaDB
server on the MariaDB leg): the machine's main one is shared.
"""

from __future__ import annotations

import os
import random
import signal
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager
from pathlib import Path
from typing import Any

import pytest
from django.db import DatabaseError, connection, connections

from django_jobqueue import QueueClient
from django_jobqueue.models import LIVE_STATUSES, Job
from tests.pooler import kill_mysql_connections
from tests.worker_support import WorkerProcess, wait_until

from . import ledger
from .checker import KILL, check
from .cluster import DatabaseAlias, database_alias, throwaway_cluster, throwaway_mariadb
from .conftest import FAULT_JOBS

ALIAS = "faults_db"
JOBS = 3_000
CHAOS_FOR = 20.0
RESTART_AT = 8.0
WORKER_ARGS = ("--concurrency", "8", "--visibility-timeout", "2", "--poll-interval", "0.2")


def terminate_backends() -> int:
    """End every client connection to the queue's database but this one (PostgreSQL)."""
    with connections[ALIAS].cursor() as cursor:
        cursor.execute(
            "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity "
            "WHERE datname = current_database() AND backend_type = 'client backend' "
            "AND pid <> pg_backend_pid()"
        )
        return int(cursor.fetchone()[0])


def kill_connections() -> int:
    """End every client connection to the queue's database but this one (MariaDB)."""
    return kill_mysql_connections(connections[ALIAS])


# The scenario's server for each leg's database: how to start one, and how to cut its connections.
SERVERS: dict[str, tuple[Callable[[], AbstractContextManager[Any]], Callable[[], int], str]] = {
    "postgresql": (throwaway_cluster, terminate_backends, "pg_terminate_backend"),
    "mysql": (throwaway_mariadb, kill_connections, "KILL CONNECTION"),
}


@pytest.fixture
def server() -> Iterator[Any]:
    """A throwaway server of the leg's database, migrated; SQLite has no server to restart."""
    if connection.vendor not in SERVERS:
        pytest.skip("a database server to restart (PostgreSQL, MariaDB)")
    start, _cut, _name = SERVERS[connection.vendor]
    with start() as started:
        yield started


class Producer(threading.Thread):
    """Enqueues one job at a time until stopped, noting which enqueues reported success."""

    def __init__(self, database: DatabaseAlias) -> None:
        super().__init__()
        self.database = database
        self.ok: list[int] = []
        self.ok_numbers: list[int] = []
        self.failed_numbers: list[int] = []
        self.stopping = threading.Event()

    def run(self) -> None:
        client = QueueClient(self.database.attach())
        number = 100_000
        try:
            while not self.stopping.is_set():
                number += 1
                try:
                    job = client.push("faults.work", {"seconds": 0.01, "n": number})
                except DatabaseError:
                    self.failed_numbers.append(number)
                    connections[ALIAS].close()
                else:
                    self.ok.append(job.pk)
                    self.ok_numbers.append(number)
                self.stopping.wait(0.02)
        finally:
            connections[ALIAS].close()


@pytest.mark.slow
def test_workers_ride_out_a_restart_and_killed_connections(queue, server, tmp_path: Path, figures):
    _start, cut_connections, cut_name = SERVERS[connection.vendor]
    with database_alias(ALIAS, server.url()) as database:
        ledger.create(ALIAS)
        rng = random.Random(13)
        client = QueueClient(ALIAS)
        jobs = client.push_many(
            [("faults.work", {"seconds": rng.uniform(0.05, 0.3), "n": n}, {}) for n in range(JOBS)]
        )
        env = {
            **os.environ,
            "DATABASE_URL": server.url(),
            "JOBQUEUE_MODULES": FAULT_JOBS,
            "PYTHONUNBUFFERED": "1",
        }
        workers = [
            WorkerProcess([*WORKER_ARGS, "--worker-id", f"db-{n}"], tmp_path / f"worker-{n}.log", env)
            for n in range(3)
        ]
        producer = Producer(database)
        try:
            for worker in workers:
                worker.wait_started(30)
            producer.start()
            began = time.monotonic()
            terminated = rounds = 0
            outage: tuple[float, float] | None = None
            while time.monotonic() - began < CHAOS_FOR:
                time.sleep(1.0)  # the chaos's own pace
                if outage is None and time.monotonic() - began >= RESTART_AT:
                    down = time.time()
                    server.crash()  # no checkpoint: recovery from the log at the start
                    time.sleep(1.0)
                    server.start()
                    outage = (down, time.time())
                    connections[ALIAS].close()
                    continue
                try:
                    terminated += cut_connections()
                    rounds += 1
                except DatabaseError:
                    connections[ALIAS].close()  # ours was cut too, by the restart
            producer.stopping.set()
            producer.join()
            all_ids = [job.pk for job in jobs] + producer.ok
            live = Job.objects.using(ALIAS).filter(status__in=LIVE_STATUSES)
            wait_until(lambda: not live.exists(), 240, "every job to be done or dead-lettered")
            drained = time.monotonic() - began
            assert all(worker.proc.poll() is None for worker in workers), "no worker died"
            assert outage is not None
            recovered_after = (
                min(
                    run.ended_at
                    for run in ledger.executions(ALIAS)
                    if run.ended_at and run.ended_at > outage[1]
                )
                - outage[1]
            )
            report = check(all_ids, using=ALIAS)
            committed_anyway = Job.objects.using(ALIAS).filter(payload__n__in=producer.failed_numbers).count()
            logs = "".join(worker.log() for worker in workers)
            figures(
                scenario=f"{'PostgreSQL' if connection.vendor == 'postgresql' else 'MariaDB'} restarted, "
                "connections killed",
                faults=(
                    f"{rounds} rounds of {cut_name} ({terminated} connections) over {CHAOS_FOR:g} s, "
                    f"one crash-restart (the server killed at once, down {outage[1] - outage[0]:.1f} s)"
                ),
                enqueues_reported_ok=len(producer.ok),
                enqueues_raised=len(producer.failed_numbers),
                raised_but_committed=committed_anyway,
                first_job_done_after_restart=round(recovered_after, 1),
                outcomes_unrecorded=logs.count("outcome=unrecorded"),
                drained_in=round(drained, 1),
                **report.summary(),
            )
            report.assert_nothing_lost()
            assert report.done_once + report.done_more == len(all_ids)
            assert report.dead == 0
            assert KILL not in report.extra_runs
            assert producer.failed_numbers, "some enqueues met the outage and raised"
            assert "database reachable again" in logs
            for worker in workers:
                worker.send(signal.SIGTERM)
            for worker in workers:
                assert worker.wait(30) == 0, worker.log()
        finally:
            producer.stopping.set()
            for worker in workers:
                worker.close()
