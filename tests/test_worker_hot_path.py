"""The worker's hot path: claimed rows as jobs, acks that slots do not wait for, prepared statements.

Each shortcut must give what the plain way gives: the same ``Job`` as the ORM
loads, the same fenced ack, the same log line, only later or cheaper.
"""

from __future__ import annotations

import logging
import os
import subprocess
import sys
from pathlib import Path

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext, override_settings

from django_jobqueue import QueueClient, job
from django_jobqueue.models import Job
from django_jobqueue.queue.rows import JOB_FIELDS, loaded_job
from django_jobqueue.worker.completer import Completer
from django_jobqueue.worker.run.executor import Executor
from django_jobqueue.worker.run.outcomes import Outcome

ROOT = Path(__file__).resolve().parent.parent


@job(name="tests.hot_path.noop")
def noop() -> None:
    """A job that neither queries nor fails: its ack goes to the completer."""


def test_a_claimed_job_is_the_job_the_orm_loads(queue, job_factory):
    job_factory(payload={"user": 7, "tags": ["a"]}, priority=3, unique_key="k-1")
    claimed = queue.pull(worker_id="w")
    assert claimed is not None

    loaded = Job.objects.get(pk=claimed.pk)

    assert claimed.__dict__.keys() == loaded.__dict__.keys()
    for field in JOB_FIELDS:
        assert getattr(claimed, field.attname) == getattr(loaded, field.attname), field.name
    assert (claimed._state.adding, claimed._state.db) == (False, "default")
    assert claimed.get_deferred_fields() == set()
    claimed.refresh_from_db()  # an ordinary, usable instance
    assert claimed.locked_by == "w"


def test_loaded_job_sends_init_signals_when_someone_listens(queue, job_factory):
    from django.db.models.signals import post_init

    seen: list[int] = []

    def note(sender, instance, **kwargs):
        seen.append(instance.pk)

    values = [getattr(job_factory(), field.attname) for field in JOB_FIELDS]
    post_init.connect(note, sender=Job)
    try:
        job = loaded_job("default", values)
    finally:
        post_init.disconnect(note, sender=Job)
    assert seen == [job.pk]


def test_the_claim_and_ack_statements_show_in_the_query_log(queue, job_factory):
    job_factory()
    with CaptureQueriesContext(connection) as queries:
        claimed = queue.pull(worker_id="w")
        assert claimed is not None
        assert queue.ack_and_claim([(claimed, None)], worker_id="w", queue_limits=None, limit=1)[0]
    statements = [
        query["sql"] for query in queries.captured_queries if query["sql"] not in ("BEGIN", "COMMIT")
    ]
    claims = [sql for sql in statements if "UPDATE" in sql and "SET status = 'running'" in sql]
    assert claims, statements
    if connection.vendor == "postgresql":
        # The round: one statement, parameters bound in it as they were sent.
        assert len(statements) == 2 and statements[1].startswith("WITH acked")
        assert f"'{claimed.pk}'" in statements[1] or f"{claimed.pk}" in statements[1]


def prepared_statements() -> list[str]:
    with connection.cursor() as cursor:
        cursor.execute("SELECT statement FROM pg_prepared_statements")
        return [row[0] for row in cursor.fetchall()]


def test_claims_are_prepared_statements_on_postgresql(postgresql_only, queue, job_factory):
    connection.close()  # a fresh session: nothing prepared yet
    job_factory()
    assert queue.pull(worker_id="w") is not None
    assert any("FOR NO KEY UPDATE SKIP LOCKED" in statement for statement in prepared_statements())


@override_settings(JOBQUEUE={"PREPARED_STATEMENTS": False})
def test_prepared_statements_can_be_turned_off(postgresql_only, queue, job_factory):
    connection.close()
    job_factory()
    assert queue.pull(worker_id="w") is not None
    assert prepared_statements() == []


@pytest.fixture
def completer(queue):
    """A completer nobody starts: the test plays the claiming loop and writes its batches."""
    written = []
    completer = Completer(queue, "w", on_submitted=lambda: None, on_written=written.extend)
    completer.written = written
    return completer


def test_a_slot_goes_on_before_its_ack_is_written(queue, job_factory, completer, caplog):
    job_factory(name="tests.hot_path.noop")
    claimed = queue.pull(worker_id="w")
    executor = Executor(queue, "w", completer)

    with caplog.at_level(logging.INFO, logger="django_jobqueue"):
        assert executor.run(claimed) == Outcome.PENDING
        # Nothing written yet: the job is still claimed, and nothing is logged.
        assert Job.objects.get(pk=claimed.pk).status == "running"
        assert not [r for r in caplog.records if "outcome=" in r.getMessage()]

        batch = completer.take()
        acked, _ = QueueClient().ack_and_claim(
            [(pending.job, pending.result) for pending in batch], worker_id="w", queue_limits=None, limit=1
        )
        completer.settle(batch, acked)

    assert Job.objects.get(pk=claimed.pk).status == "done"
    assert completer.written == [claimed]
    lines = [r.getMessage() for r in caplog.records if "outcome=" in r.getMessage()]
    assert len(lines) == 1
    assert lines[0].startswith(f"job tests.hot_path.noop id={claimed.pk} attempt=1/5 duration=")
    assert lines[0].endswith("s outcome=done")


def test_a_stale_deferred_ack_is_logged_lost(queue, job_factory, completer, caplog):
    job_factory(name="tests.hot_path.noop")
    claimed = queue.pull(worker_id="w")
    executor = Executor(queue, "w", completer)
    assert executor.run(claimed) == Outcome.PENDING
    assert queue.cancel(claimed)  # the claim is no longer current when the batch is written

    with caplog.at_level(logging.INFO, logger="django_jobqueue"):
        batch = completer.take()
        completer.settle(batch, queue.ack_many([(p.job, p.result) for p in batch], worker_id="w"))

    assert Job.objects.get(pk=claimed.pk).status == "cancelled"
    assert any("outcome=lost" in r.getMessage() for r in caplog.records)


def test_a_batch_that_fails_logs_each_ack_unrecorded(queue, job_factory, completer, caplog):
    job_factory(name="tests.hot_path.noop")
    claimed = queue.pull(worker_id="w")
    assert Executor(queue, "w", completer).run(claimed) == Outcome.PENDING

    with caplog.at_level(logging.INFO, logger="django_jobqueue"):
        completer.fail(completer.take(), ConnectionError("server closed the connection"))

    assert completer.written == [claimed]  # no longer counted as running: its claim will expire
    messages = [r.getMessage() for r in caplog.records]
    assert any("could not record its outcome (ConnectionError" in m for m in messages)
    assert any("outcome=unrecorded" in m for m in messages)


def test_a_thread_pool_worker_does_not_import_multiprocessing():
    # Once it is imported, logging looks up the current process's name for every record, one
    # per job: --pool processes imports it when it starts its children, and only then. (Django's
    # SQLite backend imports it on its own; what the worker's modules add is what counts.)
    code = (
        "import sys, django; django.setup(); "
        "before = set(sys.modules); "
        "from django_jobqueue.management.commands import runworker; "
        "from django_jobqueue.worker import supervisor; "
        "print(sorted(name for name in set(sys.modules) - before if name.split('.')[0] == 'multiprocessing'))"
    )
    env = {**os.environ, "DJANGO_SETTINGS_MODULE": "testproject.settings"}
    done = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True, check=True
    )
    assert done.stdout.strip() == "[]", done.stderr
