"""Copies the database itself keeps of rows the queue deletes: rate limit starts, and deleted jobs.

The queue deletes a rate limit's ``QueueStart`` rows once they leave the
window, and a done job at its ack (``KEEP_COMPLETED = 0``) or when it is
pruned. A scenario that judges them afterwards needs what they were: a
trigger, created here on the test database, copies each such row into a
table of the suite's own, in the transaction that writes (or deletes) it, so
that the copy commits if and only if the queue's own change does. Times stay
the database's: a start's is the one the claim wrote, a deletion's the
database's clock as it deleted.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from django.db import connections

from django_jobqueue.models import Job, QueueStart

STARTS = "faults_starts"
DELETED = "faults_deleted"
_QUEUE_STARTS = QueueStart._meta.db_table
_JOBS = Job._meta.db_table
_DELETED_COLUMNS = "job_id, status, claim_token, attempts, deleted_at"

_CREATE = {
    "postgresql": [
        f"CREATE TABLE {STARTS} (id BIGSERIAL PRIMARY KEY, queue VARCHAR(63) NOT NULL, "
        "started_at TIMESTAMPTZ NOT NULL)",
        f"CREATE FUNCTION {STARTS}_copy() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN "
        f"INSERT INTO {STARTS} (queue, started_at) VALUES (NEW.queue, NEW.started_at); RETURN NULL; END $$",
        f"CREATE TRIGGER {STARTS}_copy AFTER INSERT ON {_QUEUE_STARTS} "
        f"FOR EACH ROW EXECUTE FUNCTION {STARTS}_copy()",
        f"CREATE TABLE {DELETED} (id BIGSERIAL PRIMARY KEY, job_id BIGINT NOT NULL, "
        "status VARCHAR(16) NOT NULL, claim_token BIGINT NOT NULL, attempts INTEGER NOT NULL, "
        "deleted_at TIMESTAMPTZ NOT NULL)",
        f"CREATE FUNCTION {DELETED}_copy() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN "
        f"INSERT INTO {DELETED} ({_DELETED_COLUMNS}) "
        "VALUES (OLD.id, OLD.status, OLD.claim_token, OLD.attempts, clock_timestamp()); RETURN NULL; END $$",
        # On the partitioned job table, and so on each partition. An UPDATE that moves a row to
        # the other partition (running -> done) deletes it from the first, and is copied too:
        # ``deleted()`` reads only the jobs gone for good, each by its last copy.
        f"CREATE TRIGGER {DELETED}_copy AFTER DELETE ON {_JOBS} "
        f"FOR EACH ROW EXECUTE FUNCTION {DELETED}_copy()",
    ],
    "sqlite": [
        f"CREATE TABLE {STARTS} (id INTEGER PRIMARY KEY AUTOINCREMENT, queue TEXT NOT NULL, "
        "started_at TEXT NOT NULL)",
        f"CREATE TRIGGER {STARTS}_copy AFTER INSERT ON {_QUEUE_STARTS} BEGIN "
        f"INSERT INTO {STARTS} (queue, started_at) VALUES (NEW.queue, NEW.started_at); END",
        f"CREATE TABLE {DELETED} (id INTEGER PRIMARY KEY AUTOINCREMENT, job_id BIGINT NOT NULL, "
        "status TEXT NOT NULL, claim_token BIGINT NOT NULL, attempts INTEGER NOT NULL, "
        "deleted_at TEXT NOT NULL)",
        f"CREATE TRIGGER {DELETED}_copy AFTER DELETE ON {_JOBS} BEGIN INSERT INTO {DELETED} "
        f"({_DELETED_COLUMNS}) VALUES (OLD.id, OLD.status, OLD.claim_token, OLD.attempts, "
        "strftime('%Y-%m-%d %H:%M:%f', 'now')); END",
    ],
    "mysql": [
        f"CREATE TABLE {STARTS} (id BIGINT AUTO_INCREMENT PRIMARY KEY, queue VARCHAR(63) NOT NULL, "
        "started_at DATETIME(6) NOT NULL)",
        f"CREATE TRIGGER {STARTS}_copy AFTER INSERT ON {_QUEUE_STARTS} FOR EACH ROW "
        f"INSERT INTO {STARTS} (queue, started_at) VALUES (NEW.queue, NEW.started_at)",
        f"CREATE TABLE {DELETED} (id BIGINT AUTO_INCREMENT PRIMARY KEY, job_id BIGINT NOT NULL, "
        "status VARCHAR(16) NOT NULL, claim_token BIGINT NOT NULL, attempts INTEGER NOT NULL, "
        "deleted_at DATETIME(6) NOT NULL)",
        f"CREATE TRIGGER {DELETED}_copy AFTER DELETE ON {_JOBS} FOR EACH ROW INSERT INTO {DELETED} "
        f"({_DELETED_COLUMNS}) VALUES (OLD.id, OLD.status, OLD.claim_token, OLD.attempts, UTC_TIMESTAMP(6))",
    ],
}

_DROP = {
    "postgresql": [
        f"DROP TRIGGER IF EXISTS {STARTS}_copy ON {_QUEUE_STARTS}",
        f"DROP FUNCTION IF EXISTS {STARTS}_copy()",
        f"DROP TABLE IF EXISTS {STARTS}",
        f"DROP TRIGGER IF EXISTS {DELETED}_copy ON {_JOBS}",
        f"DROP FUNCTION IF EXISTS {DELETED}_copy()",
        f"DROP TABLE IF EXISTS {DELETED}",
    ],
    "sqlite": [
        f"DROP TRIGGER IF EXISTS {STARTS}_copy",
        f"DROP TABLE IF EXISTS {STARTS}",
        f"DROP TRIGGER IF EXISTS {DELETED}_copy",
        f"DROP TABLE IF EXISTS {DELETED}",
    ],
    "mysql": [
        f"DROP TRIGGER IF EXISTS {STARTS}_copy",
        f"DROP TABLE IF EXISTS {STARTS}",
        f"DROP TRIGGER IF EXISTS {DELETED}_copy",
        f"DROP TABLE IF EXISTS {DELETED}",
    ],
}


@dataclass(frozen=True)
class Deleted:
    """A job's row as the statement that deleted it for good found it."""

    job_id: int
    status: str
    claim_token: int
    attempts: int
    deleted_at: float  # seconds since the epoch, the database's clock


def create(using: str = "default") -> None:
    """Create the copies' tables and triggers on ``using`` (dropping any left behind first)."""
    connection = connections[using]
    with connection.cursor() as cursor:
        for statement in [*_DROP[connection.vendor], *_CREATE[connection.vendor]]:
            cursor.execute(statement)


def drop(using: str = "default") -> None:
    connection = connections[using]
    with connection.cursor() as cursor:
        for statement in _DROP[connection.vendor]:
            cursor.execute(statement)


def starts(queue: str, using: str = "default") -> list[int]:
    """Every start the rate limit of ``queue`` wrote, in microseconds since the epoch, in order.

    Whole microseconds, so that two starts exactly a window apart compare as
    exactly that: a float's seconds would make some of them a hair less.
    """
    with connections[using].cursor() as cursor:
        cursor.execute(f"SELECT started_at FROM {STARTS} WHERE queue = %s", [queue])
        rows: list[Any] = cursor.fetchall()
    return sorted(_microseconds(row[0]) for row in rows)


def deleted(using: str = "default") -> dict[int, Deleted]:
    """Each job deleted and not in the job table now, as its last deletion found it."""
    with connections[using].cursor() as cursor:
        gone = f"job_id NOT IN (SELECT id FROM {_JOBS})"
        cursor.execute(f"SELECT {_DELETED_COLUMNS} FROM {DELETED} WHERE {gone} ORDER BY id")
        rows: list[Any] = cursor.fetchall()
    return {row[0]: Deleted(*row[:4], _microseconds(row[4]) / 1_000_000) for row in rows}


_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def _microseconds(value: datetime | str) -> int:
    if isinstance(value, str):  # SQLite: the text the queue wrote, in UTC
        value = datetime.fromisoformat(value).replace(tzinfo=UTC)
    elif value.tzinfo is None:  # MySQL: naive, in UTC
        value = value.replace(tzinfo=UTC)
    return (value - _EPOCH) // timedelta(microseconds=1)
