"""Jobs for the autoscaling workers of ``test_worker_autoscale.py``: a nap that notes its start and end."""

from __future__ import annotations

import time

from django.db import connection

from django_jobqueue import JobContext, job
from tests.jobs_for_workers import note


@job(name="autoscale.nap", takes_context=True)
def nap(ctx: JobContext, path: str, seconds: float = 0.3, query: bool = False) -> None:
    """Note the start, sleep ``seconds``, note the end; with ``query``, hold a connection while asleep."""
    note(path, "start", ctx)
    if query:
        with connection.cursor() as cursor:
            cursor.execute("SELECT 1")
    time.sleep(seconds)
    note(path, "end", ctx)
