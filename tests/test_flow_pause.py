"""Pausing a queue: the row that says so, the calls that write it, and the wake-up on resume."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from django.db import transaction

from django_jobqueue import QueueClient
from django_jobqueue.models import Job, QueueState
from tests.racing import run_threads

from .conftest import received


def test_pause_and_resume_say_whether_they_changed_the_state(queue):
    assert queue.paused_queues() == []
    assert queue.pause_queue("emails") is True
    assert queue.pause_queue("emails") is False, "already paused"
    assert queue.pause_queue("sms") is True
    assert queue.paused_queues() == ["emails", "sms"]

    assert queue.resume_queue("emails") is True
    assert queue.resume_queue("emails") is False, "no longer paused"
    assert queue.paused_queues() == ["sms"]
    assert queue.pause_queue("emails") is True, "a resumed queue may be paused again"
    assert queue.paused_queues() == ["emails", "sms"]


def test_resuming_a_queue_never_paused_changes_nothing(queue):
    assert queue.resume_queue("reports") is False
    assert not QueueState.objects.exists(), "no row for a queue that only ever ran"


def test_the_pause_is_a_row_that_any_client_and_connection_sees(queue, other_connection):
    queue.pause_queue("emails")
    row = QueueState.objects.get()
    assert (row.queue, row.paused) == ("emails", True)
    assert QueueClient().paused_queues() == ["emails"], "a new client, as after a restart"
    with other_connection.cursor() as cursor:
        cursor.execute(f"SELECT queue FROM {QueueState._meta.db_table} WHERE paused", [])
        assert list(cursor.fetchall()) == [("emails",)]

    before = row.updated_at
    queue.resume_queue("emails")
    row.refresh_from_db()
    assert not row.paused and row.updated_at >= before


def test_enqueue_still_works_while_paused(queue):
    queue.pause_queue("emails")
    job = queue.push("tests.noop", {}, queue="emails")
    assert Job.objects.get(pk=job.pk).status == "ready"


def test_no_claim_takes_a_job_of_a_paused_queue_until_it_is_resumed(queue):
    held = queue.push("tests.noop", {}, queue="emails")
    other = queue.push("tests.noop", {}, queue="sms")
    queue.pause_queue("emails")
    assert queue.pull("emails", worker_id="w") is None
    assert [job.pk for job in queue.pull_many(worker_id="w", limit=10)] == [other.pk]
    queue.resume_queue("emails")
    claimed = queue.pull("emails", worker_id="w")
    assert claimed is not None and claimed.pk == held.pk


@pytest.mark.parametrize("bad", ["", "has space", "x" * 64, None])
def test_a_malformed_queue_name_is_refused(queue, bad):
    for call in (queue.pause_queue, queue.resume_queue):
        with pytest.raises(ValueError):
            call(bad)
    assert not QueueState.objects.exists()


def test_a_pause_inside_a_transaction_that_rolls_back_leaves_the_queue_running(queue):
    with pytest.raises(RuntimeError), transaction.atomic():
        assert queue.pause_queue("emails")
        raise RuntimeError("the caller's transaction fails")
    assert queue.paused_queues() == []


def test_many_callers_at_once_change_the_state_exactly_once(queue):
    """Pauses race an insert on the unique index; resumes race an update of one row."""
    for _ in range(3):
        paused = run_threads(8, lambda _: QueueClient().pause_queue("emails"))
        assert sorted(paused) == [False] * 7 + [True]
        resumed = run_threads(8, lambda _: QueueClient().resume_queue("emails"))
        assert sorted(resumed) == [False] * 7 + [True]
    assert QueueState.objects.count() == 1


# -- the wake-up (PostgreSQL) --------------------------------------------------------


def test_a_resume_wakes_the_queues_workers_and_a_pause_does_not(queue, listener):
    queue.pause_queue("emails")
    assert received(listener) == [], "a pause gives workers nothing to claim"
    queue.resume_queue("emails")
    assert received(listener) == ["emails"]
    queue.resume_queue("emails")
    assert received(listener) == [], "a resume that changed nothing wakes nobody"


def test_a_resume_notifies_on_commit_only(queue, listener):
    queue.pause_queue("emails")
    with transaction.atomic():
        assert queue.resume_queue("emails")
        assert received(listener) == [], "nothing before the commit"
    assert received(listener) == ["emails"]

    queue.pause_queue("emails")
    with pytest.raises(RuntimeError), transaction.atomic():
        queue.resume_queue("emails")
        raise RuntimeError("rolled back")
    assert received(listener) == []
    assert queue.paused_queues() == ["emails"]


# -- a worker refuses bad limits -------------------------------------------------------


def runworker(queues: object, *args: str) -> subprocess.CompletedProcess[str]:
    """Run ``manage.py runworker`` in its own process, with ``queues`` as its JOBQUEUE['QUEUES']."""
    return subprocess.run(
        [sys.executable, "manage.py", "runworker", "--burst", *args],
        cwd=Path(__file__).resolve().parent.parent,
        env={**os.environ, "JOBQUEUE_QUEUES": json.dumps(queues)},
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_runworker_refuses_to_start_with_bad_queue_limits():
    finished = runworker({"emails": {"concurrency": 0}})
    assert finished.returncode != 0
    assert "django_jobqueue.E014" in finished.stderr
    assert "JOBQUEUE['QUEUES']['emails']['concurrency']" in finished.stderr
    assert "started" not in finished.stderr


def test_runworker_without_checks_still_refuses_bad_queue_limits():
    finished = runworker({"emails": {"rate_limit": "lots"}}, "--skip-checks")
    assert finished.returncode == 1
    assert "refusing to start: JOBQUEUE['QUEUES']['emails']['rate_limit'] must be" in finished.stderr
    assert "Traceback" not in finished.stderr
