"""The pgqueuer application the peer benchmark starts with ``pgq run bench.pgqueuer_app:create``.

What a user of pgqueuer writes: a factory that opens a connection, builds the
``PgQueuer`` on it and registers the no-op entrypoint. ``create`` opens it
with asyncpg, as pgqueuer's own quick start does and as its CLI's default
connection prefers when asyncpg is installed; ``create_psycopg`` with psycopg
in autocommit, which its psycopg driver requires. Nothing is tuned here:
batch size, concurrency and ack buffering are whatever ``pgq run`` is given,
and the benchmark gives it its defaults. The database comes from ``PGDSN``,
the variable ``pgq`` reads for its own commands. No Django: this module is
loaded by the ``pgq`` process alone.
"""

from __future__ import annotations

import os
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from pgqueuer import Job, PgQueuer

ENTRYPOINT = "noop"


async def noop(job: Job) -> None:
    """Do nothing: what is left of a job's cost is the queue's."""


@asynccontextmanager
async def create() -> AsyncIterator[PgQueuer]:
    """Yield a ``PgQueuer`` on one asyncpg connection, with the no-op entrypoint."""
    import asyncpg

    conn = await asyncpg.connect(os.environ["PGDSN"])
    try:
        pgq = PgQueuer.from_asyncpg_connection(conn)
        pgq.entrypoint(ENTRYPOINT)(noop)
        yield pgq
    finally:
        await conn.close()


@asynccontextmanager
async def create_psycopg() -> AsyncIterator[PgQueuer]:
    """Yield a ``PgQueuer`` on one psycopg connection, with the no-op entrypoint."""
    import psycopg

    async with await psycopg.AsyncConnection.connect(os.environ["PGDSN"], autocommit=True) as conn:
        pgq = PgQueuer.from_psycopg_connection(conn)
        pgq.entrypoint(ENTRYPOINT)(noop)
        yield pgq
