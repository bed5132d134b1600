"""Jobs for the worker processes that the tests start.

The tests' workers import this module through ``JOBQUEUE["MODULES"]`` (the
``JOBQUEUE_MODULES`` environment variable of the test project). Each job
appends one JSON line per event to the file named by its ``path`` argument, so
that a test can count runs across processes.
"""

from __future__ import annotations

import datetime
import json
import os
import signal
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from django.db import OperationalError, connection

from django_jobqueue import Fail, JobContext, Retry, job


def note(path: str, event: str, ctx: JobContext | None = None, **fields: Any) -> None:
    """Append one event line; O_APPEND keeps lines from several processes whole."""
    line = {"event": event, "pid": os.getpid(), "time": time.time(), **fields}
    if ctx is not None:
        line.update(job=ctx.job.pk, attempt=ctx.attempt, worker=ctx.worker_id)
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, (json.dumps(line) + "\n").encode())
    finally:
        os.close(fd)


@contextmanager
def noting_interruptions(path: str, ctx: JobContext) -> Iterator[None]:
    """Note whatever interrupts the block (a time limit, a stop) as ``interrupted``; re-raise it."""
    try:
        yield
    except BaseException as exc:
        note(path, "interrupted", ctx, error=type(exc).__name__)
        raise


def events(path: str | Path) -> list[dict[str, Any]]:
    """Read back the lines ``note`` wrote (a missing file is no events)."""
    try:
        text = Path(path).read_text()
    except FileNotFoundError:
        return []
    return [json.loads(line) for line in text.splitlines() if line]


def of(path: str | Path, job: Any, event: str | None = None) -> list[dict[str, Any]]:
    """The events ``job`` noted (all its attempts), optionally only those named ``event``."""
    return [e for e in events(path) if e.get("job") == job.pk and (event is None or e["event"] == event)]


def first(path: str | Path, job: Any, event: str) -> dict[str, Any] | None:
    """The first event named ``event`` that ``job`` noted, or None."""
    found = of(path, job, event)
    return found[0] if found else None


@job(name="workers.record", takes_context=True)
def record(ctx: JobContext, path: str, value: Any = None, seconds: float = 0.0) -> Any:
    note(path, "start", ctx, value=value)
    if seconds:
        time.sleep(seconds)
    note(path, "end", ctx, value=value)
    return value


@job(name="workers.gate", takes_context=True)
def gate(ctx: JobContext, path: str, release: str, timeout: float = 30.0) -> str:
    """Note its start, then wait until the file ``release`` exists (or ``timeout``)."""
    note(path, "start", ctx)
    deadline = time.monotonic() + timeout
    while not os.path.exists(release):
        if time.monotonic() > deadline:
            raise TimeoutError(f"{release} never appeared")
        time.sleep(0.01)
    note(path, "end", ctx)
    return "released"


@job(name="workers.flow", takes_context=True)
def flow(ctx: JobContext, path: str, seconds: float = 0.0, release: str = "", timeout: float = 60.0) -> None:
    """Note its start and end with the key and queue its row had; between them wait until the
    file ``release`` exists (if given, for up to ``timeout``), then sleep ``seconds``.

    The key is read from the claimed row, not the payload: the flow tests check
    what the claim enforced on the row.
    """
    fields = {"key": ctx.job.concurrency_key, "queue": ctx.job.queue}
    note(path, "start", ctx, **fields)
    deadline = time.monotonic() + timeout
    while release and not os.path.exists(release):
        if time.monotonic() > deadline:
            raise TimeoutError(f"{release} never appeared")
        time.sleep(0.01)
    time.sleep(seconds)
    note(path, "end", ctx, **fields)


@job(name="workers.boom")
def boom(message: str) -> None:
    raise ValueError(message)


@job(name="workers.fail_now")
def fail_now(reason: str) -> None:
    raise Fail(reason)


@job(name="workers.retry_then_succeed", takes_context=True)
def retry_then_succeed(ctx: JobContext, path: str, retries: int, delay: float) -> dict[str, int]:
    note(path, "start", ctx)
    if ctx.attempt <= retries:
        raise Retry(delay=delay, reason=f"attempt {ctx.attempt} asks for another")
    return {"attempt": ctx.attempt}


@job(name="workers.slow_retry", takes_context=True)
def slow_retry(ctx: JobContext, path: str, seconds: float) -> int:
    """Run ``seconds``; the first attempt then asks for another, at once."""
    note(path, "start", ctx)
    time.sleep(seconds)
    if ctx.attempt == 1:
        raise Retry(delay=0, reason="the first attempt asks for another")
    return ctx.attempt


@job(name="workers.context", takes_context=True)
def describe_context(ctx: JobContext) -> dict[str, Any]:
    return {
        "job_id": ctx.job.pk,
        "attempt": ctx.attempt,
        "worker_id": ctx.worker_id,
        "extended": ctx.extend_visibility(120),
    }


@job(name="workers.not_json")
def not_json() -> Any:
    return {"when": time}  # a module: JSON cannot carry it


@job(name="workers.keyword_only")
def keyword_only(expected: str) -> str:
    return expected


@job(name="workers.cut_own_connection", takes_context=True)
def cut_own_connection(ctx: JobContext, path: str) -> int:
    """On its first attempt, have PostgreSQL end this thread's connection, then return normally."""
    note(path, "start", ctx)
    if ctx.attempt == 1:
        try:
            with connection.cursor() as cursor:
                cursor.execute("SELECT pg_terminate_backend(pg_backend_pid())")
        except OperationalError:
            pass  # the job itself is done; the worker's ack now meets a dead connection
    return ctx.attempt


@job(name="workers.returns_datetime", takes_context=True)
def returns_datetime(ctx: JobContext, path: str) -> Any:
    """Have an effect (an event), then return what JSON cannot carry."""
    note(path, "start", ctx)
    return datetime.datetime.now(datetime.UTC)


@job(name="workers.picky", takes_context=True, fail_on=(LookupError,))
def picky(ctx: JobContext, path: str, error: str) -> None:
    """Raise a ``KeyError`` (a ``LookupError``: dead at once) or a ``ValueError`` (retried)."""
    note(path, "start", ctx)
    raise {"key": KeyError, "value": ValueError}[error](f"picky about {error}")


@job(name="workers.spin", takes_context=True)
def spin(ctx: JobContext, path: str, seconds: float = 60.0, cooperative: bool = False) -> str:
    """Burn CPU in a pure Python loop; with ``cooperative``, return as soon as ``ctx.cancelled``."""
    note(path, "start", ctx)
    deadline = time.monotonic() + seconds
    with noting_interruptions(path, ctx):
        while time.monotonic() < deadline:
            if cooperative and ctx.cancelled:
                note(path, "saw_cancel", ctx)
                return "stopped"
    note(path, "end", ctx)
    return "spun"


@job(name="workers.nap", takes_context=True)
def nap(ctx: JobContext, path: str, seconds: float = 60.0) -> str:
    """One long ``sleep``: a blocking call that no Python line interrupts until it returns."""
    note(path, "start", ctx)
    with noting_interruptions(path, ctx):
        time.sleep(seconds)
    note(path, "end", ctx)
    return "rested"


@job(name="workers.stubborn", takes_context=True)
def stubborn(ctx: JobContext, path: str, seconds: float = 60.0) -> str:
    """Ignores ``ctx.cancelled`` and swallows every interruption: only a kill stops it."""
    note(path, "start", ctx)
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        try:
            time.sleep(0.05)
        except BaseException as exc:  # noqa: B036 - the point of this job
            note(path, "swallowed", ctx, error=type(exc).__name__)
    note(path, "end", ctx)
    return "outlasted"


@job(name="workers.crash", takes_context=True)
def crash(ctx: JobContext, path: str) -> str:
    """On its first attempt, kill the process running it at once, as a segmentation fault would."""
    note(path, "start", ctx)
    if ctx.attempt == 1:
        os.kill(os.getpid(), signal.SIGKILL)
    return "survived"


@job(name="workers.pid", takes_context=True)
def pid(ctx: JobContext, path: str, megabytes: int = 0) -> int:
    """Note the process it ran in; with ``megabytes``, keep that much memory for good (a leak)."""
    if megabytes:
        _leaked.append(bytearray(megabytes * 1024 * 1024))
    note(path, "ran", ctx)
    return os.getpid()


_leaked: list[bytearray] = []


@job(name="workers.batch_part", takes_context=True, max_attempts=3)
def batch_part(ctx: JobContext, path: str, n: int, fail: bool = False, seconds: float = 0.0) -> int:
    """A job of a batch: note it, sleep ``seconds``, and with ``fail`` go to the dead letters."""
    note(path, "part", ctx, n=n)
    if seconds:
        time.sleep(seconds)
    if fail:
        raise Fail(f"part {n} fails for good")
    return n


@job(name="workers.batch_done", takes_context=True)
def batch_done(
    ctx: JobContext, path: str, batch_id: int, done: int, failed: int, cancelled: int, **payload: Any
) -> None:
    """A batch's callback: note the counts and the payload it was given."""
    note(path, "batch_done", ctx, batch_id=batch_id, done=done, failed=failed, cancelled=cancelled, **payload)
