"""Coroutine jobs (``async def``) for the asyncio pool's tests, with real ``runworker`` processes.

They note their events as ``tests/jobs_for_workers.py``'s jobs do (``note``),
into the file named by their ``path``. The tests' workers import this module
through ``JOBQUEUE_MODULES``.
"""

from __future__ import annotations

import asyncio
import time

from django.contrib.auth.models import User

from django_jobqueue import Fail, JobContext, job
from tests.jobs_for_workers import note, record


@job(name="aio.wait", takes_context=True)
async def wait(ctx: JobContext, path: str, seconds: float = 0.0, value: object = None) -> object:
    """Note its start, await ``seconds`` of (pretend) I/O, note its end; return ``value``."""
    note(path, "start", ctx, value=value)
    await asyncio.sleep(seconds)
    note(path, "end", ctx, value=value)
    return value


@job(name="aio.noop")
async def noop() -> None:
    """Nothing at all: what the bench drains."""


@job(name="aio.stuck", takes_context=True)
async def stuck(ctx: JobContext, path: str, seconds: float = 60.0) -> str:
    """Await for ``seconds``; note how it ends (``finally`` with what stopped it) if it is stopped."""
    note(path, "start", ctx)
    try:
        await asyncio.sleep(seconds)
    except BaseException as exc:
        note(path, "finally", ctx, error=type(exc).__name__, cancelled_seen=ctx.cancelled)
        raise
    note(path, "end", ctx)
    return "slept"


@job(name="aio.swallow", takes_context=True)
async def swallow(ctx: JobContext, path: str, after: float = 3.0) -> str:
    """Catch the cancel and go on for ``after`` seconds more: a job that will not stop."""
    note(path, "start", ctx)
    try:
        await asyncio.sleep(60)
    except asyncio.CancelledError:
        note(path, "swallowed", ctx)
    await asyncio.sleep(after)
    note(path, "end", ctx)
    return "went on"


@job(name="aio.orm", takes_context=True)
async def orm(ctx: JobContext, path: str, username: str) -> int:
    """Use the ORM the Django way from a coroutine: ``acreate``, ``aget``, ``acount``, ``aenqueue``."""
    user = await User.objects.acreate(username=username)
    again = await User.objects.aget(pk=user.pk)
    await record.aenqueue(path=path, value=again.username)
    note(path, "orm", ctx, user=again.pk)
    return await User.objects.filter(username__startswith="aio-").acount()


@job(name="aio.queries")
async def queries(seconds: float) -> int:
    """Query, await ``seconds``, query again: what holds a connection, and for how long."""
    before = await User.objects.acount()
    await asyncio.sleep(seconds)
    return before + await User.objects.acount()


@job(name="aio.blocks", takes_context=True)
async def blocks(ctx: JobContext, path: str, seconds: float) -> None:
    """Block the loop with synchronous code: what the loop watch reports."""
    note(path, "start", ctx)
    time.sleep(seconds)
    note(path, "end", ctx)


@job(name="aio.fails", takes_context=True, max_attempts=2)
async def fails(ctx: JobContext, path: str, fatal: bool = False) -> None:
    note(path, "start", ctx)
    await asyncio.sleep(0)
    if fatal:
        raise Fail("not worth another try")
    raise ValueError("the partner API said 503")


@job(name="aio.progress", takes_context=True)
async def progress(ctx: JobContext, path: str, steps: int = 3) -> int:
    for step in range(1, steps + 1):
        await asyncio.sleep(0.05)
        ctx.progress(step, steps, f"step {step}")
    extended = await ctx.aextend_visibility(120)
    note(path, "end", ctx, extended=extended)
    return steps
