"""Jobs that the fault suite's worker processes run (loaded through ``JOBQUEUE_MODULES``).

Every job writes its execution to the ledger (``ledger.py``) as it starts and
as it reaches its end, each write committed on its own.
"""

from __future__ import annotations

import ctypes
import json
import os
import signal
import time
from pathlib import Path
from typing import Any

from django_jobqueue import Fail, JobContext, QueueClient, Retry, job

from . import effects, ledger


def _begin(ctx: JobContext) -> int:
    return ledger.start(ctx.job.pk, ctx.job.claim_token, ctx.attempt, ctx.worker_id)


def wait_for_file(path: str, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while not os.path.exists(path):
        if time.monotonic() > deadline:
            raise TimeoutError(f"{path} never appeared")
        time.sleep(0.01)


@job(name="faults.work", takes_context=True, max_attempts=20)
def work(ctx: JobContext, seconds: float = 0.0, n: int = 0) -> int:
    """Sleep ``seconds``: a job whose only effect is its ledger row."""
    entry = _begin(ctx)
    time.sleep(seconds)
    ledger.end(entry)
    return n


@job(name="faults.overrun", takes_context=True, max_attempts=20)
def overrun(ctx: JobContext, seconds: float, overrun_attempts: int = 1) -> int:
    """Sleep ``seconds`` (past the timeout it is enqueued with) on its first ``overrun_attempts``
    attempts; return at once after them."""
    entry = _begin(ctx)
    if ctx.attempt <= overrun_attempts:
        time.sleep(seconds)
    ledger.end(entry)
    return ctx.attempt


@job(name="faults.linger", takes_context=True, max_attempts=20)
def linger(ctx: JobContext, seconds: float, cooperative: bool = False) -> str:
    """Run ``seconds``; with ``cooperative``, return as soon as ``ctx.cancelled`` turns True
    (its ledger note says so), else only a kill stops it before its end."""
    entry = _begin(ctx)
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if cooperative and ctx.cancelled:
            ledger.end(entry, note="saw cancel")
            return "stopped"
        time.sleep(0.05)
    ledger.end(entry)
    return "lingered"


@job(name="faults.hold_gil", takes_context=True)
def hold_gil(ctx: JobContext, seconds: int, attempts: int = 1) -> int:
    """On its first ``attempts`` attempts, make one C call of ``seconds`` that keeps the GIL, as a
    C extension's long loop does: no other thread of the process runs meanwhile."""
    entry = _begin(ctx)
    if ctx.attempt <= attempts:
        # PyDLL, unlike CDLL, keeps the GIL across the call.
        ctypes.PyDLL(None).sleep(seconds)
    ledger.end(entry)
    return ctx.attempt


@job(name="faults.gate", takes_context=True)
def gate(ctx: JobContext, release: str, timeout: float = 60.0) -> str:
    """Run until the file ``release`` exists."""
    entry = _begin(ctx)
    wait_for_file(release, timeout)
    ledger.end(entry)
    return "released"


@job(name="faults.poison", takes_context=True)
def poison(ctx: JobContext) -> None:
    """Kill the worker running it, every time, as a segmentation fault would."""
    _begin(ctx)
    os.kill(os.getpid(), signal.SIGKILL)


@job(name="faults.stale_probe", takes_context=True)
def stale_probe(ctx: JobContext, first_release: str, second_release: str, results: str) -> str:
    """On attempt 1, wait for ``first_release`` and then try every completion on this
    (by then stale) claim, writing what each returned to ``results``; on attempt 2,
    wait for ``second_release``. Either way, return normally: the worker acks."""
    entry = _begin(ctx)
    if ctx.attempt == 1:
        wait_for_file(first_release, 120)
        client = QueueClient()
        outcomes = {
            "extend": ctx.extend_visibility(3600),
            "nack": client.nack(ctx.job, worker_id=ctx.worker_id, error="stale nack", delay=3600),
            "fail": client.fail(ctx.job, worker_id=ctx.worker_id, error="stale fail"),
        }
        Path(results).write_text(json.dumps(outcomes))
    else:
        wait_for_file(second_release, 120)
    ledger.end(entry)
    return f"attempt {ctx.attempt}"


@job(name="faults.raise_text", max_attempts=1)
def raise_text(kind: str) -> None:
    """Raise an exception whose message holds NUL characters, or 5 MB of text."""
    if kind == "nul":
        raise ValueError("before\x00after\x00")
    if kind == "fail-nul":
        raise Fail("no\x00thanks")
    if kind == "retry-huge":
        raise Retry(reason="y" * 5_000_000)
    if kind == "retry-never":
        raise Retry(delay=10**400)  # more seconds than a float holds
    raise ValueError("x" * 5_000_000 + "END")


@job(name="faults.secret_local", max_attempts=1)
def secret_local(secret_from_payload: str) -> None:
    """Fail with a secret in a local variable: the stored traceback must not show it."""
    password = "hunter2-" + secret_from_payload  # noqa: S105 - the planted secret
    token: dict[str, Any] = {"api_token": password}
    raise RuntimeError(f"provider refused the call ({len(token)} field)")


@job(name="faults.race")
def race(n: int) -> int:
    """Never run by a worker: the rescue race's pullers claim and ack it themselves."""
    return n


class Unprintable(Exception):  # noqa: N818 - named for what it does to a worker
    """An exception whose message cannot be made: ``str()`` of it raises."""

    def __str__(self) -> str:
        raise RuntimeError("this exception has no message")


@job(name="faults.unprintable", max_attempts=1)
def unprintable() -> None:
    raise Unprintable()


@job(name="faults.batch_part", takes_context=True, max_attempts=20)
def batch_part(ctx: JobContext, seconds: float = 0.0, n: int = 0, fail: bool = False) -> int:
    """A job of the batch scenario: its ledger row, and with ``fail`` the dead letters at once."""
    entry = _begin(ctx)
    time.sleep(seconds)
    ledger.end(entry)
    if fail:
        raise Fail(f"part {n} fails for good")
    return n


@job(name="faults.batch_done", takes_context=True, max_attempts=20)
def batch_done(ctx: JobContext, batch_id: int, done: int, failed: int, cancelled: int, scenario: str) -> None:
    """The batch scenario's callback: its ledger row notes the counts it was called with."""
    entry = _begin(ctx)
    counts = {"batch_id": batch_id, "done": done, "failed": failed, "cancelled": cancelled}
    ledger.end(entry, note=json.dumps({"scenario": scenario, **counts}))


# The note of an atomic run's ledger row once its effect is written, uncommitted.
WRITTEN = "effect written"


@job(name="faults.atomic_effect", atomic=True, takes_context=True, max_attempts=20)
def atomic_effect(ctx: JobContext, ledger_file: str, seconds: float = 0.0, n: int = 0) -> int:
    """Write this run's effect row in the job's transaction, then run ``seconds`` more in it before
    the ack commits both: a kill in that stretch takes back a written effect.

    Its executions go to the ledger file ``ledger_file``, beside the database (``ledger.py``).
    """
    entry = ledger.beside_start(ledger_file, ctx.job.pk, ctx.job.claim_token, ctx.attempt, ctx.worker_id)
    effects.write(ctx.job.pk, ctx.job.claim_token, ctx.worker_id)
    ledger.beside_note(ledger_file, entry, WRITTEN)
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        time.sleep(0.005)
    ledger.beside_end(ledger_file, entry, WRITTEN)
    return n
