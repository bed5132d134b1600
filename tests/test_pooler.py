"""The suite behind PgBouncer in transaction mode (``make test-pgbouncer``): it and its workers go through it.

These tests run only when ``DATABASE_POOLER_URL`` names the pooler; they
check that the leg proves what it says: the queue's connections, the test's
and the workers', reach PostgreSQL through PgBouncer, and none directly.
"""

from __future__ import annotations

import os

import environ
import pytest
from django.conf import settings
from django.db import connection

from django_jobqueue.models import Job
from tests.pooler import admin, connect
from tests.worker_support import wait_until

pytestmark = pytest.mark.skipif(
    not settings.POOLER_DATABASE, reason="behind a pooler only (make test-pgbouncer)"
)


def clients_on_test_database() -> int:
    return sum(1 for row in admin("SHOW CLIENTS") if row["database"] == connection.settings_dict["NAME"])


def sessions_not_from_pgbouncer() -> list[tuple[int, str]]:
    """The server's sessions on the test database that are not PgBouncer's server connections.

    Each a pair of its client port and its last statement. A worker's LISTEN
    is direct, as docs/deployment.md says to set it, and shows as
    ``LISTEN django_jobqueue``.
    """
    direct = environ.Env.db_url_config(os.environ["DATABASE_URL"])
    name = connection.settings_dict["NAME"]
    pooled_ports = {row["local_port"] for row in admin("SHOW SERVERS")}
    with connect(direct, name) as conn:
        rows = conn.execute(
            "SELECT client_port, query FROM pg_stat_activity"
            " WHERE datname = current_database() AND pid <> pg_backend_pid()"
        ).fetchall()
    # A server connection opened between the two looks: SHOW SERVERS again lists it.
    pooled_ports |= {row["local_port"] for row in admin("SHOW SERVERS")}
    return [(port, query) for port, query in rows if port not in pooled_ports]


def test_the_tests_connection_goes_through_the_pooler_in_transaction_mode(queue):
    assert str(connection.settings_dict["PORT"]) == str(settings.POOLER_DATABASE["PORT"])
    with connection.cursor() as cursor:
        cursor.execute("SELECT 1")
    assert clients_on_test_database() >= 1
    pools = [row for row in admin("SHOW POOLS") if row["database"] == connection.settings_dict["NAME"]]
    assert [row["pool_mode"] for row in pools] == ["transaction"]
    assert settings.JOBQUEUE["PREPARED_STATEMENTS"] is False
    assert connection.settings_dict["DISABLE_SERVER_SIDE_CURSORS"] is True


def test_a_worker_reaches_postgresql_through_the_pooler_only(queue, start_worker, events_path):
    job = queue.push("workers.record", {"path": events_path, "value": 1})
    before = clients_on_test_database()

    worker = start_worker("--concurrency", "2")
    worker.wait_started()
    wait_until(lambda: Job.objects.get(pk=job.pk).status == "done", message="the job done")

    assert clients_on_test_database() > before, "the worker's connections are PgBouncer's clients"
    # The one session of its own is its LISTEN's, on the direct connection.
    assert [query for _, query in sessions_not_from_pgbouncer()] == ["LISTEN django_jobqueue"]
    worker.kill()
    wait_until(lambda: clients_on_test_database() <= before, message="the worker's clients gone")
