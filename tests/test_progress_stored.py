"""The admin shows whatever a ``progress`` column holds: a release's reports, or JSON written by hand.

``ctx.progress()`` refuses what it cannot show, but the column is JSON anyone
may write (an older release, a custom worker, a migration, a hand in psql).
Each row here is written directly, as the database's JSON text, and each page
that loads it must answer 200.
"""

from __future__ import annotations

import re
from typing import Any

import pytest
from django.db import connection
from django.db.models import Model
from django.test import Client
from django.urls import reverse

import tests.progress_jobs  # noqa: F401 - registers the jobs run in this process
from django_jobqueue import QueueClient
from django_jobqueue.models import DeadLetter, Job
from django_jobqueue.worker.run.executor import Executor
from django_jobqueue.worker.run.outcomes import Outcome

WORKER = "progress-test"
JOBS = reverse("admin:django_jobqueue_job_changelist")
LETTERS = reverse("admin:django_jobqueue_deadletter_changelist")
# More digits than Python turns into an int (4,300): json.loads raises on it, unless told otherwise.
MANY_DIGITS = "9" * 5000

# (the column's JSON text, what the job's page shows of it or None for no bar)
STORED = [
    ('{"current": 1e308, "total": 1e-308, "message": "m"}', "1e+308 / 1e-308 (100%) — m"),
    ('{"current": 1e300, "total": 1e-10}', "1e+300 / 1e-10 (100%)"),
    ('{"current": 1e306, "total": 1.5e307}', "1e+306 / 1.5e+307 (6%)"),
    ('{"current": 1e10, "total": 1e-300}', "10,000,000,000 / 1e-300 (100%)"),
    # On SQLite json.loads reads 1e400 as inf; PostgreSQL stores it as a 401-digit integer.
    ('{"current": 1e400, "total": 10}', None),
    ('{"current": 5, "total": 1e400, "message": "total too big"}', "5 — total too big"),
    (f'{{"current": {MANY_DIGITS}, "total": 10}}', None),
    (f'{{"current": 5, "total": {MANY_DIGITS}}}', "5"),
    ('{"current": -5, "total": 10}', None),
    ('{"current": 5, "total": -10, "message": "negative total"}', "5 — negative total"),
    ('{"current": 5, "total": 0}', "5"),
    ('{"current": "5", "total": "10", "message": 7}', None),
    ('{"current": "NaN", "total": "Infinity"}', None),
    ('{"current": true, "total": true}', None),
    ('{"current": {"nested": [1, {"deeper": null}]}, "total": [10], "message": {"a": 1}}', None),
    ('{"current": 5, "total": 10, "message": ["not", "a", "string"]}', "5 / 10 (50%)"),
    ('{"total": 10, "message": "no current"}', None),
    ('{"current": 2, "total": 3, "extra": {"key": "kept out"}}', "2 / 3 (66%)"),
    ("{}", None),
    ("[1, 2, 3]", None),
    ('"just a string"', None),
    ("42", None),
    ("null", None),
]


def store(model: type[Model], pk: int, text: str) -> None:
    """Write ``text`` as the row's ``progress`` through SQL, past every check of the queue's."""
    value = "CAST(%s AS jsonb)" if connection.vendor == "postgresql" else "%s"
    with connection.cursor() as cursor:
        cursor.execute(f"UPDATE {model._meta.db_table} SET progress = {value} WHERE id = %s", [text, pk])


def running_job(queue: QueueClient) -> Job:
    queue.push("progress.count_to", {"n": 1})
    job = queue.pull(worker_id=WORKER)
    assert job is not None
    return job


def page(client: Client, url: str) -> str:
    response = client.get(url)
    assert response.status_code == 200
    return response.content.decode()


@pytest.mark.parametrize(("text", "shown"), STORED)
def test_the_job_pages_show_any_stored_progress(operator: Client, queue: QueueClient, text: str, shown: Any):
    job = running_job(queue)
    store(Job, job.pk, text)
    detail = page(operator, reverse("admin:django_jobqueue_job_change", args=[job.pk]))
    listed = page(operator, JOBS)
    if shown is None:
        assert 'class="jq-progress-label"' not in detail + listed
    else:
        assert f'<span class="jq-progress-label">{shown}</span>' in detail
        # The list: the share done (the count, without a total), the whole label its tooltip.
        share = re.search(r"\((\d+%)\)", shown)
        short = share.group(1) if share else shown.split(" — ")[0]
        assert f'<span class="jq-progress-row" title="{shown}">' in listed
        assert f'<span class="jq-progress-label">{short}</span>' in listed


def test_a_very_long_stored_message_is_shown_cut(operator: Client, queue: QueueClient):
    job = running_job(queue)
    store(Job, job.pk, '{"current": 1, "total": 4, "message": "%s"}' % ("x" * 1_000_000))
    detail = page(operator, reverse("admin:django_jobqueue_job_change", args=[job.pk]))
    assert f"1 / 4 (25%) — {'x' * 199}…</span>" in detail
    listed = page(operator, JOBS)
    assert f'1 / 4 (25%) — {"x" * 199}…">' in listed, "the list's tooltip"
    assert "x" * 201 not in detail + listed


@pytest.mark.parametrize("text", [text for text, _shown in STORED if MANY_DIGITS in text])
def test_the_dead_letter_pages_load_any_stored_progress(operator: Client, queue: QueueClient, text: str):
    queue.push("progress.fail_after", {"current": 37})
    job = queue.pull(worker_id=WORKER)
    assert job is not None and Executor(queue, WORKER).run(job) is Outcome.DEAD
    letter = DeadLetter.objects.get(job_id=job.pk)
    store(DeadLetter, letter.pk, text)
    page(operator, LETTERS)
    page(operator, reverse("admin:django_jobqueue_deadletter_change", args=[letter.pk]))
