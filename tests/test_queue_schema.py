"""The schema: migrations in step with the models, and the claim served by its index."""

from __future__ import annotations

import re
from datetime import timedelta
from io import StringIO

import pytest
from django.core.management import call_command
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from django_jobqueue import QueueClient, enqueue_many
from django_jobqueue.models import Job


def test_migrations_match_the_models(db):
    out = StringIO()
    call_command("makemigrations", "--check", "--dry-run", stdout=out)
    assert "No changes detected" in out.getvalue()


def claim_plan(*queues: str) -> str:
    """Run one claim, then ask the database how it plans that exact statement."""
    with CaptureQueriesContext(connection) as queries:
        QueueClient().pull(*queues, worker_id="explain")
    claim_sql = next(q["sql"] for q in queries.captured_queries if "SET status = 'running'" in q["sql"])
    prefix = "EXPLAIN" if connection.vendor == "postgresql" else "EXPLAIN QUERY PLAN"
    with connection.cursor() as cursor:
        cursor.execute(f"{prefix} {claim_sql}")
        return "\n".join(" ".join(str(part) for part in row) for row in cursor.fetchall())


@pytest.fixture
def big_queue(transactional_db):
    """6,000 jobs over three queues, most of them done, as in a table that has lived a while."""
    enqueue_many([("tests.noop", {"i": i}, {"queue": f"q{i % 3}", "priority": i % 7}) for i in range(6000)])
    Job.objects.filter(pk__in=Job.objects.order_by("id").values("id")[:4500]).update(status="done")
    with connection.cursor() as cursor:
        cursor.execute(f"ANALYZE {Job._meta.db_table}")


@pytest.mark.parametrize(
    ("queues", "index"),
    [(("q1",), "jobqueue_claim_idx"), (("q0", "q2"), "jobqueue_claim_idx"), ((), "jobqueue_claim_any_idx")],
)
def test_the_claim_uses_its_partial_index(big_queue, queues, index):
    plan = claim_plan(*queues)
    assert index in plan, plan
    if connection.vendor == "postgresql":
        # The paused queues' table is read whole: it has a row per queue ever paused.
        assert not re.search(rf"Seq Scan on {Job._meta.db_table}\b", plan), plan
    else:
        assert f"SCAN {Job._meta.db_table}" not in plan.replace(f"USING INDEX {index}", ""), plan


@pytest.fixture
def keyed_backlog(transactional_db):
    """100,000 ready jobs over 1,000 concurrency keys, 100 of them running."""
    enqueue_many([("tests.noop", {}, {}) for _ in range(100_000)])
    table = Job._meta.db_table
    with connection.cursor() as cursor:
        key = "'tenant:' || CAST(id % 1000 AS text)"
        cursor.execute(f"UPDATE {table} SET concurrency_key = {key}, concurrency_limit = 1")
    running = list(Job.objects.order_by("id").values_list("id", flat=True)[:100])
    Job.objects.filter(pk__in=running).update(
        status="running", locked_by="other", locked_until=timezone.now() + timedelta(minutes=5)
    )
    with connection.cursor() as cursor:
        cursor.execute(f"ANALYZE {table}")


def limited_claim_plan(walk: bool) -> str:
    """Run one limited claim of 32 jobs (the window, or a walk over keys) and explain it."""
    client = QueueClient()
    client.flow.keyed_waiting, client.flow.walk_next = True, walk
    with CaptureQueriesContext(connection) as queries:
        assert client.pull_many(worker_id="explain", limit=32)
    # The statement that picks the jobs: on SQLite a SELECT before the UPDATE of their ids.
    claim_sql = next(q["sql"] for q in queries.captured_queries if "admitted AS" in q["sql"])
    prefix = "EXPLAIN" if connection.vendor == "postgresql" else "EXPLAIN QUERY PLAN"
    with connection.cursor() as cursor:
        cursor.execute(f"{prefix} {claim_sql}")
        return "\n".join(" ".join(str(part) for part in row) for row in cursor.fetchall())


@pytest.mark.parametrize(
    ("walk", "index"), [(False, "jobqueue_keyed_claim_idx"), (True, "jobqueue_key_ready_idx")]
)
def test_the_limited_claim_stays_on_its_indexes(keyed_backlog, walk, index):
    plan = limited_claim_plan(walk)
    assert index in plan, plan
    if connection.vendor == "postgresql":
        assert not re.search(rf"Seq Scan on {Job._meta.db_table}\b", plan), plan
    else:
        assert not re.search(rf"SCAN {Job._meta.db_table}(?! USING)", plan), plan
