"""scripts/pg: which PostgreSQL `make test` uses when none was given, for real.

No database of the suite is involved: each test runs the script as a
subprocess, with the default address pointed at a port of the test's choosing.
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

import pytest

from tests.worker_support import ROOT

SCRIPT = str(ROOT / "scripts" / "pg")
SHOW_URL = 'echo "$PG_URL"'


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def run_script(*args: str, **env: str) -> subprocess.CompletedProcess[str]:
    environment = {k: v for k, v in os.environ.items() if not k.startswith("PG_")}
    return subprocess.run(
        [SCRIPT, *args], env={**environment, **env}, capture_output=True, text=True, timeout=120
    )


@pytest.fixture
def pg_home() -> Iterator[str]:
    # Not under pytest's tmp_path: as root the cluster belongs to the postgres
    # user, who cannot pass through pytest's private temporary directory.
    home = tempfile.mkdtemp(prefix="jq-test-pg-")
    try:
        yield home
    finally:
        run_script("stop", PG_HOME=home)
        shutil.rmtree(home, ignore_errors=True)


@pytest.fixture
def no_binaries(tmp_path: Path) -> str:
    """A PG_BINDIR with nothing in it: PostgreSQL as if not installed."""
    return str(tmp_path)


def test_without_postgresql_one_line_says_what_to_install(no_binaries: str, pg_home: str) -> None:
    result = run_script(
        "run", "sh", "-c", "exit 9", PG_BINDIR=no_binaries, PG_DEFAULT_PORT=str(free_port()), PG_HOME=pg_home
    )
    assert result.returncode == 1
    assert result.stdout == ""
    assert result.stderr.splitlines() == [
        "scripts/pg: PostgreSQL not found: install it (apt-get install postgresql, brew install postgresql)"
        " or set PG_URL"
    ]


def test_without_postgresql_or_skip_succeeds_without_running_the_command(
    no_binaries: str, pg_home: str
) -> None:
    result = run_script(
        "run", "--or-skip", "sh", "-c", "echo ran; exit 9",
        PG_BINDIR=no_binaries, PG_DEFAULT_PORT=str(free_port()), PG_HOME=pg_home,
    )  # fmt: skip
    assert result.returncode == 0
    assert result.stdout == ""
    [line] = result.stderr.splitlines()
    assert line.endswith("or set PG_URL; running the SQLite suites only")


def test_a_given_pg_url_is_used_as_is(no_binaries: str, pg_home: str) -> None:
    given = "postgres://someone@db.example:6543/elsewhere"
    result = run_script("run", "sh", "-c", SHOW_URL, PG_URL=given, PG_BINDIR=no_binaries, PG_HOME=pg_home)
    assert (result.returncode, result.stdout) == (0, given + "\n")
    assert not Path(pg_home, "data").exists()


def test_the_default_address_is_used_when_it_answers(no_binaries: str, pg_home: str) -> None:
    with socket.create_server(("127.0.0.1", 0)) as server:
        port = server.getsockname()[1]
        result = run_script(
            "run", "sh", "-c", SHOW_URL,
            PG_DEFAULT_PORT=str(port), PG_DATABASE="jq_x", PG_BINDIR=no_binaries, PG_HOME=pg_home,
        )  # fmt: skip
    assert (result.returncode, result.stdout) == (0, f"postgres://postgres@127.0.0.1:{port}/jq_x\n")
    assert not Path(pg_home, "data").exists()


CONNECT_THEN_FAIL = (
    "import os, psycopg; "
    "psycopg.connect(os.environ['PG_URL'].rsplit('/', 1)[0] + '/postgres').close(); "
    "print(os.environ['PG_URL']); raise SystemExit(3)"
)


def test_a_private_cluster_serves_the_command_and_stops_after_it_fails(pg_home: str) -> None:
    if run_script("bindir").returncode != 0:
        pytest.skip("no PostgreSQL binaries to start a private cluster")
    closed_port = str(free_port())
    urls, clusters = [], set()
    for _ in range(2):  # the second run reuses the cluster the first created
        result = run_script(
            "run", sys.executable, "-c", CONNECT_THEN_FAIL, PG_DEFAULT_PORT=closed_port, PG_HOME=pg_home
        )
        assert result.returncode == 3, result.stderr
        urls.append(result.stdout.strip())
        clusters.add(Path(pg_home, "data", "PG_VERSION").stat().st_ino)
        status = run_script("status", PG_HOME=pg_home)
        assert status.returncode == 3, status.stdout  # pg_ctl's "no server running"
    port = Path(pg_home, "port").read_text().strip()
    assert urls == [f"postgres://postgres@127.0.0.1:{port}/jobqueue"] * 2
    assert len(clusters) == 1
    assert "stopped the PostgreSQL" in result.stderr


def test_private_uses_the_private_cluster_whatever_else_answers(pg_home: str) -> None:
    if run_script("bindir").returncode != 0:
        pytest.skip("no PostgreSQL binaries to start a private cluster")
    with socket.create_server(("127.0.0.1", 0)) as server:
        answering = str(server.getsockname()[1])
        result = run_script(
            "private", sys.executable, "-c", CONNECT_THEN_FAIL,
            PG_URL="postgres://someone@db.example:6543/elsewhere", PG_DEFAULT_PORT=answering, PG_HOME=pg_home,
        )  # fmt: skip
    assert result.returncode == 3, result.stderr
    port = Path(pg_home, "port").read_text().strip()
    assert result.stdout.strip() == f"postgres://postgres@127.0.0.1:{port}/jobqueue"
    assert "stopped the PostgreSQL" in result.stderr
