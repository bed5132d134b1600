"""A migration is safe while workers of the previous migration state still run: nothing is lost.

The scenario, on a database of its own: the code of the previous migration
state (``PREVIOUS_MIGRATION_STATE``, taken from this repository's history with
``git archive``) migrates it; two of its workers run, real ``runworker``
processes of that tree, while old producers enqueue; this checkout's
``migrate`` runs under them; two new workers start and new code enqueues; the
old workers are sent SIGTERM and drain; the queue empties. Every job must have
run exactly once, each that fails for good must be in the dead letters once,
and the old workers must have gone on claiming and finishing jobs after the
migration, on the new schema.

Adding a migration: set ``PREVIOUS_MIGRATION_STATE`` to the last commit
without it (``git rev-parse HEAD`` before you commit it; afterwards the parent
of the commit that added it), and run this test on PostgreSQL and on SQLite.
``test_the_baseline_is_just_before_the_newest_migration`` fails until the
constant is moved, and says how. A migration the old workers cannot run under
fails the scenario: docs/development.md, "Writing a migration", says how to
write one that they can.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tarfile
import time
from collections import Counter
from collections.abc import Callable, Iterator
from functools import partial
from io import BytesIO
from pathlib import Path
from typing import Any
from urllib.parse import quote

import pytest
from django.db import connection

from django_jobqueue.models import DeadLetter, Job
from tests.faults.chaos import Fleet
from tests.worker_support import ROOT, WorkerProcess, database_url, first_within, run_manage

# The last commit before migration 0019_mysql_status_indexes. Whoever adds migration 0020 sets
# this to the last commit without 0020: `git rev-parse HEAD` before committing it, or afterwards
# git rev-parse "$(git log -n1 --format=%H -- django_jobqueue/migrations/0020_*.py)^".
PREVIOUS_MIGRATION_STATE = "7a11d5901d815853e2743e261a5b0784814b594c"

MIGRATIONS = "django_jobqueue/migrations"
# What the old tree needs to run manage.py migrate, runworker and the producer.
OLD_FILES = ("django_jobqueue", "testproject", "manage.py")
# The job and the producer, on both trees' PYTHONPATH.
UPGRADE_CODE = ROOT / "tests" / "upgrade"
PRODUCER = UPGRADE_CODE / "upgrade_producer.py"

# n in range(JOBS): old code enqueues [0, MIGRATE_AT) before the migration and [MIGRATE_AT,
# NEW_FROM) across and after it, held at HOLD_AT until it has finished; new code [NEW_FROM, JOBS).
JOBS = 3_000
MIGRATE_AT = 1_200
HOLD_AT = 1_350
NEW_FROM = 1_500
FAILING = frozenset(n for n in range(JOBS) if n % 100 == 37)  # as upgrade_producer.fails
# Runs each worker generation must have made before the old one is stopped.
RUNS_EACH = 50
WORKER_ARGS = ("--concurrency", "4", "--poll-interval", "0.1", "--shutdown-timeout", "30")


def git(*args: str) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run(["git", "-C", str(ROOT), *args], capture_output=True, timeout=60)


def require_commit(commit: str) -> None:
    """Fail, saying how to fetch it, unless this repository's history holds ``commit``."""
    if git("cat-file", "-e", f"{commit}^{{commit}}").returncode == 0:
        return
    if git("rev-parse", "--git-dir").returncode != 0:
        why = f"{ROOT} is not a git clone: run it in one, with the whole history."
    elif git("rev-parse", "--is-shallow-repository").stdout.strip() == b"true":
        why = "the clone is shallow: run `git fetch --unshallow` (a CI checkout needs the whole history too)."
    else:
        why = "fetch the history of main (`git fetch origin main`)."
    pytest.fail(
        f"the upgrade test needs commit {commit}, the code of the previous migration state "
        f"(PREVIOUS_MIGRATION_STATE), and this repository's history lacks it: {why}",
        pytrace=False,
    )


def migrations_at(commit: str) -> list[str]:
    """The migration modules of ``commit``, by name, in order."""
    require_commit(commit)
    listed = git("ls-tree", "--name-only", commit, f"{MIGRATIONS}/").stdout.decode().split()
    return sorted(Path(path).stem for path in listed if Path(path).name[:4].isdigit())


def migrations_here() -> list[str]:
    return sorted(path.stem for path in (ROOT / MIGRATIONS).glob("[0-9][0-9][0-9][0-9]_*.py"))


def previous_tree(destination: Path, commit: str = PREVIOUS_MIGRATION_STATE) -> Path:
    """Write the code of ``commit`` that the old workers run into ``destination``; return it."""
    require_commit(commit)
    archive = git("archive", "--format=tar", commit, *OLD_FILES)
    assert archive.returncode == 0, archive.stderr.decode()
    with tarfile.open(fileobj=BytesIO(archive.stdout)) as tar:
        tar.extractall(destination, filter="data")
    return destination


def test_the_baseline_is_just_before_the_newest_migration():
    old, new = migrations_at(PREVIOUS_MIGRATION_STATE), migrations_here()
    assert old == new[:-1], (
        f"PREVIOUS_MIGRATION_STATE ({PREVIOUS_MIGRATION_STATE[:12]}) has the migrations up to "
        f"{old[-1]}, this checkout up to {new[-1]}: the upgrade test must start from the state just "
        f"before the newest migration. Set PREVIOUS_MIGRATION_STATE in {Path(__file__).name} to the "
        f"last commit without {new[-1]}: `git rev-parse HEAD` while it is not committed, else "
        f'git rev-parse "$(git log -n1 --format=%H -- {MIGRATIONS}/{new[-1]}.py)^"'
    )


def test_a_missing_baseline_fails_and_says_how_to_fetch_it(tmp_path):
    with pytest.raises(pytest.fail.Exception, match=f"needs commit {'0' * 40}.*lacks it: .*`git fetch "):
        previous_tree(tmp_path, commit="0" * 40)


# -- the scenario ---------------------------------------------------------------------------------


class Database:
    """The scenario's own database: its URL for the processes, and a connection of the test's to it."""

    def __init__(self, url: str, name: str) -> None:
        self.url = url
        self.connection = connection.copy()
        self.connection.settings_dict["NAME"] = name

    def rows(self, sql: str) -> list[tuple[Any, ...]]:
        with self.connection.cursor() as cursor:
            cursor.execute(sql)
            return list(cursor.fetchall())

    def applied(self) -> str:
        """The newest migration of the queue applied."""
        return self.rows("SELECT MAX(name) FROM django_migrations WHERE app = 'django_jobqueue'")[0][0]

    def numbers(self, table: str, *columns: str) -> list[tuple[Any, ...]]:
        """Each row's payload ``n``, with ``columns``."""
        rows = self.rows(f"SELECT {', '.join(('payload', *columns))} FROM {table}")
        return [(_json(payload)["n"], *rest) for payload, *rest in rows]

    def live_jobs(self) -> int:
        live = "'ready', 'running', 'waiting'"
        return self.rows(f"SELECT COUNT(*) FROM {Job._meta.db_table} WHERE status IN ({live})")[0][0]


def _json(value: Any) -> Any:
    return json.loads(value) if isinstance(value, str) else value


@pytest.fixture
def database(transactional_db: None, tmp_path: Path) -> Iterator[Database]:
    """A database of the scenario's own, empty: a PostgreSQL database beside the test one, or a file."""
    if connection.vendor == "sqlite":
        path = tmp_path / "upgrade.sqlite3"
        db = Database(f"sqlite:///{path}", str(path))
        yield db
        db.connection.close()
        return
    if connection.vendor == "mysql" and not has_mysql_engine(PREVIOUS_MIGRATION_STATE):
        pytest.skip(
            "the code of the previous migration state has no MySQL engine: "
            "no workers of it ran on MySQL to upgrade"
        )
    name = f"{connection.settings_dict['NAME']}_upgrade"
    quoted = connection.ops.quote_name(name)
    force = " WITH (FORCE)" if connection.vendor == "postgresql" else ""
    with connection.cursor() as cursor:
        cursor.execute(f"DROP DATABASE IF EXISTS {quoted}{force}")
        cursor.execute(f"CREATE DATABASE {quoted}")
    db = Database(f"{database_url().rsplit('/', 1)[0]}/{quote(name)}", name)
    yield db
    db.connection.close()
    with connection.cursor() as cursor:
        cursor.execute(f"DROP DATABASE IF EXISTS {quoted}{force}")


def has_mysql_engine(commit: str) -> bool:
    """Whether the code of ``commit`` runs on MySQL (it has the engine module)."""
    require_commit(commit)
    return git("cat-file", "-e", f"{commit}:django_jobqueue/queue/engines/mysql.py").returncode == 0


@pytest.fixture
def spawn(tmp_path: Path) -> Iterator[Callable[..., subprocess.Popen[str]]]:
    """Start a producer: ``spawn(tree, env, *args)``; any still running at teardown is killed."""
    started: list[subprocess.Popen[str]] = []

    def start(tree: Path, env: dict[str, str], *args: str) -> subprocess.Popen[str]:
        command = [sys.executable, str(PRODUCER), *args]
        process = subprocess.Popen(
            command, cwd=tree, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
        )
        started.append(process)
        return process

    yield start
    for process in started:
        if process.poll() is None:
            process.send_signal(signal.SIGKILL)
            process.wait(10)


def finished(producer: subprocess.Popen[str], package: Path, timeout: float = 120) -> None:
    """Wait for ``producer``; check that it enqueued all its jobs with the code of ``package``."""
    output, _ = producer.communicate(timeout=timeout)
    assert producer.returncode == 0, output
    assert output.rstrip().endswith(f"with {package}"), output


def ledger(path: Path) -> list[dict[str, Any]]:
    """The runs that the jobs noted (``upgrade_jobs.record``)."""
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line]


def runs_by(runs: list[dict[str, Any]], package: Path, after: float = 0.0) -> int:
    return sum(1 for run in runs if run["package"] == str(package) and run["time"] > after)


def tails(fleet: Fleet, lines: int = 15) -> str:
    """The last ``lines`` of each worker's log, less its one line per job."""
    said = {
        worker_id: [line for line in log.splitlines() if " outcome=" not in line][-lines:]
        for worker_id, log in fleet.logs().items()
    }
    return "\n".join(f"--- {worker_id}:\n" + "\n".join(kept) for worker_id, kept in said.items())


# Not marked slow (about 35 s a database): the Django 6 suites run it too, since a migration's SQL
# is the schema editor's of the Django that runs it.
def test_workers_of_the_previous_migration_state_run_on_through_migrate(
    database: Database, start_worker: Callable[..., WorkerProcess], spawn: Callable[..., Any], tmp_path: Path
):
    old_tree = previous_tree(tmp_path / "previous")
    old_package = (old_tree / "django_jobqueue").resolve()
    new_package = (ROOT / "django_jobqueue").resolve()
    old_head, new_head = migrations_at(PREVIOUS_MIGRATION_STATE)[-1], migrations_here()[-1]
    assert old_head != new_head, "the previous migration state has every migration of this checkout"
    ledger_path = tmp_path / "ledger.jsonl"
    env = {
        **os.environ,
        "DATABASE_URL": database.url,
        "JOBQUEUE_MODULES": "upgrade_jobs",
        "UPGRADE_LEDGER": str(ledger_path),
        "PYTHONUNBUFFERED": "1",
    }
    # Each tree comes first on its processes' path, before the editable install (whichever checkout
    # that points at): the package each run names in the ledger checks it.
    old_env = {**env, "PYTHONPATH": os.pathsep.join([str(old_tree), str(UPGRADE_CODE)])}
    new_env = {**env, "PYTHONPATH": os.pathsep.join([str(ROOT), str(UPGRADE_CODE)])}

    migrated = run_manage("migrate", "--no-input", env=old_env, root=old_tree)
    assert migrated.returncode == 0, migrated.stdout + migrated.stderr
    assert database.applied() == old_head

    old = Fleet(partial(start_worker, root=old_tree), "old", 2, WORKER_ARGS, env=old_env)
    old.wait_started()
    finished(spawn(old_tree, old_env, "0", str(MIGRATE_AT), "100"), old_package)

    # Old code goes on enqueueing across the migration, and after it once the gate file exists.
    gate = tmp_path / "migrated"
    hold = ("--hold-at", str(HOLD_AT), "--until", str(gate))
    across = spawn(old_tree, old_env, str(MIGRATE_AT), str(NEW_FROM), "50", *hold)
    migrated = run_manage("migrate", "--no-input", env=new_env)
    migrated_at = time.time()
    gate.touch()
    assert migrated.returncode == 0, migrated.stdout + migrated.stderr
    assert database.applied() == new_head

    new_jobs = spawn(ROOT, new_env, str(NEW_FROM), str(JOBS), "100")
    new = Fleet(start_worker, "new", 2, WORKER_ARGS, env=new_env)
    new.wait_started()

    def both_generations_ran() -> bool:
        runs = ledger(ledger_path)
        return min(runs_by(runs, old_package, migrated_at), runs_by(runs, new_package)) >= RUNS_EACH

    if not first_within(both_generations_ran, 60):
        runs = ledger(ledger_path)
        pytest.fail(
            f"in 60 s after the migration old workers ran {runs_by(runs, old_package, migrated_at)} jobs "
            f"and new ones {runs_by(runs, new_package)}, not {RUNS_EACH} each:\n{tails(old)}\n{tails(new)}"
        )
    old.stop(timeout=60)  # SIGTERM: they drain and exit 0
    finished(across, old_package)
    finished(new_jobs, new_package)
    if not first_within(lambda: database.live_jobs() == 0, 120):
        pytest.fail(f"{database.live_jobs()} jobs still live after 120 s:\n{tails(new)}")
    new.stop(timeout=60)

    runs = ledger(ledger_path)
    times = Counter(run["n"] for run in runs)
    assert [n for n in range(JOBS) if not times[n]] == [], "jobs never run"
    assert {n: count for n, count in times.items() if count > 1} == {}, "jobs run more than once"
    assert set(times) == set(range(JOBS))
    for run in runs:
        package = old_package if run["worker"].startswith("old-") else new_package
        assert run["package"] == str(package), run
    done = Counter(n for n, status in database.numbers(Job._meta.db_table, "status") if status == "done")
    assert done == Counter(set(range(JOBS)) - FAILING)
    assert Counter(n for (n,) in database.numbers(DeadLetter._meta.db_table)) == Counter(FAILING)
    print(
        f"\nUPGRADE {connection.vendor}: {len(runs)} runs, {runs_by(runs, old_package)} by old workers "
        f"({runs_by(runs, old_package, migrated_at)} after the migration), {runs_by(runs, new_package)} "
        f"by new ones, {len(FAILING)} dead letters"
    )
