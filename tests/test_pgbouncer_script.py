"""scripts/pgbouncer: the PgBouncer of ``make test-pgbouncer``, for real.

No database of the suite is involved: each test runs the script as a
subprocess, in front of the suite's PostgreSQL server (its ``postgres``
database), with a home of its own.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import urlsplit

import environ
import psycopg
import pytest

from tests.worker_support import ROOT

SCRIPT = str(ROOT / "scripts" / "pgbouncer")
NOT_FOUND = "scripts/pgbouncer: PgBouncer not found: install it (apt-get install pgbouncer) or set PGBOUNCER"


def run_script(*args: str, **env: str) -> subprocess.CompletedProcess[str]:
    environment = {k: v for k, v in os.environ.items() if not k.startswith(("PG_", "PGBOUNCER"))}
    return subprocess.run(
        [SCRIPT, *args], env={**environment, **env}, capture_output=True, text=True, timeout=120
    )


@pytest.fixture
def home() -> Iterator[str]:
    # Not under pytest's tmp_path: as root PgBouncer runs as the postgres user,
    # who cannot pass through pytest's private temporary directory.
    path = tempfile.mkdtemp(prefix="jq-test-pgbouncer-")
    try:
        yield path
    finally:
        run_script("stop", PGBOUNCER_HOME=path)  # what a failed test left running
        shutil.rmtree(path, ignore_errors=True)


@pytest.fixture
def server_url(home: str) -> str:
    """The suite's PostgreSQL server, its ``postgres`` database."""
    url = os.environ.get("DATABASE_URL", "")
    if not url.startswith(("postgres://", "postgresql://")):
        pytest.skip("PostgreSQL only")
    config = environ.Env.db_url_config(url)
    server = f"postgres://{config['USER']}@{config['HOST'] or '127.0.0.1'}:{config['PORT'] or 5432}/postgres"
    if (
        "PgBouncer not found"
        in run_script("run", "--or-skip", "true", PG_URL=server, PGBOUNCER_HOME=home).stderr
    ):
        pytest.skip("PgBouncer is not installed")
    return server


def listening(port: int) -> bool:
    try:
        socket.create_connection(("127.0.0.1", port), 1).close()
    except OSError:
        return False
    return True


def test_without_pgbouncer_one_line_says_what_to_install(home: str) -> None:
    result = run_script(
        "run", "sh", "-c", "echo ran", PGBOUNCER="/nonexistent/pgbouncer", PGBOUNCER_HOME=home
    )
    assert (result.returncode, result.stdout) == (1, "")
    assert result.stderr.splitlines() == [NOT_FOUND]


def test_without_pgbouncer_or_skip_succeeds_without_running_the_command(home: str) -> None:
    result = run_script(
        "run",
        "--or-skip",
        "sh",
        "-c",
        "echo ran; exit 9",
        PGBOUNCER="/nonexistent/pgbouncer",
        PGBOUNCER_HOME=home,
    )
    assert (result.returncode, result.stdout) == (0, "")
    assert len(result.stderr.splitlines()) == 1


QUERY_THEN_FAIL = """
import os, psycopg
pooled, direct = os.environ["PGBOUNCER_URL"], os.environ["PG_URL"]
with psycopg.connect(pooled, autocommit=True) as conn:
    print(conn.execute("SELECT current_database() || ' ' || current_setting('port')").fetchone()[0])
console = psycopg.connect(pooled.rsplit("/", 1)[0] + "/pgbouncer", autocommit=True)
cursor = psycopg.ClientCursor(console)
cursor.execute("SHOW CONFIG")
print(dict((row[0], row[1]) for row in cursor.fetchall())["pool_mode"])
print(pooled.rsplit(":", 1)[1].split("/")[0])
raise SystemExit(3)
"""


def test_a_query_goes_through_pgbouncer_in_transaction_mode_and_it_stops_after(
    server_url: str, home: str
) -> None:
    result = run_script("run", sys.executable, "-c", QUERY_THEN_FAIL, PG_URL=server_url, PGBOUNCER_HOME=home)

    assert result.returncode == 3, result.stderr
    server_port = server_url.rsplit(":", 1)[1].split("/")[0]
    database_and_port, pool_mode, pooler_port = result.stdout.split("\n")[:3]
    assert database_and_port == f"postgres {server_port}"
    assert pool_mode == "transaction"
    assert pooler_port != server_port
    assert "PgBouncer in transaction mode on port" in result.stderr
    log = Path(home, "pgbouncer.log").read_text()
    assert "login attempt: db=postgres" in log
    assert not Path(home, "pgbouncer.pid").exists(), "PgBouncer stopped and removed its pid file"
    assert not listening(int(pooler_port)), "nothing listens on PgBouncer's port any more"


def test_start_without_pgbouncer_or_a_server_says_so_in_one_line(home: str) -> None:
    missing = run_script("start", PGBOUNCER="/nonexistent/pgbouncer", PGBOUNCER_HOME=home)
    assert (missing.returncode, missing.stdout, missing.stderr.splitlines()) == (1, "", [NOT_FOUND])
    unset = run_script("start", PGBOUNCER_HOME=home)
    assert (unset.returncode, unset.stdout) == (1, "")
    assert unset.stderr.splitlines() == [
        "scripts/pgbouncer: PG_URL is not set: the server to stand in front of (scripts/pg start prints one)"
    ]


def test_start_prints_the_url_and_pgbouncer_runs_until_stop(server_url: str, home: str) -> None:
    started = run_script("start", PG_URL=server_url, PGBOUNCER_HOME=home)

    assert started.returncode == 0, started.stderr
    pooled = started.stdout.strip()
    server, pooler = urlsplit(server_url), urlsplit(pooled)
    assert pooled == server._replace(netloc=f"{server.username}@127.0.0.1:{pooler.port}").geturl()
    assert pooler.port is not None and pooler.port != server.port
    with psycopg.connect(pooled, autocommit=True) as conn:
        answer = conn.execute("SELECT current_database(), current_setting('port')::int").fetchone()
        assert answer == ("postgres", server.port)
    # Running, it is found again, by `start` and by `run`, which leaves it running.
    again = run_script("start", PG_URL=server_url, PGBOUNCER_HOME=home)
    assert (again.returncode, again.stdout.strip()) == (0, pooled)
    ran = run_script("run", "sh", "-c", 'echo "$PGBOUNCER_URL"', PG_URL=server_url, PGBOUNCER_HOME=home)
    assert (ran.returncode, ran.stdout.strip()) == (0, pooled)
    assert listening(pooler.port)
    elsewhere = server._replace(netloc=f"{server.username}@127.0.0.1:{(server.port or 5432) + 1}").geturl()
    refused = run_script("start", PG_URL=elsewhere, PGBOUNCER_HOME=home)
    assert refused.returncode == 1 and refused.stderr.endswith("stop it first\n"), refused.stderr

    stopped = run_script("stop", PGBOUNCER_HOME=home)

    assert (stopped.returncode, stopped.stdout, stopped.stderr) == (0, "", "")
    assert not Path(home, "pgbouncer.pid").exists(), "PgBouncer stopped and removed its pid file"
    assert not listening(pooler.port), "nothing listens on PgBouncer's port any more"
    assert run_script("stop", PGBOUNCER_HOME=home).returncode == 0, "stopping it again is no error"
