"""The schema: migrations in step with the models, and the claim served by its index."""

from __future__ import annotations

import re
from io import StringIO

import pytest
from django.core.management import call_command
from django.db import connection
from django.test.utils import CaptureQueriesContext

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
