"""Our side of each measurement, in a process set up with the example project's settings."""

from __future__ import annotations

import time
from pathlib import Path

from django.db import connection
from django.utils import timezone

from django_jobqueue import enqueue, enqueue_many
from django_jobqueue.models import DeadLetter, Job, Worker
from django_jobqueue.queue.rows import JOB_COLUMNS

from .worker import LongRunningWorker

JOB = Job._meta.db_table


def reset() -> None:
    """Empty the queue's tables."""
    tables = [Job._meta.db_table, DeadLetter._meta.db_table, Worker._meta.db_table]
    with connection.cursor() as cursor:
        if connection.vendor == "postgresql":
            cursor.execute(f"TRUNCATE {', '.join(tables)} RESTART IDENTITY")
        elif connection.vendor == "mysql":
            for table in tables:
                cursor.execute(f"TRUNCATE TABLE {table}")
        else:
            for table in tables:
                cursor.execute(f"DELETE FROM {table}")


def analyze() -> None:
    """Vacuum and analyze the job table, as autovacuum would after a bulk load."""
    statement = {"postgresql": f"VACUUM ANALYZE {JOB}", "mysql": f"ANALYZE TABLE {JOB}"}
    with connection.cursor() as cursor:
        cursor.execute(statement.get(connection.vendor, f"ANALYZE {JOB}"))


def enqueue_block(start: int, count: int) -> float:
    """Seconds for ``count`` calls of ``enqueue()``, each its own transaction."""
    started = time.perf_counter()
    for i in range(start, start + count):
        enqueue("bench.noop", {"i": i})
    return time.perf_counter() - started


def enqueue_batch(count: int) -> float:
    """Jobs/s of one ``enqueue_many()`` of ``count`` jobs."""
    reset()
    items = [("bench.noop", {"i": i}) for i in range(count)]
    started = time.perf_counter()
    enqueue_many(items)
    return count / (time.perf_counter() - started)


def ready_rows(count: int) -> tuple[list[str], list[tuple[object, ...]]]:
    """The columns and rows ``enqueue_many`` writes for ``count`` jobs (ids left to the table), ready-made."""
    now = timezone.now()
    row = {
        "name": "bench.noop",
        "queue": "default",
        "priority": 0,
        "status": "ready",
        "attempts": 0,
        "max_attempts": 3,
        "visibility_timeout": 30.0,
        "run_at": now,
        "claim_token": 0,
        "last_error": "",
        "last_traceback": "",
        "created_at": now,
        "task_backend": "",
    }
    return [*row, "payload"], [(*row.values(), f'{{"i":{i}}}') for i in range(count)]


def fill(count: int, seed: int = 10_000) -> None:
    """Make ``count`` ready jobs: ``seed`` through ``enqueue_many``, the rest copied from them in SQL."""
    reset()
    enqueue_many([("bench.noop", {"i": i}) for i in range(min(seed, count))])
    copy_until(count, have=min(seed, count))


def copy_until(count: int, have: int) -> None:
    """Copy the job table's ``have`` rows into itself (their columns but the id) until it holds ``count``."""
    columns = ", ".join(column for column in JOB_COLUMNS if column != "id")
    with connection.cursor() as cursor:
        while have < count:
            more = min(have, count - have)
            cursor.execute(f"INSERT INTO {JOB} ({columns}) SELECT {columns} FROM {JOB} LIMIT %s", [more])
            have += more
    analyze()


def pickup(env: dict[str, str], jobs: int, gap: float, tmp: Path, ready: str | None = None) -> list[float]:
    """Seconds from an ``enqueue()``'s commit to an idle worker starting the job.

    ``ready``: a pattern of the worker's log to wait for before the first job
    (its listener's verdict on its probe); without it, a second after its start line.
    """
    reset()
    path = tmp / "stamps.txt"
    path.unlink(missing_ok=True)
    worker = LongRunningWorker([], env)
    try:
        worker.wait_started()
        if ready is None:
            time.sleep(1.0)  # the listener connects in its own thread after the start line
        else:
            worker.wait_for_log(ready)
            time.sleep(0.2)  # the claiming round its listener's verdict may have started is over
        committed: dict[int, float] = {}
        for n in range(jobs):
            time.sleep(gap)
            enqueue("bench.stamp", {"path": str(path), "n": n})
            committed[n] = time.time()
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            lines = path.read_text().splitlines() if path.exists() else []
            if len(lines) >= jobs:
                break
            time.sleep(0.05)
    finally:
        worker.stop()
    latencies = []
    for line in path.read_text().splitlines():
        number, at = line.split()
        latencies.append(max(0.0, float(at) - committed[int(number)]))
    return latencies
