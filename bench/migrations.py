"""How long each migration holds its locks on a database of a million jobs, on PostgreSQL and SQLite.

    python -m bench.migrations [--pg-url postgres://postgres@127.0.0.1:5432/jq_h2_migrations]
                               [--jobs 1000000] [--dead-letters 100000] [--runs 1] [--only postgresql|sqlite]

The figures of docs/upgrading.md. For each database, a template is migrated to
the migration before the first one timed, filled with ``--jobs`` jobs and
``--dead-letters`` dead letters (``bench/migration_rows.py``: mostly done, a
backlog ready, some running; payloads of a few hundred bytes) and vacuumed;
each run migrates a copy of it one migration at a time and times each step.
PostgreSQL has two templates: one at 0001, for 0002-0010, and one filled at
0010 with the columns added since, for 0011-0016. SQLite has one, at 0001,
for 0002-0016. The databases are ``<name>_t0001``, ``<name>_t0010`` and
``<name>_run`` on the server of ``--pg-url``, and files under ``var/``: each
is made anew, and dropped at the end.

A migration runs in one transaction, and on PostgreSQL a lock taken by one of
its statements is held until that transaction commits. After each statement
the script reads ``pg_locks`` for the locks its own connection holds, and
reports for each table the strongest lock and how long it was held: from the
start of the statement that took it to the commit. On SQLite a migration holds
the database's write lock (``BEGIN IMMEDIATE``) for its whole length.

Figures are scaled to a million jobs (measured at ``--jobs``, multiplied by
1,000,000 / ``--jobs``). ``--runs 2`` runs each step twice, each on a fresh
copy, and prints both. On two cores a run at the defaults takes about two
minutes, and ``--runs 2`` about four (docs/upgrading.md quotes one).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
APP = "django_jobqueue"
# PostgreSQL's table lock modes, weakest first.
MODES = [
    "AccessShareLock",
    "RowShareLock",
    "RowExclusiveLock",
    "ShareUpdateExclusiveLock",
    "ShareLock",
    "ShareRowExclusiveLock",
    "ExclusiveLock",
    "AccessExclusiveLock",
]
SHORT = {
    "AccessShareLock": "ACCESS SHARE",
    "RowShareLock": "ROW SHARE",
    "RowExclusiveLock": "ROW EXCLUSIVE",
    "ShareUpdateExclusiveLock": "SHARE UPDATE EXCLUSIVE",
    "ShareLock": "SHARE",
    "ShareRowExclusiveLock": "SHARE ROW EXCLUSIVE",
    "ExclusiveLock": "EXCLUSIVE",
    "AccessExclusiveLock": "ACCESS EXCLUSIVE",
}
# The locks a migration's own connection holds on the queue's tables.
HELD = (
    "SELECT c.relname, l.mode FROM pg_locks l JOIN pg_class c ON c.oid = l.relation "
    "WHERE l.pid = pg_backend_pid() AND l.locktype = 'relation' AND l.granted "
    "AND c.relkind IN ('r', 'p') AND c.relname LIKE 'django\\_jobqueue\\_%'"
)
# Era -> the migrations timed on a template filled at that migration.
ERAS = {
    "postgresql": {"0001": [f"{n:04d}" for n in range(2, 11)], "0010": [f"{n:04d}" for n in range(11, 17)]},
    "sqlite": {"0001": [f"{n:04d}" for n in range(2, 17)]},
}


def say(text: str) -> None:
    print(text, file=sys.stderr, flush=True)


def table_of(relname: str) -> str:
    """The queue's table a relation is, or is a part or a stand-in of, during a migration (0011's)."""
    name = relname.removeprefix("django_jobqueue_")
    for suffix in ("_old", "_new", "_live", "_finished"):
        name = name.removesuffix(suffix)
    return name


# --- one engine, in a process of its own (Django reads DATABASE_URL at start) ---


def setup() -> Any:
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "testproject.settings")
    os.environ["DEBUG"] = "false"
    sys.path.insert(0, str(ROOT))
    import django

    django.setup()
    from django.db import connection

    return connection


def full_name(prefix: str) -> str:
    from django.db.migrations.loader import MigrationLoader

    names = [name for app, name in MigrationLoader(None).disk_migrations if app == APP]
    return next(name for name in names if name.startswith(prefix))


def migrate(connection: Any, prefix: str) -> dict[str, Any]:
    """Migrate the app to ``prefix``; return each statement's time and the locks held until the commit."""
    from django.db.migrations.executor import MigrationExecutor

    statements: list[dict[str, Any]] = []
    marks: dict[str, float] = {}
    first_lock: dict[tuple[str, str], float] = {}

    def progress(action: str, migration: Any = None, fake: bool = False) -> None:
        marks[action] = time.perf_counter()

    def wrapper(execute: Any, sql: str, params: Any, many: bool, context: Any) -> Any:
        started = time.perf_counter()
        try:
            return execute(sql, params, many, context)
        finally:
            statements.append(
                {"sql": " ".join(str(sql).split())[:100], "seconds": time.perf_counter() - started}
            )
            if connection.vendor == "postgresql" and not connection.get_autocommit():
                # The driver's own cursor: this query is not a statement of the migration.
                with connection.connection.cursor() as cursor:
                    for relname, mode in cursor.execute(HELD).fetchall():
                        first_lock.setdefault((table_of(relname), mode), started)

    executor = MigrationExecutor(connection, progress)
    target = [(APP, full_name(prefix))]
    with connection.execute_wrapper(wrapper):
        executor.migrate(target, plan=executor.migration_plan(target))
    committed = marks["apply_success"]
    locks: dict[str, dict[str, Any]] = {}
    for (table, mode), since in first_lock.items():
        if table not in locks or MODES.index(mode) > MODES.index(locks[table]["mode"]):
            locks[table] = {"mode": mode, "seconds": committed - since}
    return {
        "seconds": committed - marks["apply_start"],
        "statements": len(statements),
        "slowest": max(statements, key=lambda s: s["seconds"]) if statements else None,
        "locks": locks,
    }


def pg_template(connection: Any, url: str, era: str, args: argparse.Namespace) -> str:
    from bench.databases import create_database
    from bench.migration_rows import fill

    name = f"{connection.settings_dict['NAME']}_t{era}"
    use(connection, name)
    create_database(with_name(url, name), fresh=True)
    migrate(connection, era)
    started = time.perf_counter()
    fill(connection, args.jobs, args.dead_letters, say)
    with connection.cursor() as cursor:
        cursor.execute("VACUUM ANALYZE")
    say(f"template {name}: filled and vacuumed in {time.perf_counter() - started:.0f} s")
    connection.close()
    return name


def with_name(url: str, name: str) -> str:
    return url.rsplit("/", 1)[0] + "/" + name


def use(connection: Any, name: str) -> None:
    connection.close()
    connection.settings_dict["NAME"] = name


def measure_postgresql(connection: Any, args: argparse.Namespace) -> dict[str, list[dict[str, Any]]]:
    import psycopg

    base = connection.settings_dict["NAME"]
    url = args.pg_url
    admin = with_name(url, "postgres").replace("postgres://", "postgresql://", 1)
    results: dict[str, list[dict[str, Any]]] = {}
    use(connection, "postgres")
    with connection.cursor() as cursor:
        cursor.execute("SHOW server_version")
        say(f"PostgreSQL {cursor.fetchone()[0]}")
    for era, steps in ERAS["postgresql"].items():
        use(connection, base)
        template = pg_template(connection, url, era, args)
        for run in range(args.runs):
            copy = f"{base}_run"
            use(connection, "postgres")
            with psycopg.connect(admin, autocommit=True) as conn:
                conn.execute(f'DROP DATABASE IF EXISTS "{copy}"')
                conn.execute(f'CREATE DATABASE "{copy}" TEMPLATE "{template}" STRATEGY FILE_COPY')
            use(connection, copy)
            for step in steps:
                result = migrate(connection, step)
                results.setdefault(step, []).append(result)
                say(f"run {run + 1} {step}: {summary(result)}")
            use(connection, base)
            with psycopg.connect(admin, autocommit=True) as conn:
                conn.execute(f'DROP DATABASE IF EXISTS "{copy}"')
        with psycopg.connect(admin, autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{template}"')
    return results


def measure_sqlite(connection: Any, args: argparse.Namespace) -> dict[str, list[dict[str, Any]]]:
    from bench.migration_rows import fill

    path = Path(connection.settings_dict["NAME"])
    template = path.with_name(path.stem + "_t0001.sqlite3")
    results: dict[str, list[dict[str, Any]]] = {}
    for era, steps in ERAS["sqlite"].items():
        for leftover in path.parent.glob(path.name + "*"):
            leftover.unlink()
        migrate(connection, era)
        started = time.perf_counter()
        fill(connection, args.jobs, args.dead_letters, say)
        with connection.cursor() as cursor:
            cursor.execute("ANALYZE")
            cursor.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        connection.close()
        shutil.copyfile(path, template)
        say(f"template {template.name}: filled in {time.perf_counter() - started:.0f} s")
        for run in range(args.runs):
            for leftover in path.parent.glob(path.name + "-*"):
                leftover.unlink()
            shutil.copyfile(template, path)
            for step in steps:
                result = migrate(connection, step)
                results.setdefault(step, []).append(result)
                say(f"run {run + 1} {step}: {summary(result)}")
            connection.close()
    for leftover in [template, *path.parent.glob(path.name + "*")]:
        leftover.unlink()
    return results


def summary(result: dict[str, Any]) -> str:
    locks = ", ".join(
        f"{t} {SHORT[v['mode']]} {v['seconds']:.2f} s" for t, v in sorted(result["locks"].items())
    )
    slowest = result["slowest"]
    return (
        f"{result['seconds']:.3f} s, {result['statements']} statements"
        + (f", slowest {slowest['seconds']:.2f} s: {slowest['sql']}" if slowest else "")
        + (f"; locks: {locks}" if locks else "")
    )


def measure(engine: str, args: argparse.Namespace) -> None:
    connection = setup()
    if engine == "postgresql":
        results = measure_postgresql(connection, args)
    else:
        results = measure_sqlite(connection, args)
    names = {step: full_name(step) for step in results}
    print(json.dumps({"engine": engine, "names": names, "results": results}))


# --- the report ---


def run_engine(engine: str, args: argparse.Namespace) -> dict[str, Any]:
    url = args.pg_url if engine == "postgresql" else f"sqlite:///{ROOT / 'var' / 'jq_h2_migrations.sqlite3'}"
    command = [sys.executable, "-m", "bench.migrations", "--engine", engine, *passed(args)]
    env = {**os.environ, "DATABASE_URL": url, "PYTHONPATH": str(ROOT)}
    out = subprocess.run(command, env=env, cwd=ROOT, check=True, stdout=subprocess.PIPE, text=True).stdout
    return dict(json.loads(out.strip().splitlines()[-1]))


def passed(args: argparse.Namespace) -> list[str]:
    return ["--jobs", str(args.jobs), "--dead-letters", str(args.dead_letters), "--runs", str(args.runs)]


def figure(samples: list[float], scale: float) -> str:
    """The median of ``samples`` scaled, and every sample when there are more than one."""
    scaled = [s * scale for s in samples]
    text = seconds(statistics.median(scaled))
    if len(scaled) > 1:
        text += " (" + " / ".join(seconds(s) for s in scaled) + ")"
    return text


def seconds(value: float) -> str:
    return f"{value:.2f} s" if value >= 0.1 else f"{value * 1000:.0f} ms"


def lock_cell(runs: list[dict[str, Any]], table: str, scale: float) -> str:
    held = [run["locks"][table] for run in runs if table in run["locks"]]
    if not held:
        return "-"
    mode = max((h["mode"] for h in held), key=MODES.index)
    return f"{SHORT[mode]}, {figure([h['seconds'] for h in held], scale)}"


def report(found: dict[str, dict[str, Any]], args: argparse.Namespace) -> None:
    scale = 1_000_000 / args.jobs
    pg = found.get("postgresql", {"results": {}, "names": {}})
    lite = found.get("sqlite", {"results": {}, "names": {}})
    names = {**lite["names"], **pg["names"]}
    print(
        f"\nPer million jobs ({args.jobs:,} jobs and {args.dead_letters:,} dead letters measured, "
        f"x{scale:g}); the median of {args.runs} run(s), each run's figure in brackets.\n"
    )
    print("| migration | PostgreSQL: job table | dead letters | other tables | in all | SQLite: in all |")
    print("| --- | --- | --- | --- | --- | --- |")
    for step in sorted(names):
        runs = pg["results"].get(step, [])
        others = sorted({t for run in runs for t in run["locks"]} - {"job", "deadletter", "migrations"})
        other = "; ".join(f"{t}: {lock_cell(runs, t, 1)}" for t in others) or "-"
        total = figure([r["seconds"] for r in runs], scale) if runs else "-"
        sqlite_runs = lite["results"].get(step, [])
        sqlite_total = figure([r["seconds"] for r in sqlite_runs], scale) if sqlite_runs else "-"
        print(
            f"| {names[step]} | {lock_cell(runs, 'job', scale)} | {lock_cell(runs, 'deadletter', scale)} "
            f"| {other} | {total} | {sqlite_total} |"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pg-url", default="postgres://postgres@127.0.0.1:5432/jq_h2_migrations")
    parser.add_argument("--jobs", type=int, default=1_000_000)
    parser.add_argument("--dead-letters", type=int, default=100_000)
    parser.add_argument("--runs", type=int, default=1)
    parser.add_argument("--only", choices=["postgresql", "sqlite"])
    parser.add_argument("--engine", choices=["postgresql", "sqlite"], help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.engine:
        measure(args.engine, args)
        return
    started = time.perf_counter()
    found = {}
    for engine in [args.only] if args.only else ["postgresql", "sqlite"]:
        found[engine] = run_engine(engine, args)
    report(found, args)
    say(f"\nmeasured in {time.perf_counter() - started:.0f} s")


if __name__ == "__main__":
    main()
