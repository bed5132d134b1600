"""Jobs that report ``ctx.progress()``, for tests/test_progress.py (in-process and in workers).

Workers load them through ``JOBQUEUE_MODULES`` next to ``tests.jobs_for_workers``.
"""

from __future__ import annotations

import os
import time
from typing import Any

from django.db import transaction

from django_jobqueue import Fail, JobContext, Retry, job
from tests.jobs_for_workers import note


def _wait_for(release: str, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while not os.path.exists(release):
        if time.monotonic() > deadline:
            raise TimeoutError(f"{release} never appeared")
        time.sleep(0.01)


@job(name="progress.count_to", takes_context=True)
def count_to(ctx: JobContext, n: int, seconds: float = 0.0) -> int:
    """Report 1..n of n in a tight loop, spread over about ``seconds``."""
    started = time.monotonic()
    for number in range(1, n + 1):
        ctx.progress(number, n, f"item {number}")
        if seconds and number % 100 == 0:
            # On pace: ``number`` of ``n`` reports after that share of ``seconds``.
            time.sleep(max(0.0, started + seconds * number / n - time.monotonic()))
    return n


@job(name="progress.report_and_wait", takes_context=True)
def report_and_wait(
    ctx: JobContext, path: str, release: str, current: int, total: int, message: str, timeout: float = 30.0
) -> str:
    """Report once, note it, wait for the file ``release``, then report the end and return."""
    ctx.progress(current, total, message)
    note(path, "reported", ctx)
    _wait_for(release, timeout)
    ctx.progress(total, total, "finished")
    return "released"


@job(name="progress.inside_atomic", takes_context=True)
def inside_atomic(ctx: JobContext, path: str, release: str, timeout: float = 30.0) -> None:
    """Report inside ``transaction.atomic()``, wait for ``release``, then roll the transaction back."""
    with transaction.atomic():
        ctx.progress(5, 10, "inside the job's transaction")
        note(path, "reported", ctx)
        _wait_for(release, timeout)
        raise RuntimeError("rolled back on purpose")


@job(name="progress.retry_once", takes_context=True, max_attempts=2)
def retry_once(ctx: JobContext) -> Any:
    """Report and retry on the first attempt; return where it got to (``ctx.job.progress``) on the second."""
    if ctx.attempt == 1:
        ctx.progress(3, 10, "first attempt")
        raise Retry(delay=0)
    return ctx.job.progress


@job(name="progress.fail_after", takes_context=True)
def fail_after(ctx: JobContext, current: int) -> None:
    ctx.progress(current, 100, "about to fail")
    raise Fail("failed on purpose")


@job(name="progress.report_refused", takes_context=True)
def report_refused(ctx: JobContext, current: str, total: str) -> str:
    """Report ``float(current)`` of ``float(total)``; on a refusal, report 1 of 2 and return the error.

    The counts come as text: PostgreSQL's jsonb would hand 1e308 back as an int of 309 digits.
    """
    try:
        ctx.progress(float(current), float(total), "refused, one hopes")
    except (TypeError, ValueError) as error:
        ctx.progress(1, 2, "after the refusal")
        return f"{type(error).__name__}: {error}"
    return "accepted"
