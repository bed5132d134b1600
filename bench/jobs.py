"""The benchmark's jobs, loaded by its worker processes through ``JOBQUEUE["MODULES"]``."""

from __future__ import annotations

import asyncio
import os
import time
from typing import Any

from django.db import connection

from django_jobqueue import job


@job(name="bench.noop")
def noop(**payload: object) -> None:
    """Do nothing: what is left of a job's cost is the queue's."""


@job(name="bench.anoop")
async def anoop(**payload: object) -> None:
    """``bench.noop`` as a coroutine: what ``--pool asyncio`` drains."""


@job(name="bench.io_wait")
async def io_wait(seconds: float) -> None:
    """Await ``seconds`` of pretend I/O: a slow partner API, a webhook, an LLM call."""
    await asyncio.sleep(seconds)


@job(name="bench.stamp")
def stamp(path: str, n: int) -> None:
    """Append ``n`` and the wall-clock time this run started, for the pickup latency."""
    line = f"{n} {time.time():.6f}\n".encode()
    # O_APPEND: one write per line keeps lines whole.
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, line)
    finally:
        os.close(fd)


@job(name="bench.spin")
def spin(n: int) -> int:
    """Sum the integers below ``n`` in a Python loop: CPU-bound work that holds the GIL throughout."""
    total = 0
    for i in range(n):
        total += i
    return total


@job(name="bench.query", takes_context=True)
def query(ctx: Any, seconds: float, hold: bool = True, progress: bool = False) -> None:
    """Query the database for ``seconds`` (``hold``), or query once and then work ``seconds`` in Python.

    ``progress``: report progress first, as a long job does (the worker's progress writer
    then holds a connection). For the connections counted by ``bench/connections.py``.
    """
    if progress:
        ctx.progress(0, 1, "started")
    with connection.cursor() as cursor:
        if hold:
            cursor.execute("SELECT pg_sleep(%s)", [seconds])
        else:
            cursor.execute("SELECT 1")
            time.sleep(seconds)


@job(name="bench.query_fails", max_attempts=1)
def query_fails(seconds: float) -> None:
    """Query the database for ``seconds``, then fail: the worker records a dead letter."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_sleep(%s)", [seconds])
    raise RuntimeError("bench.query_fails fails, as it is meant to")
