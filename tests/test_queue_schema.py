"""The schema: migrations in step with the models, and the claim served by its index."""

from __future__ import annotations

import re
from collections.abc import Callable
from datetime import timedelta
from io import StringIO

import pytest
from django.core.management import call_command
from django.db import connection, transaction
from django.db.models import F
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from django_jobqueue import QueueClient, enqueue_many, stats
from django_jobqueue.admin.filters import StatusFilter
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


# -- the operators' figures: ready jobs are in two halves, each with its indexes ------


@pytest.fixture
def keyed_and_plain(big_queue):
    """``big_queue`` with a third of its ready jobs given a concurrency key."""
    ready = Job.objects.filter(status="ready").order_by("id").values("id")[:500]
    Job.objects.filter(pk__in=ready).update(concurrency_key=F("queue"), concurrency_limit=2)
    with connection.cursor() as cursor:
        cursor.execute(f"ANALYZE {Job._meta.db_table}")


def plans_of(run: Callable[[], object], wanted: str) -> list[str]:
    """The plans of the statements ``run`` makes whose SQL contains ``wanted``.

    On PostgreSQL sequential scans are ruled out for the EXPLAIN: at this
    table's size a scan is the cheapest plan whatever the indexes, and the
    question is whether an index can serve each statement at all, which is
    what the planner chooses at a million jobs. A statement no partial index
    matches is then still planned with a scan, or a whole unrelated index.
    """
    with CaptureQueriesContext(connection) as queries:
        run()
    statements = [q["sql"] for q in queries.captured_queries if wanted in q["sql"]]
    plans = []
    with transaction.atomic(), connection.cursor() as cursor:
        if connection.vendor == "postgresql":
            cursor.execute("SET LOCAL enable_seqscan = off")
        prefix = "EXPLAIN" if connection.vendor == "postgresql" else "EXPLAIN QUERY PLAN"
        for sql in statements:
            cursor.execute(f"{prefix} {sql}")
            plans.append("\n".join(" ".join(str(part) for part in row) for row in cursor.fetchall()))
    return plans


def assert_no_scan(plan: str) -> None:
    if connection.vendor == "postgresql":
        assert "Seq Scan" not in plan, plan
    else:
        assert not re.search(rf"SCAN {Job._meta.db_table}$", plan, re.MULTILINE), plan


KEYLESS = ("jobqueue_claim_idx", "jobqueue_claim_any_idx")
KEYED = ("jobqueue_keyed_claim_idx", "jobqueue_keyed_queue_idx", "jobqueue_key_ready_idx")


def test_the_overviews_ready_counts_read_each_half_through_its_index(keyed_and_plain):
    plain, keyed = plans_of(lambda: stats.overview(minutes=False), "'ready'")
    assert any(index in plain for index in KEYLESS), plain
    assert any(index in keyed for index in KEYED), keyed
    for plan in (plain, keyed):
        assert_no_scan(plan)
    overview = stats.overview(minutes=False)
    assert (overview.total.ready, overview.total.scheduled) == (1500, 0), "both halves are counted"


@pytest.mark.parametrize("status", ["due", "scheduled", "ready"])
def test_the_admin_ready_filters_read_both_halves_through_their_indexes(keyed_and_plain, status):
    def count() -> int:
        chosen = StatusFilter(None, {"status": [status]}, Job, None).filter(Job.objects.all(), status)
        return chosen.order_by()[:10_001].count()

    [plan] = plans_of(count, "'ready'")
    assert any(index in plan for index in KEYLESS), plan
    assert any(index in plan for index in KEYED), plan
    assert_no_scan(plan)
    assert count() == (0 if status == "scheduled" else 1500)


def test_the_busiest_keys_read_the_index_of_running_jobs_with_a_key(keyed_and_plain):
    keyed = Job.objects.filter(status="ready", concurrency_key__isnull=False).values("id")[:40]
    Job.objects.filter(pk__in=keyed).update(
        status="running", locked_until=timezone.now() + timedelta(seconds=30)
    )
    [plan] = plans_of(lambda: stats.busiest_keys("default", stats.database_now("default")), "'running'")
    assert "jobqueue_key_running_idx" in plan, plan
    assert_no_scan(plan)
    assert sum(key.running for key in stats.busiest_keys("default", stats.database_now("default"))) == 40
