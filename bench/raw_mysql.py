"""The MySQL/MariaDB baseline: mysqlclient doing only what a durable queue must there.

A job table of the queue's shape with the claim index InnoDB reads
(migration 0018's), no ORM, no Django: single-row inserts, a multi-row
INSERT, and the claim a queue on InnoDB makes (``SELECT … FOR UPDATE SKIP
LOCKED`` of a batch, ``UPDATE`` by id, commit) with its ack (``DELETE`` by
id). Our MariaDB figures are ratios against these, measured on the same server
in the same run.
"""

from __future__ import annotations

import time
from typing import Any
from urllib.parse import unquote, urlsplit

TABLE = "bench_raw_job"

SCHEMA = [
    f"DROP TABLE IF EXISTS {TABLE}",
    f"""CREATE TABLE {TABLE} (
    id bigint AUTO_INCREMENT PRIMARY KEY,
    queue varchar(63) COLLATE utf8mb4_bin NOT NULL DEFAULT 'default',
    payload longtext NOT NULL,
    priority smallint NOT NULL DEFAULT 0,
    rank_ smallint AS (-priority) VIRTUAL,
    status varchar(16) NOT NULL DEFAULT 'ready',
    run_at datetime(6) NOT NULL DEFAULT (UTC_TIMESTAMP(6)),
    locked_by varchar(255),
    locked_until datetime(6),
    claim_token bigint NOT NULL DEFAULT 0,
    INDEX {TABLE}_claim (status, queue, rank_, run_at, id)
) CHARSET utf8mb4""",
]

PICK = (
    f"SELECT id FROM {TABLE} FORCE INDEX ({TABLE}_claim) WHERE status = 'ready' AND queue = 'default' "
    "AND rank_ = 0 AND run_at <= UTC_TIMESTAMP(6) ORDER BY rank_, run_at, id LIMIT %s FOR UPDATE SKIP LOCKED"
)


def connect(url: str) -> Any:
    """A mysqlclient connection to the database of ``url`` (``mysql://user:password@host:port/name``)."""
    import MySQLdb

    parts = urlsplit(url)
    return MySQLdb.connect(
        host=parts.hostname or "127.0.0.1",
        port=parts.port or 3306,
        user=unquote(parts.username or "root"),
        password=unquote(parts.password or ""),
        database=parts.path.lstrip("/"),
        charset="utf8mb4",
        autocommit=True,
        init_command="SET SESSION TRANSACTION ISOLATION LEVEL READ COMMITTED",
    )


def reset(url: str) -> None:
    conn = connect(url)
    cursor = conn.cursor()
    for statement in SCHEMA:
        cursor.execute(statement)
    conn.close()


def insert_block(conn: Any, start: int, count: int) -> float:
    """Seconds for ``count`` single-row inserts on ``conn``, each its own transaction."""
    cursor = conn.cursor()
    started = time.perf_counter()
    for i in range(start, start + count):
        cursor.execute(f"INSERT INTO {TABLE} (payload) VALUES (%s)", [f'{{"i": {i}}}'])
    return time.perf_counter() - started


def insert_many(url: str, count: int, rows_per_statement: int = 500) -> float:
    """Jobs/s for ``count`` jobs inserted by multi-row INSERTs in one transaction."""
    reset(url)
    conn = connect(url)
    started = time.perf_counter()
    conn.begin()
    insert_rows(conn.cursor(), TABLE, "payload", "(%s)", count, rows_per_statement)
    conn.commit()
    rate = count / (time.perf_counter() - started)
    conn.close()
    return rate


def insert_rows(
    cursor: Any, table: str, columns: str, row: str, count: int, rows_per_statement: int = 500
) -> None:
    """Insert ``count`` rows of ``row`` (SQL whose one parameter is a small JSON payload) into
    ``table``'s ``columns``, ``rows_per_statement`` an INSERT."""
    for start in range(0, count, rows_per_statement):
        chunk = range(start, min(count, start + rows_per_statement))
        values = ", ".join([row] * len(chunk))
        cursor.execute(f"INSERT INTO {table} ({columns}) VALUES {values}", [f'{{"i": {i}}}' for i in chunk])


def fill(url: str, count: int) -> None:
    insert_many(url, count)


def claim_and_ack(url: str, count: int, batch: int) -> float:
    """Jobs/s of one connection claiming ``batch`` jobs a transaction and deleting them, ``count`` in all."""
    fill(url, count)
    conn = connect(url)
    rate = claim_and_ack_rate(
        conn,
        TABLE,
        PICK,
        f"UPDATE {TABLE} SET status = 'running', locked_by = 'raw', claim_token = claim_token + 1, "
        "locked_until = UTC_TIMESTAMP(6) + INTERVAL 30 SECOND WHERE id IN ({ids})",
        f"DELETE FROM {TABLE} WHERE id IN ({{ids}}) AND locked_by = 'raw'",
        count,
        batch,
    )
    conn.close()
    return rate


def claim_and_ack_rate(
    conn: Any, table: str, pick: str, claim: str, ack: str, count: int, batch: int
) -> float:
    """Jobs/s of ``conn`` taking ``batch`` jobs of ``table`` a transaction until ``count`` are done:
    ``pick`` (its parameter the batch) locks them, ``claim`` changes them and commits, then
    ``ack`` finishes them. ``claim`` and ``ack`` name the picked ids as ``{ids}``."""
    cursor = conn.cursor()
    cursor.execute(f"ANALYZE TABLE {table}")
    cursor.fetchall()
    done = 0
    started = time.perf_counter()
    while done < count:
        conn.begin()
        cursor.execute(pick, [batch])
        ids = [row[0] for row in cursor.fetchall()]
        if not ids:
            conn.commit()
            break
        marks = ", ".join(["%s"] * len(ids))
        cursor.execute(claim.format(ids=marks), ids)
        conn.commit()
        cursor.execute(ack.format(ids=marks), ids)
        done += len(ids)
    return done / (time.perf_counter() - started)


def drop(url: str) -> None:
    conn = connect(url)
    conn.cursor().execute(f"DROP TABLE IF EXISTS {TABLE}")
    conn.close()
