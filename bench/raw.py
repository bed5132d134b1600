"""The baseline: raw psycopg doing only what a durable queue must.

Insert a job, claim it with ``UPDATE ... FOR UPDATE SKIP LOCKED RETURNING``, ack
it. No ORM, no Django, no validation: the database's own limit on this machine,
against which our figures are ratios.
"""

from __future__ import annotations

import statistics
import threading
import time
from collections.abc import Callable

import psycopg

TABLE = "bench_raw_job"

SCHEMA = f"""
DROP TABLE IF EXISTS {TABLE};
CREATE TABLE {TABLE} (
    id bigserial PRIMARY KEY,
    queue text NOT NULL DEFAULT 'default',
    payload jsonb NOT NULL,
    priority smallint NOT NULL DEFAULT 0,
    status text NOT NULL DEFAULT 'ready',
    run_at timestamptz NOT NULL DEFAULT now(),
    locked_by text,
    locked_until timestamptz,
    claim_token bigint NOT NULL DEFAULT 0
);
CREATE INDEX {TABLE}_claim ON {TABLE} (queue, priority DESC, run_at, id) WHERE status = 'ready';
"""

CLAIM = f"""
UPDATE {TABLE} SET status = 'running', locked_by = 'raw', claim_token = claim_token + 1,
       locked_until = now() + interval '30 seconds'
WHERE id IN (SELECT id FROM {TABLE} WHERE status = 'ready' AND queue = 'default' AND run_at <= now()
             ORDER BY priority DESC, run_at, id LIMIT %s FOR UPDATE SKIP LOCKED)
RETURNING id, claim_token, payload
"""

ACK = f"""
DELETE FROM {TABLE} WHERE status = 'running' AND locked_by = 'raw'
AND (id, claim_token) IN (SELECT * FROM unnest(%s::bigint[], %s::bigint[]))
"""


def connect(conninfo: str) -> psycopg.Connection:
    return psycopg.connect(conninfo, autocommit=True)


def reset(conninfo: str) -> None:
    with connect(conninfo) as conn:
        conn.execute(SCHEMA)


def insert_one_per_transaction(conninfo: str, count: int) -> float:
    """Jobs/s for ``count`` inserts, each its own transaction (a web request's enqueue)."""
    reset(conninfo)
    with connect(conninfo) as conn:
        started = time.perf_counter()
        for i in range(count):
            conn.execute(f"INSERT INTO {TABLE} (payload) VALUES (%s::jsonb)", [f'{{"i": {i}}}'])
        return count / (time.perf_counter() - started)


def insert_block(conn: psycopg.Connection, start: int, count: int) -> float:
    """Seconds for ``count`` inserts on ``conn``, each its own transaction."""
    started = time.perf_counter()
    for i in range(start, start + count):
        conn.execute(f"INSERT INTO {TABLE} (payload) VALUES (%s::jsonb)", [f'{{"i": {i}}}'])
    return time.perf_counter() - started


def copy_many(conninfo: str, count: int) -> float:
    """Jobs/s for ``count`` jobs written with one COPY."""
    reset(conninfo)
    with connect(conninfo) as conn:
        started = time.perf_counter()
        with conn.transaction(), conn.cursor() as cur, cur.copy(f"COPY {TABLE} (payload) FROM STDIN") as copy:
            for i in range(count):
                copy.write_row([f'{{"i": {i}}}'])
        return count / (time.perf_counter() - started)


def copy_ready_rows(conninfo: str, table: str, columns: list[str], rows: list[tuple[object, ...]]) -> float:
    """Jobs/s for one COPY of ``rows``, made beforehand, into ``table`` (which the caller emptied).

    Run against the job table with the rows ``enqueue_many`` writes, this is
    what that table's columns and indexes let a batch reach with no Python
    work per job at all: the ceiling of ``enqueue_many`` on this schema.
    """
    statement = f"COPY {table} ({', '.join(columns)}) FROM STDIN"
    with connect(conninfo) as conn:
        started = time.perf_counter()
        with conn.transaction(), conn.cursor() as cur, cur.copy(statement) as copy:
            for row in rows:
                copy.write_row(row)
        return len(rows) / (time.perf_counter() - started)


def fill(conninfo: str, count: int) -> None:
    reset(conninfo)
    with connect(conninfo) as conn:
        conn.execute(
            f"INSERT INTO {TABLE} (payload) SELECT jsonb_build_object('i', g) FROM generate_series(1, %s) g",
            [count],
        )
        conn.execute(f"VACUUM ANALYZE {TABLE}")


def claim_and_ack(conninfo: str, count: int, batch: int) -> float:
    """Jobs/s for draining ``count`` ready jobs, claiming and acking ``batch`` at a time."""
    fill(conninfo, count)
    done = 0
    with connect(conninfo) as conn:
        started = time.perf_counter()
        while done < count:
            rows = conn.execute(CLAIM, [batch]).fetchall()
            if not rows:
                break
            conn.execute(ACK, [[r[0] for r in rows], [r[1] for r in rows]])
            done += len(rows)
        return done / (time.perf_counter() - started)


def listen_pickup(conninfo: str, jobs: int, gap: float) -> list[float]:
    """Seconds from an insert's commit to an idle LISTENing worker holding the claim."""
    reset(conninfo)
    latencies: list[float] = []
    committed: dict[int, float] = {}
    ready = threading.Event()

    claimed: dict[int, float] = {}

    def worker() -> None:
        with connect(conninfo) as conn:
            conn.execute("LISTEN bench_raw")
            ready.set()
            deadline = time.monotonic() + gap * jobs + 10
            while len(claimed) < jobs and time.monotonic() < deadline:
                # Wait for one notification, then claim outside the notifies() generator.
                for _ in conn.notifies(stop_after=1, timeout=1.0):
                    pass
                for row in conn.execute(CLAIM, [10]).fetchall():
                    # The producer notes the commit time just after this claim may have run.
                    claimed[row[0]] = time.perf_counter()

    thread = threading.Thread(target=worker)
    thread.start()
    ready.wait()
    with connect(conninfo) as producer:
        for i in range(jobs):
            time.sleep(gap)
            with producer.transaction():
                row = producer.execute(
                    f"INSERT INTO {TABLE} (payload) VALUES (%s::jsonb) RETURNING id", [f'{{"i": {i}}}']
                ).fetchone()
                assert row is not None
                producer.execute("SELECT pg_notify('bench_raw', 'default')")
                job_id = row[0]
            committed[job_id] = time.perf_counter()
    thread.join()
    latencies.extend(max(0.0, claimed[job_id] - committed[job_id]) for job_id in claimed)
    return latencies


def percentile(values: list[float], fraction: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(fraction * len(ordered)))]


def median_of(runs: int, measure: Callable[[], float]) -> tuple[float, list[float]]:
    samples = [measure() for _ in range(runs)]
    return statistics.median(samples), samples
