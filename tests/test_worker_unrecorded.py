"""A slot whose outcome cannot be written: it waits out a lost connection, never a refused write."""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterator

import pytest
from django.db import connection

from django_jobqueue import job
from django_jobqueue.models import Job
from django_jobqueue.worker.outage import Shortage
from django_jobqueue.worker.run.executor import Executor
from django_jobqueue.worker.run.outcomes import Outcome

REFUSED = "tests.unrecorded.refused"

# A write the database refuses every time, as a constraint or a trigger of the
# project's own might: the job's status change is turned down. On PostgreSQL a
# job that finishes moves to the finished jobs' partition (an insert there), and
# one that goes back to ready is updated in place.
TRIGGERS = {
    "postgresql": [
        "CREATE FUNCTION jq_test_refuse() RETURNS trigger AS $$ "
        "BEGIN RAISE EXCEPTION 'refused by a trigger'; END $$ LANGUAGE plpgsql",
        "CREATE TRIGGER jq_test_refuse BEFORE UPDATE ON django_jobqueue_job FOR EACH ROW "
        f"WHEN (NEW.name = '{REFUSED}' AND OLD.status = 'running' AND NEW.status <> 'running') "
        "EXECUTE FUNCTION jq_test_refuse()",
        "CREATE TRIGGER jq_test_refuse_finish BEFORE INSERT ON django_jobqueue_job_finished FOR EACH ROW "
        f"WHEN (NEW.name = '{REFUSED}') EXECUTE FUNCTION jq_test_refuse()",
    ],
    "sqlite": [
        "CREATE TRIGGER jq_test_refuse BEFORE UPDATE ON django_jobqueue_job FOR EACH ROW "
        f"WHEN NEW.name = '{REFUSED}' AND OLD.status = 'running' AND NEW.status <> 'running' "
        "BEGIN SELECT RAISE(ABORT, 'refused by a trigger'); END",
    ],
    # A job that finishes there is updated, or deleted (KEEP_COMPLETED = 0).
    "mysql": [
        "CREATE TRIGGER jq_test_refuse BEFORE UPDATE ON django_jobqueue_job FOR EACH ROW "
        f"BEGIN IF NEW.name = '{REFUSED}' AND OLD.status = 'running' AND NEW.status <> 'running' THEN "
        "SIGNAL SQLSTATE '45000' SET MESSAGE_TEXT = 'refused by a trigger'; END IF; END",
        "CREATE TRIGGER jq_test_refuse_finish BEFORE DELETE ON django_jobqueue_job FOR EACH ROW "
        f"BEGIN IF OLD.name = '{REFUSED}' AND OLD.status = 'running' THEN "
        "SIGNAL SQLSTATE '45000' SET MESSAGE_TEXT = 'refused by a trigger'; END IF; END",
    ],
}
DROPS = {
    "postgresql": [
        "DROP TRIGGER IF EXISTS jq_test_refuse ON django_jobqueue_job",
        "DROP TRIGGER IF EXISTS jq_test_refuse_finish ON django_jobqueue_job_finished",
        "DROP FUNCTION IF EXISTS jq_test_refuse()",
    ],
    "sqlite": ["DROP TRIGGER IF EXISTS jq_test_refuse"],
    "mysql": ["DROP TRIGGER IF EXISTS jq_test_refuse", "DROP TRIGGER IF EXISTS jq_test_refuse_finish"],
}


@job(name=REFUSED)
def refused() -> str:
    return "ran"


@pytest.fixture
def refusing_trigger(transactional_db: None) -> Iterator[None]:
    with connection.cursor() as cursor:
        for statement in TRIGGERS[connection.vendor]:
            cursor.execute(statement)
    try:
        yield
    finally:
        with connection.cursor() as cursor:
            for statement in DROPS[connection.vendor]:
                cursor.execute(statement)


def run_in_thread(executor: Executor, claimed: Job) -> tuple[threading.Thread, list[Outcome]]:
    outcomes: list[Outcome] = []

    def run() -> None:
        try:
            outcomes.append(executor.run(claimed))
        finally:
            connection.close()

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread, outcomes


def test_a_refused_write_is_given_up_not_retried_forever(queue, refusing_trigger, caplog):
    queue.push(REFUSED, {})
    claimed = queue.pull(worker_id="w")
    assert claimed is not None
    executor = Executor(queue, "w", completer=None, shortage=Shortage("w", queue.using))
    with caplog.at_level(logging.INFO, logger="django_jobqueue"):
        thread, outcomes = run_in_thread(executor, claimed)
        thread.join(timeout=10)
    assert not thread.is_alive(), "the slot kept writing an outcome the database refuses"
    assert outcomes == [Outcome.UNRECORDED]
    messages = [record.getMessage() for record in caplog.records]
    assert any("refused by a trigger" in m and "run again when its claim expires" in m for m in messages)
    assert not any("cannot reach the database" in m for m in messages)
    # Still claimed: the claim expires (no heartbeat once the slot gave it up) and tick_timeouts rescues it.
    assert Job.objects.get(pk=claimed.pk).status == "running"
