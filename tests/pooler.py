"""PgBouncer in the tests: one of a test's own, and the one of ``make test-pgbouncer``.

``pgbouncer(server_url)`` starts a real PgBouncer in transaction mode in
front of that server with scripts/pgbouncer, as the leg does, on a free local
port, and yields that port; it is stopped on leaving. Tests that need it skip
where PgBouncer is not installed.

The rest serves the tests that run behind the leg's pooler
(``DATABASE_POOLER_URL``, tests/conftest.py), and directly alike: a
connection to the test database that bypasses the pooler, PgBouncer's admin
console, and the termination of the sessions on the test database.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

import psycopg
import pytest
from django.conf import settings
from django.db import DatabaseError, connection

from tests.worker_support import ROOT, wait_until

# Behind a pooler, the test database's address without it (tests/conftest.py
# fills it in): where a test's own LISTEN hears (a pooler in transaction mode
# does not pass notifications on) and where the server's sessions are seen.
DIRECT_ADDRESS: dict[str, Any] = {}

SCRIPT = str(ROOT / "scripts" / "pgbouncer")


@contextmanager
def pgbouncer(server_url: str) -> Iterator[int]:
    """Run a PgBouncer of its own in transaction mode in front of ``server_url``'s server; yield its port.

    ``scripts/pgbouncer start`` starts it, and ``stop`` stops it on leaving,
    with a PGBOUNCER_HOME in a temporary directory of its own: it is never the
    leg's, whose home is another.
    """
    # Not under pytest's tmp_path: as root PgBouncer runs as the postgres user,
    # who cannot pass through pytest's private temporary directory.
    home = tempfile.mkdtemp(prefix="jq-pgbouncer-")
    environment = {key: value for key, value in os.environ.items() if not key.startswith("PGBOUNCER_")}
    environment.update(PGBOUNCER_HOME=home, PG_URL=server_url)

    def script(command: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([SCRIPT, command], env=environment, capture_output=True, text=True, timeout=60)

    try:
        started = script("start")
        if "PgBouncer not found" in started.stderr:
            pytest.skip("PgBouncer is not installed")
        assert started.returncode == 0, f"scripts/pgbouncer start failed: {started.stderr}"
        port = urlsplit(started.stdout.strip()).port
        assert port is not None, started.stdout
        yield port
    finally:
        stopped = script("stop")
        shutil.rmtree(home, ignore_errors=True)
    assert stopped.returncode == 0, f"scripts/pgbouncer stop failed: {stopped.stderr}"


def direct_connection() -> psycopg.Connection[Any]:
    """A psycopg connection of its own to the test database, on its direct address behind a pooler."""
    params = connection.get_connection_params()
    if DIRECT_ADDRESS:
        params.update(host=DIRECT_ADDRESS["HOST"], port=DIRECT_ADDRESS["PORT"])
    params.pop("cursor_factory", None)
    params.pop("context", None)
    return psycopg.connect(**params, autocommit=True)


def connect(config: dict[str, Any], dbname: str) -> psycopg.Connection[Any]:
    """A psycopg connection to ``dbname`` at the address of ``config`` (a DATABASES entry)."""
    return psycopg.connect(
        host=config["HOST"],
        port=config["PORT"],
        user=config["USER"],
        password=config["PASSWORD"] or None,
        dbname=dbname,
        autocommit=True,
    )


def admin(command: str) -> list[dict[str, Any]]:
    """The rows of one command of the leg's PgBouncer's admin console (``SHOW CLIENTS``), as dicts."""
    # The console speaks the simple query protocol only, which a client-side cursor uses.
    with connect(settings.POOLER_DATABASE, "pgbouncer") as conn:
        cursor = psycopg.ClientCursor(conn)
        cursor.execute(command)
        names = [column.name for column in cursor.description or ()]
        return [dict(zip(names, row, strict=True)) for row in cursor.fetchall()]


def server_ports() -> set[int]:
    """The local ports of PgBouncer's server connections to the test database (its client ports there)."""
    name = connection.settings_dict["NAME"]
    return {row["local_port"] for row in admin("SHOW SERVERS") if row["database"] == name}


@dataclass(frozen=True)
class Terminated:
    """The sessions one ``terminate_sessions`` ended: how many, and how many of them were PgBouncer's."""

    sessions: int
    pooled: int


def terminate_sessions(during: float = 0.0) -> Terminated:
    """Terminate every client session on the test database but the test's own, again for ``during`` seconds.

    Directly, those are the workers' sessions, each of which they find dead at
    its next use. Behind a pooler the test's connection holds a server session
    only for the length of a transaction: the sessions are found and ended on
    a direct connection, all but that one. They are then PgBouncer's server
    connections, shared by the workers' transactions and the test's, and the
    workers' direct LISTEN. PgBouncer replaces an idle one unseen: a worker
    sees the loss only of one it was in a transaction on, which a cut of some
    length around the moment of that transaction meets.
    """
    until = time.monotonic() + during
    if connection.vendor == "mysql":
        killed = kill_mysql_connections(connection)
        while time.monotonic() < until:
            killed += kill_mysql_connections(connection)
        return Terminated(killed, 0)
    terminate = (
        "SELECT client_port, pg_terminate_backend(pid) FROM pg_stat_activity"
        " WHERE datname = current_database() AND backend_type = 'client backend' AND pid <> pg_backend_pid()"
    )
    pooled: set[int] = set()
    ended: set[int] = set()
    with direct_connection() if DIRECT_ADDRESS else nullcontext(connection) as session:
        with session.cursor() as cursor:
            while True:
                if DIRECT_ADDRESS:
                    pooled |= server_ports()
                cursor.execute(terminate)
                ended |= {port for port, done in cursor.fetchall() if done}
                if time.monotonic() >= until:
                    break
    if DIRECT_ADDRESS:
        # Until PgBouncer reads a server's FATAL it may still hand that server out:
        # the test's own next statement would meet it. A worker's may, as it should.
        wait_until(lambda: not ended & server_ports(), 10, "PgBouncer to drop the ended server connections")
    return Terminated(len(ended), len(ended & pooled))


def kill_mysql_connections(session: Any) -> int:
    """``KILL CONNECTION`` of every connection to ``session``'s database but ``session``; how many (MySQL)."""
    killed = 0
    with session.cursor() as cursor:
        cursor.execute(
            "SELECT id FROM information_schema.PROCESSLIST WHERE db = DATABASE() AND id <> CONNECTION_ID()"
        )
        for (thread_id,) in cursor.fetchall():
            try:
                cursor.execute(f"KILL CONNECTION {int(thread_id)}")
            except DatabaseError:
                continue  # ended meanwhile (1094: unknown thread)
            killed += 1
    return killed
