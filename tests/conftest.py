"""Shared fixtures. Tests run on SQLite by default, on PostgreSQL with DATABASE_URL."""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from django.conf import settings
from django.contrib.auth.models import Permission
from django.db import connection
from django.test import Client

from django_jobqueue import QueueClient, conf, registry
from django_jobqueue.models import Job
from django_jobqueue.queue.schedules import ScheduleBook
from tests.pooler import DIRECT_ADDRESS, direct_connection

ADDRESS = ("HOST", "PORT", "USER", "PASSWORD")


@pytest.fixture(scope="session")
def django_db_setup(django_db_setup: None, django_db_blocker: Any) -> Iterator[None]:
    """Behind a pooler (``DATABASE_POOLER_URL``), run the tests through it.

    The test database is created and dropped on the direct address: through
    PgBouncer, ``DROP DATABASE`` would find the pool's idle server connections
    still on it. Everything between runs through the pooler, and so do the
    workers the tests start, whose ``DATABASE_URL`` is made from these settings.
    """
    pooler = settings.POOLER_DATABASE
    if not pooler:
        yield
        return
    direct = {key: connection.settings_dict[key] for key in ADDRESS}
    DIRECT_ADDRESS.update(direct)
    # The workers' LISTEN on a direct connection to the test database, as
    # docs/deployment.md tells a site behind a pooler to set it; a test that
    # sets these itself (a deaf LISTEN) still wins in its workers' environment.
    os.environ.setdefault("JOBQUEUE_LISTEN_DATABASE", "listen")
    from tests.worker_support import database_url

    os.environ.setdefault("JOBQUEUE_LISTEN_DATABASE_URL", database_url())
    with django_db_blocker.unblock():
        connection.close()
        connection.settings_dict.update({key: pooler[key] for key in ADDRESS})
    # Many tests override JOBQUEUE as a whole (its QUEUES, its SCHEDULES): in
    # this process their settings leave out PREPARED_STATEMENTS as a site behind
    # the pooler would not.
    conf.DEFAULTS["PREPARED_STATEMENTS"] = False
    yield
    conf.DEFAULTS["PREPARED_STATEMENTS"] = True
    DIRECT_ADDRESS.clear()
    for name in ("JOBQUEUE_LISTEN_DATABASE", "JOBQUEUE_LISTEN_DATABASE_URL"):
        os.environ.pop(name, None)
    with django_db_blocker.unblock():
        connection.close()
        connection.settings_dict.update(direct)
        with connection.cursor() as cursor:
            cursor.execute(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity"
                " WHERE datname = current_database() AND pid <> pg_backend_pid()"
            )
        connection.close()


@pytest.fixture(scope="session", autouse=True)
def mysql_statements_on_mariadb() -> Iterator[None]:
    """With JOBQUEUE_TEST_MYSQL_STATEMENTS=1, MariaDB is asked as MySQL is: without RETURNING.

    MySQL 8 has no INSERT … RETURNING, which MariaDB has; this runs the
    statements the engine writes for MySQL on the MariaDB server at hand
    (``make test-mariadb``'s second run), in this process only.
    """
    if not os.environ.get("JOBQUEUE_TEST_MYSQL_STATEMENTS"):
        yield
        return
    from django_jobqueue.queue import engines

    mariadb, engines.MARIADB = engines.MARIADB, engines.MySQLEngine()
    yield
    engines.MARIADB = mariadb


@pytest.fixture
def queue(transactional_db: None) -> QueueClient:
    """A QueueClient on committed transactions (claims inside TestCase prove nothing)."""
    return QueueClient()


@pytest.fixture
def book(transactional_db: None) -> ScheduleBook:
    """The schedules' rows on committed transactions (tests pass their own clock to most calls)."""
    return ScheduleBook()


@pytest.fixture
def job_factory(queue: QueueClient) -> Callable[..., Job]:
    """Enqueue a job: ``job_factory(name="x", payload={...}, **options)``."""

    def make(name: str = "tests.noop", payload: dict[str, Any] | None = None, **options: Any) -> Job:
        return queue.push(name, payload or {}, **options)

    return make


@pytest.fixture
def unregistered() -> Iterator[Callable[..., None]]:
    """Take job names out of the registry for one test; they are put back after it.

    For tests that write rows by name, as another project's code would: what an
    earlier test registered under the same name (the demo's ``send_otp``) must
    not check their payloads against its signature.
    """
    taken: list[Any] = []

    def take(*names: str) -> None:
        for name in names:
            spec = registry.lookup(name)
            if spec is not None:
                taken.append(spec)
                registry.unregister(name)

    yield take
    for spec in taken:
        registry.register(spec)


@pytest.fixture
def on_postgresql() -> bool:
    return connection.vendor == "postgresql"


@pytest.fixture
def row_locks() -> bool:
    """Whether writers lock rows and run side by side (PostgreSQL, MySQL), so that races overlap."""
    from django_jobqueue.queue import engine_for

    return engine_for(connection).supports_concurrent_writers


@pytest.fixture
def row_locks_only(row_locks: bool) -> Iterator[None]:
    if not row_locks:
        pytest.skip("a database that locks rows (PostgreSQL, MySQL) only")
    yield


@pytest.fixture
def postgresql_only() -> Iterator[None]:
    if connection.vendor != "postgresql":
        pytest.skip("PostgreSQL only")
    yield


@pytest.fixture
def sqlite_only() -> Iterator[None]:
    if connection.vendor != "sqlite":
        pytest.skip("SQLite only")
    yield


@pytest.fixture
def other_connection(transactional_db: None) -> Iterator[Any]:
    """A second, independent connection to the test database (another process's view)."""
    from django.db import connections

    other = connections.create_connection("default")
    try:
        yield other
    finally:
        other.close()


def count_jobs(conn: Any) -> int:
    with conn.cursor() as cursor:
        cursor.execute(f"SELECT COUNT(*) FROM {Job._meta.db_table}")
        return int(cursor.fetchone()[0])


@pytest.fixture
def listener(postgresql_only: None, transactional_db: None) -> Iterator[Any]:
    """A psycopg connection LISTENing on the queue's channel (PostgreSQL only)."""
    from django_jobqueue.queue import NOTIFY_CHANNEL

    with direct_connection() as conn:
        conn.execute(f"LISTEN {NOTIFY_CHANNEL}")
        yield conn


def received(conn: Any) -> list[str]:
    """The queue names notified to ``listener`` in the next 0.3 s."""
    return sorted(notify.payload for notify in conn.notifies(timeout=0.3))


# The worker tests' fixtures: start_worker (a real runworker process) and events_path.
from tests.worker_support import events_path, start_worker  # noqa: E402, F401

# -- the admin's users ---------------------------------------------------------------


@pytest.fixture
def login(queue: QueueClient, django_user_model: Any) -> Callable[..., Client]:
    """``login("name", "view_job", ...)``: a client logged in as staff with those permissions."""

    def make(username: str, *codenames: str, superuser: bool = False, staff: bool = True) -> Client:
        user = django_user_model.objects.create_user(
            username, password="pw", is_staff=staff, is_superuser=superuser
        )
        for codename in codenames:
            user.user_permissions.add(
                Permission.objects.get(codename=codename, content_type__app_label="django_jobqueue")
            )
        client = Client()
        client.force_login(user)
        return client

    return make


@pytest.fixture
def operator(login: Callable[..., Client]) -> Client:
    return login("root", superuser=True)
