"""The job that the upgrade test's workers run, old and new alike (``test_upgrade_under_workers.py``).

This directory goes on the ``PYTHONPATH`` of both trees, the previous
migration state's and this checkout's, and the workers load this module
through ``JOBQUEUE_MODULES``: so it may use only what both releases have
(``job``, ``Fail``, ``JobContext``) and the standard library.

Each run appends one JSON line to the ledger file named by ``UPGRADE_LEDGER``,
with the directory of the ``django_jobqueue`` package that ran it: the test
tells an old worker's run from a new one's by that, not by the worker's name.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import django_jobqueue
from django_jobqueue import Fail, JobContext, job

PACKAGE = str(Path(django_jobqueue.__file__).resolve().parent)


@job(name="upgrade.record", takes_context=True, max_attempts=3)
def record(ctx: JobContext, n: int, fail: bool = False, seconds: float = 0.01) -> int:
    """Note this run in the ledger, take ``seconds``, then return ``n``, or with ``fail`` fail for good."""
    line = {
        "n": n,
        "job": ctx.job.pk,
        "attempt": ctx.attempt,
        "worker": ctx.worker_id,
        "pid": os.getpid(),
        "package": PACKAGE,
        "time": time.time(),
    }
    # O_APPEND keeps the lines of several processes whole.
    fd = os.open(os.environ["UPGRADE_LEDGER"], os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, (json.dumps(line) + "\n").encode())
    finally:
        os.close(fd)
    time.sleep(seconds)
    if fail:
        raise Fail(f"upgrade job {n} fails for good")
    return n
