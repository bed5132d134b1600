"""Atomic jobs for the tests, in the test process and in real workers (``JOBQUEUE_MODULES``).

Each job writes its effect as a row of the ``atomic_effects`` table, on the
queue's database and so inside its own transaction; what it notes in a file
(``note``) is outside any transaction, and tells how often it really ran.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

from django.db import connections

from django_jobqueue import Fail, JobContext, job

from . import own_tables
from .jobs_for_workers import note

TABLE = "atomic_effects"

_DDL = {
    "postgresql": (
        f"CREATE TABLE IF NOT EXISTS {TABLE} (id BIGSERIAL PRIMARY KEY, job_id BIGINT NOT NULL, "
        "claim_token BIGINT NOT NULL, attempt INTEGER NOT NULL)"
    ),
    "mysql": (
        f"CREATE TABLE IF NOT EXISTS {TABLE} (id BIGINT AUTO_INCREMENT PRIMARY KEY, job_id BIGINT NOT NULL, "
        "claim_token BIGINT NOT NULL, attempt INTEGER NOT NULL)"
    ),
    "sqlite": (
        f"CREATE TABLE IF NOT EXISTS {TABLE} (id INTEGER PRIMARY KEY AUTOINCREMENT, "
        "job_id BIGINT NOT NULL, claim_token BIGINT NOT NULL, attempt INTEGER NOT NULL)"
    ),
}

# In-process tests only: called between the effect and the return, with the job's context.
PAUSES: dict[int, Callable[[JobContext], None]] = {}


def create_table(using: str = "default") -> None:
    own_tables.create(TABLE, _DDL, using)


def drop_table(using: str = "default") -> None:
    own_tables.drop(TABLE, using)


def effects(using: str = "default") -> dict[int, int]:
    """Committed effect rows per job id."""
    with connections[using].cursor() as cursor:
        cursor.execute(f"SELECT job_id, COUNT(*) FROM {TABLE} GROUP BY job_id")
        return {job_id: count for job_id, count in cursor.fetchall()}


def _effect(ctx: JobContext) -> None:
    with connections["default"].cursor() as cursor:
        cursor.execute(
            f"INSERT INTO {TABLE} (job_id, claim_token, attempt) VALUES (%s, %s, %s)",
            [ctx.job.pk, ctx.job.claim_token, ctx.attempt],
        )


@job(name="atomic.credit", atomic=True, takes_context=True, max_attempts=50)
def credit(ctx: JobContext, amount: int = 1, seconds: float = 0.0, path: str | None = None) -> int:
    """Write the effect, then take ``seconds`` (in small sleeps, so that an interruption lands)."""
    if path:
        note(path, "start", ctx)
    _effect(ctx)
    pause = PAUSES.get(ctx.job.pk)
    if pause is not None:
        pause(ctx)
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        time.sleep(0.01)
    return amount


@job(name="atomic.raises", atomic=True, takes_context=True, max_attempts=2)
def raises(ctx: JobContext) -> None:
    _effect(ctx)
    raise ValueError("the effect must not stay")


@job(name="atomic.fails", atomic=True, takes_context=True)
def fails(ctx: JobContext) -> None:
    _effect(ctx)
    raise Fail("no such account")


@job(name="atomic.unstorable", atomic=True, takes_context=True)
def unstorable(ctx: JobContext) -> Any:
    _effect(ctx)
    return threading.Lock()


@job(name="atomic.overruns", atomic=True, takes_context=True, max_attempts=3, timeout=1)
def overruns(ctx: JobContext, seconds: float, path: str | None = None) -> int:
    """Write the effect, then run ``seconds`` past its 1 s timeout on its first attempt only."""
    if path:
        note(path, "start", ctx)
    _effect(ctx)
    if ctx.attempt == 1:
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            time.sleep(0.01)
    return ctx.attempt


@job(name="atomic.extends", atomic=True, takes_context=True)
def extends(ctx: JobContext) -> bool:
    _effect(ctx)
    extended = ctx.extend_visibility(600)
    pause = PAUSES.get(ctx.job.pk)
    if pause is not None:
        pause(ctx)
    return extended
