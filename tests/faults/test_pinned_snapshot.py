"""A long transaction pins a snapshot while jobs churn: claims keep working, and no
connection of the queue's sits idle in a transaction."""

from __future__ import annotations

import signal
import sqlite3
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest
from django.db import connection, connections

from django_jobqueue.models import Job
from tests.worker_support import wait_until

from .checker import check

JOBS = 2_000
IDLE_LIMIT = 1.0  # seconds


@pytest.fixture
def pinned_snapshot(ledger_table: None) -> Iterator[tuple[Any, int]]:
    """An open read transaction on its own connection; yields it and the done count it saw."""
    done_sql = f"SELECT COUNT(*) FROM {Job._meta.db_table} WHERE status = 'done'"
    if connection.vendor == "sqlite":
        # The standard library's driver: Django's own connection would BEGIN IMMEDIATE and
        # take the write lock, which is a different fault (see the getting-started guide).
        pinned: Any = sqlite3.connect(connection.settings_dict["NAME"], isolation_level=None)
        pinned.execute("BEGIN DEFERRED")
        seen = pinned.execute(done_sql).fetchone()[0]
        yield pinned, seen
        pinned.execute("ROLLBACK")
        pinned.close()
        return
    pinned = connections.create_connection("default")
    pinned.set_autocommit(False)
    with pinned.cursor() as cursor:
        cursor.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ")
        cursor.execute(done_sql)
        seen = cursor.fetchone()[0]
    yield pinned, seen
    pinned.rollback()
    pinned.close()


def done_seen_by(pinned: Any) -> int:
    sql = f"SELECT COUNT(*) FROM {Job._meta.db_table} WHERE status = 'done'"
    if isinstance(pinned, sqlite3.Connection):
        return int(pinned.execute(sql).fetchone()[0])
    with pinned.cursor() as cursor:
        cursor.execute(sql)
        return int(cursor.fetchone()[0])


def idle_in_transaction(excluded: set[int]) -> list[tuple[int, str, float]]:
    """Connections idle inside a transaction: ``(pid, last query, seconds idle)``."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT pid, query, EXTRACT(EPOCH FROM clock_timestamp() - state_change) "
            "FROM pg_stat_activity WHERE datname = current_database() "
            "AND state LIKE 'idle in transaction%%' AND pid <> pg_backend_pid()"
        )
        return [(pid, query, float(idle)) for pid, query, idle in cursor.fetchall() if pid not in excluded]


def test_claims_keep_working_under_a_pinned_snapshot(queue, fault_worker, pinned_snapshot, figures):
    pinned, seen_at_start = pinned_snapshot
    jobs = queue.push_many([("faults.work", {"seconds": 0.005, "n": n}, {}) for n in range(JOBS)])
    pinned_pid = None
    if connection.vendor == "postgresql":
        with pinned.cursor() as cursor:
            cursor.execute("SELECT pg_backend_pid()")
            pinned_pid = cursor.fetchone()[0]

    idle: list[tuple[int, str, float]] = []
    samples = 0
    churning = threading.Event()

    def sample() -> None:
        nonlocal samples
        try:
            while not churning.is_set():
                idle.extend(idle_in_transaction({pinned_pid} if pinned_pid else set()))
                samples += 1
                time.sleep(0.05)
        finally:
            connections.close_all()

    sampler = threading.Thread(target=sample)
    began = time.monotonic()
    workers = [fault_worker("--concurrency", "8", "--poll-interval", "0.1") for _ in range(2)]
    if connection.vendor == "postgresql":
        sampler.start()
    try:
        wait_until(lambda: Job.objects.filter(status="done").count() == JOBS, 240, "every job")
    finally:
        churning.set()
        if sampler.is_alive():
            sampler.join()
    elapsed = time.monotonic() - began

    assert done_seen_by(pinned) == seen_at_start == 0, "the snapshot stayed pinned throughout"
    # A transaction's BEGIN is seen now and then for a moment, before its next
    # statement arrives; a connection left idle in a transaction stays so.
    sitting = [sighting for sighting in idle if sighting[2] > IDLE_LIMIT]
    assert not sitting, f"connections idle in transaction: {sitting[:5]}"
    report = check([job.pk for job in jobs])
    figures(
        scenario="pinned snapshot",
        faults="a REPEATABLE READ (SQLite: an open read) transaction held open for the whole run",
        idle_in_transaction=(
            f"0 of {samples} samples over {IDLE_LIMIT:g} s; {len(idle)} momentary, "
            f"longest {max((s[2] for s in idle), default=0.0) * 1000:.1f} ms"
            if connection.vendor == "postgresql"
            else "n/a"
        ),
        drained_in=round(elapsed, 1),
        **report.summary(),
    )
    report.assert_nothing_lost()
    assert report.done_once == JOBS
    for worker in workers:
        worker.send(signal.SIGTERM)
    for worker in workers:
        assert worker.wait() == 0, worker.log()
