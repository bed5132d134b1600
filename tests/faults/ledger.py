"""The ledger: one row per execution of a fault-suite job, written by the job itself.

Each row is written by its own autocommit statement on the worker thread's
connection, outside any transaction of the queue, so an execution is recorded
even when its worker is killed a moment later: a row whose ``ended_at`` is NULL
is an execution that never reached its end.

An atomic job's connection is inside the job's transaction, whose writes a
kill takes back: such a job keeps its rows *beside* the database, in a SQLite
file of its own (``beside_*``), each write committed at once, and the test
copies them into the ledger table before it judges the run (``take_in``). A
second connection to the database would not do on SQLite, where it would
wait for the write lock the job's own transaction holds.
"""

from __future__ import annotations

import os
import sqlite3
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from django.db import connections

from tests import own_tables

TABLE = "faults_ledger"

_DDL = {
    "postgresql": (
        f"CREATE TABLE IF NOT EXISTS {TABLE} (id BIGSERIAL PRIMARY KEY, job_id BIGINT NOT NULL, "
        "claim_token BIGINT NOT NULL, attempt INTEGER NOT NULL, worker VARCHAR(255) NOT NULL, "
        "pid INTEGER NOT NULL, started_at DOUBLE PRECISION NOT NULL, ended_at DOUBLE PRECISION, "
        "note TEXT NOT NULL DEFAULT '')"
    ),
    "mysql": (
        f"CREATE TABLE IF NOT EXISTS {TABLE} (id BIGINT AUTO_INCREMENT PRIMARY KEY, job_id BIGINT NOT NULL, "
        "claim_token BIGINT NOT NULL, attempt INTEGER NOT NULL, worker VARCHAR(255) NOT NULL, "
        "pid INTEGER NOT NULL, started_at DOUBLE NOT NULL, ended_at DOUBLE, "
        "note VARCHAR(2000) NOT NULL DEFAULT '')"
    ),
    "sqlite": (
        f"CREATE TABLE IF NOT EXISTS {TABLE} (id INTEGER PRIMARY KEY AUTOINCREMENT, "
        "job_id BIGINT NOT NULL, claim_token BIGINT NOT NULL, attempt INTEGER NOT NULL, "
        "worker VARCHAR(255) NOT NULL, pid INTEGER NOT NULL, started_at REAL NOT NULL, "
        "ended_at REAL, note TEXT NOT NULL DEFAULT '')"
    ),
}


@dataclass(frozen=True)
class Execution:
    """One run of a job's function, as its ledger row tells it."""

    id: int
    job_id: int
    claim_token: int
    attempt: int
    worker: str
    pid: int
    started_at: float
    ended_at: float | None
    note: str

    @property
    def finished(self) -> bool:
        return self.ended_at is not None


def create(using: str = "default") -> None:
    """Create the ledger table on ``using`` (if missing) and empty it."""
    own_tables.create(TABLE, _DDL, using)


def drop(using: str = "default") -> None:
    own_tables.drop(TABLE, using)


def start(job_id: int, claim_token: int, attempt: int, worker: str, using: str = "default") -> int:
    """Record that an execution starts; return its ledger id."""
    connection = connections[using]
    # MySQL has no INSERT … RETURNING; MariaDB does, but the driver's last id is enough.
    returning = "" if connection.vendor == "mysql" else " RETURNING id"
    with connection.cursor() as cursor:
        cursor.execute(
            f"INSERT INTO {TABLE} (job_id, claim_token, attempt, worker, pid, started_at) "
            f"VALUES (%s, %s, %s, %s, %s, %s){returning}",
            [job_id, claim_token, attempt, worker, os.getpid(), time.time()],
        )
        return int(cursor.fetchone()[0] if returning else cursor.lastrowid)


def end(entry: int, note: str = "", using: str = "default") -> None:
    """Record that the execution ``entry`` reached its end."""
    with connections[using].cursor() as cursor:
        cursor.execute(
            f"UPDATE {TABLE} SET ended_at = %s, note = %s WHERE id = %s", [time.time(), note, entry]
        )


def executions(using: str = "default") -> list[Execution]:
    return _select("", using)


def unended(using: str = "default") -> list[Execution]:
    """The executions begun and not ended: running now, or cut short by a kill."""
    return _select("WHERE ended_at IS NULL", using)


def slots_mid_job(
    workers: Sequence[tuple[str, object]], using: str = "default", spare: frozenset[int] = frozenset()
) -> list[int]:
    """The slots of ``workers`` (pairs of a worker id and its process) whose worker is mid-job.

    A worker running a job of ``spare`` (job ids) is left out.
    """
    runs = unended(using)
    spared = {run.worker for run in runs if run.job_id in spare}
    running = {run.worker for run in runs} - spared
    return [slot for slot, (worker_id, _) in enumerate(workers) if worker_id in running]


_BESIDE_DDL = (
    f"CREATE TABLE IF NOT EXISTS {TABLE} (id INTEGER PRIMARY KEY AUTOINCREMENT, "
    "job_id INTEGER NOT NULL, claim_token INTEGER NOT NULL, attempt INTEGER NOT NULL, "
    "worker TEXT NOT NULL, pid INTEGER NOT NULL, started_at REAL NOT NULL, ended_at REAL, "
    "note TEXT NOT NULL DEFAULT '')"
)
_COLUMNS = "job_id, claim_token, attempt, worker, pid, started_at, ended_at, note"
# One connection per thread and file: a connection of another thread, or of the parent a process
# was forked from, is not this thread's to use.
_beside = threading.local()


def create_beside(path: str) -> None:
    """Create the ledger file ``path``, empty, for ``beside_start`` and the rest."""
    with sqlite3.connect(path) as connection:
        connection.execute("PRAGMA journal_mode=WAL")
        connection.execute(_BESIDE_DDL)
        connection.execute(f"DELETE FROM {TABLE}")
    connection.close()


def _beside_connection(path: str) -> sqlite3.Connection:
    opened: dict[tuple[int, str], sqlite3.Connection] = getattr(_beside, "connections", None) or {}
    _beside.connections = opened
    key = (os.getpid(), path)
    if key not in opened:
        # Autocommit: each write commits as it is made, as the ledger table's do.
        opened[key] = sqlite3.connect(path, timeout=30, isolation_level=None)
    return opened[key]


def beside_start(path: str, job_id: int, claim_token: int, attempt: int, worker: str) -> int:
    """``start``, in the ledger file ``path``."""
    cursor = _beside_connection(path).execute(
        f"INSERT INTO {TABLE} (job_id, claim_token, attempt, worker, pid, started_at) "
        "VALUES (?, ?, ?, ?, ?, ?)",
        [job_id, claim_token, attempt, worker, os.getpid(), time.time()],
    )
    return int(cursor.lastrowid or 0)


def beside_note(path: str, entry: int, note: str) -> None:
    """Note how far the execution ``entry`` has come, in the ledger file ``path``, before its end."""
    _beside_connection(path).execute(f"UPDATE {TABLE} SET note = ? WHERE id = ?", [note, entry])


def beside_end(path: str, entry: int, note: str = "") -> None:
    """``end``, in the ledger file ``path``."""
    _beside_connection(path).execute(
        f"UPDATE {TABLE} SET ended_at = ?, note = ? WHERE id = ?", [time.time(), note, entry]
    )


def beside_executions(path: str) -> list[Execution]:
    with sqlite3.connect(path, timeout=30) as connection:
        rows = connection.execute(f"SELECT id, {_COLUMNS} FROM {TABLE} ORDER BY id").fetchall()
    connection.close()
    return [Execution(*row) for row in rows]


def take_in(path: str, using: str = "default") -> None:
    """Copy the executions of the ledger file ``path`` into the ledger table, in their order."""
    runs = beside_executions(path)
    with connections[using].cursor() as cursor:
        for run in runs:
            cursor.execute(
                f"INSERT INTO {TABLE} ({_COLUMNS}) VALUES (%s, %s, %s, %s, %s, %s, %s, %s)",
                [run.job_id, run.claim_token, run.attempt, run.worker, run.pid, run.started_at]
                + [run.ended_at, run.note],
            )


def _select(where: str, using: str) -> list[Execution]:
    with connections[using].cursor() as cursor:
        cursor.execute(
            "SELECT id, job_id, claim_token, attempt, worker, pid, started_at, ended_at, note "
            f"FROM {TABLE} {where} ORDER BY id"
        )
        rows: list[Any] = cursor.fetchall()
    return [Execution(*row) for row in rows]
