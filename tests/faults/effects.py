"""The effects of the fault suite's atomic jobs: one row per run, written inside the job's transaction.

A row commits with the job's ack or not at all: the scenario counts the rows
each job left, and reads which claim wrote the one it kept.
"""

from __future__ import annotations

from typing import Any, NamedTuple

from django.db import connections

from tests import own_tables

TABLE = "faults_effects"

_DDL = {
    "postgresql": (
        f"CREATE TABLE IF NOT EXISTS {TABLE} (id BIGSERIAL PRIMARY KEY, job_id BIGINT NOT NULL, "
        "claim_token BIGINT NOT NULL, worker VARCHAR(255) NOT NULL)"
    ),
    "mysql": (
        f"CREATE TABLE IF NOT EXISTS {TABLE} (id BIGINT AUTO_INCREMENT PRIMARY KEY, job_id BIGINT NOT NULL, "
        "claim_token BIGINT NOT NULL, worker VARCHAR(255) NOT NULL)"
    ),
    "sqlite": (
        f"CREATE TABLE IF NOT EXISTS {TABLE} (id INTEGER PRIMARY KEY AUTOINCREMENT, job_id BIGINT NOT NULL, "
        "claim_token BIGINT NOT NULL, worker VARCHAR(255) NOT NULL)"
    ),
}


class Effect(NamedTuple):
    job_id: int
    claim_token: int
    worker: str


def create(using: str = "default") -> None:
    own_tables.create(TABLE, _DDL, using)


def drop(using: str = "default") -> None:
    own_tables.drop(TABLE, using)


def write(job_id: int, claim_token: int, worker: str, using: str = "default") -> None:
    """Write one effect on ``using``'s connection, in whatever transaction it is in."""
    with connections[using].cursor() as cursor:
        cursor.execute(
            f"INSERT INTO {TABLE} (job_id, claim_token, worker) VALUES (%s, %s, %s)",
            [job_id, claim_token, worker],
        )


def committed(using: str = "default") -> list[Effect]:
    """Every effect row committed, in the order written."""
    with connections[using].cursor() as cursor:
        cursor.execute(f"SELECT job_id, claim_token, worker FROM {TABLE} ORDER BY id")
        rows: list[Any] = cursor.fetchall()
    return [Effect(*row) for row in rows]
