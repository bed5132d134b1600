"""Nothing the queue sends PostgreSQL relies on session state, so a pooler in transaction mode is safe.

Behind PgBouncer in transaction mode each transaction may run on another
server connection: a ``SET``, a session advisory lock, a server-side cursor,
an SQL ``PREPARE``, a temporary table or a ``set_config(..., false)`` would
leak to another client or vanish. The test puts a relay that reads the SQL
off the wire (``tests/wire.py``) between PostgreSQL and everything the test
starts: its own connections, a real worker with threads and one with
processes, ``manage.py jobqueue``. It runs the operator's paths and the
worker's through it, then looks at every statement sent.
"""

from __future__ import annotations

import json
import os
import re
import signal
from collections.abc import Iterator
from datetime import timedelta

import pytest
from django.db import connections
from django.urls import reverse
from django.utils import timezone

from django_jobqueue import QueueClient, batch, enqueue, enqueue_many
from django_jobqueue.models import DeadLetter, Job
from tests import atomic_jobs
from tests.wire import Sent, WireRecorder
from tests.worker_support import WorkerProcess, database_url, first_within, run_manage, wait_until

pytestmark = pytest.mark.usefixtures("postgresql_only")

# What a pooler in transaction mode cannot carry from one transaction to the next.
SESSION_STATE = {
    "SET (for the session, not SET LOCAL)": re.compile(
        r"^\s*SET\s+(?!LOCAL\b|TRANSACTION\b|CONSTRAINTS\b)", re.I
    ),
    "RESET": re.compile(r"^\s*RESET\b", re.I),
    "a session advisory lock": re.compile(r"pg_(try_)?advisory_(un)?lock(_shared)?\s*\(", re.I),
    "a server-side cursor": re.compile(r"^\s*DECLARE\b", re.I),
    "SQL PREPARE": re.compile(r"^\s*(PREPARE|EXECUTE|DEALLOCATE)\b", re.I),
    "a temporary table": re.compile(r"\bCREATE\s+(GLOBAL\s+|LOCAL\s+)?TEMP(ORARY)?\b", re.I),
    "set_config for the session": re.compile(r"set_config\s*\((?:[^()]|\([^()]*\))*,\s*false\s*\)", re.I),
    "LISTEN": re.compile(r"^\s*(UN)?LISTEN\b", re.I),
}
# Django's own, on each new connection whose time zone is not the settings' (the
# server's "Etc/UTC" is not "UTC"): PgBouncer tracks TimeZone, a parameter the
# server reports, and sets it again on whichever server connection serves the client.
DJANGO_TIME_ZONE = re.compile(r"SELECT set_config\('TimeZone', ('[^']*'|\$1), false\)")


def session_state(statements: list[Sent]) -> list[tuple[str, Sent]]:
    """The statements that rely on session state, but the listener's LISTENs and Django's time zone."""
    listeners = {sent.connection for sent in statements if SESSION_STATE["LISTEN"].match(sent.sql)}
    found = []
    for sent in statements:
        for what, pattern in SESSION_STATE.items():
            if not pattern.search(sent.sql):
                continue
            if what == "LISTEN" and _listening_only(sent.connection, statements):
                continue
            if what == "set_config for the session" and DJANGO_TIME_ZONE.fullmatch(sent.sql):
                continue
            found.append((what, sent))
    assert listeners, "a worker's listener LISTENs: the relay saw it"
    return found


def _listening_only(connection: int, statements: list[Sent]) -> bool:
    """Whether ``connection`` sent nothing but LISTEN and UNLISTEN: a listener's own connection."""
    return all(SESSION_STATE["LISTEN"].match(s.sql) for s in statements if s.connection == connection)


@pytest.fixture
def recorder(queue: QueueClient) -> Iterator[WireRecorder]:
    """Every connection of the test, and of the processes it starts, goes through a ``WireRecorder``."""
    settings = connections["default"].settings_dict
    where = settings["HOST"], settings["PORT"]
    wire = WireRecorder(settings["HOST"] or "127.0.0.1", int(settings["PORT"] or 5432))
    connections["default"].close()
    settings["HOST"], settings["PORT"] = "127.0.0.1", wire.port
    try:
        yield wire
    finally:
        connections["default"].close()
        settings["HOST"], settings["PORT"] = where
        wire.stop()


@pytest.fixture
def effects_table(queue: QueueClient) -> Iterator[None]:
    atomic_jobs.create_table()
    yield
    atomic_jobs.drop_table()


def finished(ids: list[int]) -> bool:
    return Job.objects.filter(pk__in=ids).exclude(status__in=["ready", "running", "waiting"]).count() == len(
        ids
    )


def wait_finished(ids: list[int], timeout: float, worker: WorkerProcess) -> None:
    if first_within(lambda: finished(ids), timeout) is None:
        rows = Job.objects.filter(pk__in=ids).values_list("name", "status", "last_error")
        pytest.fail(f"not finished after {timeout}s: {sorted(rows)}\n{worker.log()}")


FAST = {
    "DEBUG": "0",  # as in production: Django logs no queries, and the rounds go out pipelined
    "JOBQUEUE_MODULES": "tests.jobs_for_workers,tests.atomic_jobs",
    "JOBQUEUE_BACKOFF_BASE": "0.05",
    "JOBQUEUE_BACKOFF_MAX": "0.2",
    "JOBQUEUE_QUEUES": json.dumps({"rated": {"rate_limit": "20/s"}, "capped": {"concurrency": 1}}),
}


def test_no_statement_relies_on_session_state(recorder, effects_table, start_worker, events_path, operator):
    path = events_path
    schedules = {"tick": {"job": "workers.record", "every": 1, "payload": {"path": path, "value": "tick"}}}
    worker = start_worker(
        "--concurrency",
        "4",
        "--poll-interval",
        "0.1",
        env={**FAST, "JOBQUEUE_SCHEDULES": json.dumps(schedules)},
    )
    worker.wait_started()

    ids = [enqueue("workers.record", {"path": path, "value": 1}).pk]
    flow = {"path": path}
    ids += [
        job.pk
        for job in enqueue_many(
            [("workers.flow", flow, {"queue": "rated"})] * 5
            + [("workers.flow", flow, {"queue": "capped"})] * 3
            + [
                ("workers.flow", flow, {"concurrency_key": f"k{n % 2}", "concurrency_limit": 1})
                for n in range(4)
            ]
        )
    ]
    retried = enqueue("workers.retry_then_succeed", {"path": path, "retries": 2, "delay": 0.05})
    enqueue("workers.fail_now", {"reason": "no"})  # its row moves to the dead letters
    first = enqueue("workers.record", {"path": path, "value": "first"})
    then = enqueue("workers.record", {"path": path, "value": "then"}, depends_on=[first])
    with batch(on_finish="workers.batch_done", payload={"path": path, "report": "r"}):
        parts = [enqueue("workers.batch_part", {"path": path, "n": n}) for n in range(3)]
    atomic = [enqueue("atomic.credit", {"amount": n}) for n in range(3)]
    gate = enqueue("workers.gate", {"path": path, "release": path + ".never", "timeout": 30})
    ids += [job.pk for job in (retried, first, then, *parts, *atomic)]
    wait_finished(ids, 60, worker)
    wait_until(lambda: Job.objects.get(pk=gate.pk).status == "running", 30, "the gate to run")
    assert QueueClient().cancel(gate)
    wait_until(lambda: finished([gate.pk]), 30, "the cancelled job to stop")
    wait_until(lambda: DeadLetter.objects.exists(), 30, "a dead letter")
    retry = QueueClient().retry_dead_letter(DeadLetter.objects.get())
    wait_until(
        lambda: DeadLetter.objects.exists() and not Job.objects.filter(pk=retry.pk).exists(),
        30,
        "the retried dead letter to fail again",
    )
    worker.wait_for_log(r"schedule tick fired", 10)
    worker.send(signal.SIGTERM)
    assert worker.wait() == 0, worker.log()

    children = start_worker("--pool", "processes", "--concurrency", "2", "--burst", env=FAST)
    child_ids = [job.pk for job in enqueue_many([("atomic.credit", {"amount": n}) for n in range(3)])]
    assert children.wait(60) == 0, children.log()
    assert finished(child_ids)

    Job.objects.filter(status__in=["done", "failed", "cancelled"]).update(
        finished_at=timezone.now() - timedelta(days=30)
    )
    assert QueueClient().prune(older_than=timedelta(days=1)) > 0
    for model in ("job", "deadletter", "batch", "schedule", "queueoverview", "worker"):
        response = operator.get(reverse(f"admin:django_jobqueue_{model}_changelist"))
        assert response.status_code == 200, model
    status = run_manage("jobqueue", "status", env={**os.environ, "DATABASE_URL": database_url()})
    assert status.returncode == 0, status.stderr

    statements = recorder.statements
    kinds = {"claim": r"status = 'running'", "ack": r"status = 'done'", "lock": r"pg_advisory_\w*lock"}
    for kind, pattern in kinds.items():
        assert any(re.search(pattern, s.sql) for s in statements), f"the relay saw no {kind}"
    found = session_state(statements)
    assert not found, "\n".join(f"{what}: {sent}" for what, sent in found)


def test_the_scan_sees_a_session_level_statement():
    sent = [
        Sent(1, "query", "LISTEN django_jobqueue"),
        Sent(2, "parse", "SET statement_timeout = 5"),
        Sent(2, "parse", "SELECT pg_advisory_lock(1)"),
        Sent(2, "query", "DECLARE c CURSOR WITH HOLD FOR SELECT 1"),
        Sent(2, "query", "SELECT set_config('lock_timeout', '1s', false)"),
        Sent(2, "query", "SET LOCAL lock_timeout = '1s'"),
        Sent(2, "parse", "SELECT set_config('lock_timeout', $1, true)"),
        Sent(2, "query", "SET CONSTRAINTS ALL IMMEDIATE"),
        Sent(3, "query", "LISTEN x"),
        Sent(3, "query", "SELECT 1"),
    ]
    assert [(what, s.sql) for what, s in session_state(sent)] == [
        ("SET (for the session, not SET LOCAL)", "SET statement_timeout = 5"),
        ("a session advisory lock", "SELECT pg_advisory_lock(1)"),
        ("a server-side cursor", "DECLARE c CURSOR WITH HOLD FOR SELECT 1"),
        ("set_config for the session", "SELECT set_config('lock_timeout', '1s', false)"),
        ("LISTEN", "LISTEN x"),
    ]
