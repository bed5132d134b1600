"""A worker's rounds commit without waiting for the disk (PostgreSQL), and only they do.

JOBQUEUE["WORKER_SYNCHRONOUS_COMMIT"] (default "off") is set for the round's own
transaction, inside the round's one statement: the session keeps the database's
setting, so nothing else on the connection (nor, behind a pooler, another
client's transaction) is written with it. docs/guarantees.md says why every
write of a round may be lost to a database crash and redone.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from django.db import connection, transaction
from django.test.utils import override_settings

from django_jobqueue import QueueClient, enqueue
from django_jobqueue.models import Job
from django_jobqueue.queue.internals import json_loads

ROOT = Path(__file__).resolve().parent.parent
LIMITED = {"QUEUES": {"capped": {"concurrency": 5}}}

# A deferred constraint trigger runs at commit, just before the commit is
# written: what it reads of synchronous_commit is what that commit uses.
COMMIT_SPY = """
CREATE TABLE round_commit_seen (setting text NOT NULL);
CREATE FUNCTION round_commit_spy() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO round_commit_seen VALUES (current_setting('synchronous_commit'));
    RETURN NULL;
END $$;
CREATE CONSTRAINT TRIGGER round_commit_spy AFTER UPDATE ON django_jobqueue_job
    DEFERRABLE INITIALLY DEFERRED FOR EACH ROW EXECUTE FUNCTION round_commit_spy();
"""
NO_SPY = """
DROP TRIGGER IF EXISTS round_commit_spy ON django_jobqueue_job;
DROP FUNCTION IF EXISTS round_commit_spy();
DROP TABLE IF EXISTS round_commit_seen;
"""


@pytest.fixture
def commit_spy(postgresql_only: None, transactional_db: None) -> Iterator[None]:
    with connection.cursor() as cursor:
        cursor.execute(NO_SPY)
        cursor.execute(COMMIT_SPY)
    yield
    with connection.cursor() as cursor:
        cursor.execute(NO_SPY)


def seen() -> set[str]:
    with connection.cursor() as cursor:
        cursor.execute("SELECT setting FROM round_commit_seen")
        settings = {row[0] for row in cursor.fetchall()}
        cursor.execute("DELETE FROM round_commit_seen")
    return settings


def session_setting() -> str:
    with connection.cursor() as cursor:
        cursor.execute("SHOW synchronous_commit")
        return str(cursor.fetchone()[0])


def a_round(client: QueueClient, queue: str = "default") -> None:
    """Claim two jobs, then ack them in a round that claims the third."""
    for n in range(3):
        enqueue("tests.round_commit", {"n": n}, queue=queue)
    claimed = client.pull_many(queue, worker_id="w", limit=2)
    assert len(claimed) == 2
    acked, more = client.ack_and_claim(
        [(job, None) for job in claimed], worker_id="w", queue_limits=[(queue, 5)], limit=5
    )
    assert len(acked) == 2 and len(more) == 1


@pytest.mark.parametrize("limits", [{}, LIMITED], ids=["plain", "limited"])
def test_a_workers_rounds_commit_with_its_setting(commit_spy: None, limits: dict) -> None:
    queue = "capped" if limits else "default"
    client = QueueClient()
    client.round_commit = "off"
    with override_settings(JOBQUEUE=limits):
        a_round(client, queue)
    # The claim of two, and the round that acked them and claimed one more.
    assert seen() == {"off"}
    assert session_setting() == "on"  # the session's own is untouched


@pytest.mark.parametrize("limits", [{}, LIMITED], ids=["plain", "limited"])
def test_other_clients_commit_with_the_databases_setting(commit_spy: None, limits: dict) -> None:
    queue = "capped" if limits else "default"
    with override_settings(JOBQUEUE=limits):
        a_round(QueueClient(), queue)
    assert seen() == {"on"}


def test_a_round_inside_a_transaction_sets_it_for_that_transaction(commit_spy: None) -> None:
    client = QueueClient()
    client.round_commit = "off"
    with transaction.atomic():
        a_round(client)
        enqueue("tests.round_commit", {"n": "after"})
        assert session_setting() == "off"
    assert session_setting() == "on"
    seen()


def test_the_setting_does_not_leak_into_the_next_statement(commit_spy: None) -> None:
    client = QueueClient()
    client.round_commit = "off"
    a_round(client)
    seen()
    Job.objects.filter(status="running").update(priority=5)  # the same connection, autocommit
    assert seen() == {"on"}


def test_the_jsonb_loader_gives_fresh_objects_equal_to_json_loads() -> None:
    first, second = json_loads(b"[]"), json_loads(b"[]")
    first.append(1)
    assert second == [] and json_loads(b"{}") == {} and json_loads(b"{}") is not json_loads(b"{}")
    text = '{"name": "Zo\\u00eb ✓", "n": [1, 2.5, null, true], "deep": {"a": {}}}'
    assert json_loads(text.encode()) == {"name": "Zoë ✓", "n": [1, 2.5, None, True], "deep": {"a": {}}}
    assert json_loads("[1]") == [1] and json_loads(memoryview(b"[2]")) == [2]


def test_claimed_payloads_come_back_as_enqueued(queue: QueueClient) -> None:
    payloads = [{}, {"tags": []}, {"name": "Zoë", "nested": {"list": [1, {"x": None}]}}, {"n": 10**18}]
    for payload in payloads:
        enqueue("tests.round_commit", payload)
    claimed = queue.pull_many(worker_id="w", limit=10)
    assert [job.payload for job in claimed] == payloads
    claimed[0].payload["changed"] = True
    assert claimed[1].payload == {"tags": []}
    assert claimed[0].attempt_history == [] and claimed[0].attempt_history is not claimed[1].attempt_history


def test_runworker_without_checks_still_refuses_a_bad_setting() -> None:
    finished = subprocess.run(
        [sys.executable, "manage.py", "runworker", "--burst", "--skip-checks"],
        cwd=ROOT,
        env={**os.environ, "JOBQUEUE_WORKER_SYNCHRONOUS_COMMIT": "sometimes"},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert finished.returncode == 1, finished.stderr
    refusal = "refusing to start: JOBQUEUE['WORKER_SYNCHRONOUS_COMMIT'] must be None or one of"
    assert refusal in finished.stderr
    assert "Traceback" not in finished.stderr


# -- a round's statement is planned once, not at every run ---------------------


def test_a_worker_round_is_planned_once_not_at_every_run(postgresql_only, transactional_db):
    """With its LIMIT a parameter, PostgreSQL planned the round again at every run (custom plans)."""
    with connection.cursor() as cursor:
        cursor.execute("SHOW server_version_num")
        if int(cursor.fetchone()[0]) < 140000:
            pytest.skip("pg_prepared_statements counts plans from PostgreSQL 14")
    client = QueueClient()
    # Enough ready jobs that a plan for an unknown count (a tenth of them read) looks dear.
    enqueue_many_noop(5_000)
    with connection.cursor() as cursor:
        cursor.execute("ANALYZE django_jobqueue_job")
    claimed = client.pull_many(worker_id="w", limit=2)
    for _round in range(12):
        _acked, claimed = client.ack_and_claim(
            [(job, None) for job in claimed], worker_id="w", queue_limits=None, limit=2
        )
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT generic_plans, custom_plans FROM pg_prepared_statements "
            "WHERE statement LIKE %s AND statement LIKE %s",
            ["%acked%", "%SET status = 'running'%"],
        )
        plans = cursor.fetchall()
    assert plans, "the round's statement was not prepared"
    generic, custom = plans[0]
    assert custom <= 5 and generic >= 6, plans


def enqueue_many_noop(count: int) -> None:
    from django_jobqueue import enqueue_many

    enqueue_many([("tests.round_commit", {"n": n}, {}) for n in range(count)])
