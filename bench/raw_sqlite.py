"""The SQLite baseline: the standard library's sqlite3 doing only what a durable queue must.

The same pragmas as the example project (WAL, ``synchronous=NORMAL``), one
writer, no ORM: the database's own limit, against which our SQLite figures are
ratios.
"""

from __future__ import annotations

import sqlite3
import time
from pathlib import Path

TABLE = "bench_raw_job"

SCHEMA = f"""
DROP TABLE IF EXISTS {TABLE};
CREATE TABLE {TABLE} (
    id integer PRIMARY KEY AUTOINCREMENT,
    queue text NOT NULL DEFAULT 'default',
    payload text NOT NULL,
    priority smallint NOT NULL DEFAULT 0,
    status text NOT NULL DEFAULT 'ready',
    run_at text NOT NULL DEFAULT (strftime('%Y-%m-%d %H:%M:%f', 'now')),
    locked_by text,
    locked_until text,
    claim_token bigint NOT NULL DEFAULT 0
);
CREATE INDEX {TABLE}_claim ON {TABLE} (queue, priority DESC, run_at, id) WHERE status = 'ready';
"""

CLAIM = f"""
UPDATE {TABLE} SET status = 'running', locked_by = 'raw', claim_token = claim_token + 1,
       locked_until = strftime('%Y-%m-%d %H:%M:%f', 'now', '+30 seconds')
WHERE id IN (SELECT id FROM {TABLE} WHERE status = 'ready' AND queue = 'default'
             AND run_at <= strftime('%Y-%m-%d %H:%M:%f', 'now')
             ORDER BY priority DESC, run_at, id LIMIT ?)
RETURNING id, claim_token, payload
"""


def connect(path: Path) -> sqlite3.Connection:
    conn = sqlite3.connect(path, isolation_level=None, timeout=30)
    conn.execute("PRAGMA journal_mode=WAL")
    conn.execute("PRAGMA synchronous=NORMAL")
    return conn


def reset(path: Path) -> None:
    conn = connect(path)
    conn.executescript(SCHEMA)
    conn.close()


def insert_block(conn: sqlite3.Connection, start: int, count: int) -> float:
    """Seconds for ``count`` inserts on ``conn``, each its own transaction."""
    started = time.perf_counter()
    for i in range(start, start + count):
        conn.execute(f"INSERT INTO {TABLE} (payload) VALUES (?)", [f'{{"i": {i}}}'])
    return time.perf_counter() - started


def insert_many(path: Path, count: int) -> float:
    """Jobs/s for ``count`` jobs inserted by one ``executemany`` in one transaction."""
    reset(path)
    conn = connect(path)
    started = time.perf_counter()
    conn.execute("BEGIN IMMEDIATE")
    conn.executemany(f"INSERT INTO {TABLE} (payload) VALUES (?)", ([f'{{"i": {i}}}'] for i in range(count)))
    conn.execute("COMMIT")
    rate = count / (time.perf_counter() - started)
    conn.close()
    return rate


def claim_and_ack(path: Path, count: int, batch: int) -> float:
    reset(path)
    conn = connect(path)
    conn.execute("BEGIN IMMEDIATE")
    conn.executemany(f"INSERT INTO {TABLE} (payload) VALUES (?)", ([f'{{"i": {i}}}'] for i in range(count)))
    conn.execute("COMMIT")
    conn.execute("ANALYZE")
    done = 0
    started = time.perf_counter()
    while done < count:
        rows = conn.execute(CLAIM, [batch]).fetchall()
        if not rows:
            break
        pairs = ", ".join(["(?, ?)"] * len(rows))
        conn.execute(
            f"DELETE FROM {TABLE} WHERE status = 'running' AND locked_by = 'raw' "
            f"AND (id, claim_token) IN (VALUES {pairs})",
            [value for row in rows for value in row[:2]],
        )
        done += len(rows)
    rate = done / (time.perf_counter() - started)
    conn.close()
    return rate
