"""PgBouncer in the tests: one of a test's own, and the one of ``make test-pgbouncer``.

``pgbouncer(host, port)`` starts a real PgBouncer in transaction mode in front
of ``host:port``, on a free local port, and yields that port; it is stopped
on leaving. Tests that need it skip where no ``pgbouncer`` is installed.

The rest serves the tests that run behind the leg's pooler
(``DATABASE_POOLER_URL``, tests/conftest.py), and directly alike: a
connection to the test database that bypasses the pooler, PgBouncer's admin
console, and the termination of the sessions on the test database.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psycopg
import pytest
from django.conf import settings
from django.db import connection

from tests.worker_support import wait_until

# Behind a pooler, the test database's address without it (tests/conftest.py
# fills it in): where a test's own LISTEN hears (a pooler in transaction mode
# does not pass notifications on) and where the server's sessions are seen.
DIRECT_ADDRESS: dict[str, Any] = {}

PGBOUNCER = shutil.which("pgbouncer") or "/usr/sbin/pgbouncer"

CONFIG = """\
[databases]
* = host={host} port={port}

[pgbouncer]
listen_addr = 127.0.0.1
listen_port = {listen}
unix_socket_dir =
auth_type = trust
auth_file = {dir}/users.txt
pool_mode = transaction
ignore_startup_parameters = extra_float_digits,options
logfile = {dir}/pgbouncer.log
"""


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


@contextmanager
def pgbouncer(host: str, port: int) -> Iterator[int]:
    """Run PgBouncer in transaction mode in front of ``host:port``; yield the port it listens on."""
    if not os.path.exists(PGBOUNCER):
        pytest.skip("pgbouncer is not installed")
    folder = Path(tempfile.mkdtemp(prefix="pgbouncer-"))
    listen = free_port()
    (folder / "users.txt").write_text('"postgres" ""\n')
    ini = folder / "pgbouncer.ini"
    ini.write_text(CONFIG.format(host=host, port=port, listen=listen, dir=folder))
    command = [PGBOUNCER, "-q", str(ini)]
    if os.geteuid() == 0:  # PgBouncer will not run as root
        shutil.chown(folder, "postgres")
        for path in folder.iterdir():
            shutil.chown(path, "postgres")
        command = ["runuser", "-u", "postgres", "--", *command]
    # In the foreground, in a process group of its own: stopped and reaped here.
    process = subprocess.Popen(
        command, start_new_session=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    try:
        _wait_listening(listen, folder)
        yield listen
    finally:
        os.killpg(process.pid, signal.SIGTERM)
        process.wait(10)
        shutil.rmtree(folder, ignore_errors=True)


def _wait_listening(port: int, folder: Path, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while True:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return
        except OSError:
            if time.monotonic() > deadline:
                log = (folder / "pgbouncer.log").read_text() if (folder / "pgbouncer.log").exists() else ""
                pytest.fail(f"pgbouncer did not listen on {port}:\n{log}")
            time.sleep(0.05)


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
    terminate = (
        "SELECT client_port, pg_terminate_backend(pid) FROM pg_stat_activity"
        " WHERE datname = current_database() AND backend_type = 'client backend' AND pid <> pg_backend_pid()"
    )
    pooled: set[int] = set()
    ended: set[int] = set()
    until = time.monotonic() + during
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
