"""Prune racing an operator's *retry now*: a job made live again is never pruned.

``manage.py jobqueue prune --older-than 0`` runs in its own process while this
test's transaction holds a cancelled job's row, turning it ready again; then
that transaction commits. The job must still be there, ready, and the prune
must have deleted the cancelled job beside it that nobody touched.
"""

from __future__ import annotations

import os
import subprocess
import sys
from datetime import timedelta

from django.db import connection
from django.utils import timezone

from django_jobqueue.models import Job
from tests.worker_support import ROOT, database_url

from .row_locks import race


def prune_in_a_process() -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "manage.py", "jobqueue", "prune", "--older-than", "0"],
        cwd=ROOT,
        env={**os.environ, "DATABASE_URL": database_url()},
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_prune_never_deletes_a_job_made_live_while_it_ran(queue, job_factory, figures):
    revived, untouched = job_factory(), job_factory()
    assert len(queue.cancel_jobs([revived, untouched])) == 2
    Job.objects.update(finished_at=timezone.now() - timedelta(hours=1))

    raced = race(lambda: queue.retry_jobs_now([revived]), prune_in_a_process)

    pruned = raced.result
    assert pruned.returncode == 0, pruned.stderr
    assert Job.objects.filter(pk=revived.pk, status="ready").exists(), f"pruned a live job: {pruned.stdout}"
    assert not Job.objects.filter(pk=untouched.pk).exists()
    assert "Pruned 1 finished job(s)." in pruned.stdout
    # Where rows are locked (PostgreSQL, MySQL) the prune really ran while the retry held the row.
    assert raced.overlapped == (connection.vendor != "sqlite")
    figures(scenario="prune racing retry now", prune_blocked=raced.blocked, overlapped=raced.overlapped)
