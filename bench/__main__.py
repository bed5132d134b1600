"""``python -m bench``: our figures against a raw baseline on the same machine, in one run.

PostgreSQL comes from ``DATABASE_URL`` (its database is created if missing and
migrated); SQLite uses a fresh file under ``var/``. Each database is measured in
a process of its own (``bench/part.py``), ours and the baseline interleaved run
by run, and the medians are printed as a Markdown table with ratios, targets
and each figure's spread across runs. On PostgreSQL, ``runworker --pool
processes`` and ``--pool asyncio`` are also measured against the thread pool
(``bench/processes.py``, ``bench/asyncio_pool.py``),
and drains under per-key concurrency limits against plain ones (``bench/flow.py``),
and, where pgqueuer is installed (the ``bench`` extra), ``runworker`` at its
defaults against pgqueuer at its own (``bench/pgqueuer_peer.py``), and, where
PgBouncer is installed, an idle worker's pickup behind it against the same
without it (``bench/pooler.py``, under a PgBouncer of its own: ``scripts/pgbouncer``);
``--against REF`` adds the thread pool's drains of this tree against those of
the commit REF (``bench/against.py``). See docs/performance.md.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import time
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import Any

from . import against, pgbouncer, report
from .databases import create_database, create_mysql_database

ROOT = Path(__file__).resolve().parent.parent

FULL = {
    "runs": 3,
    "single_jobs": 2_000,
    "many_jobs": 10_000,
    "drain_jobs": 10_000,
    "backlog_jobs": 1_000_000,
    "pickup_jobs": 200,
    "pickup_gap": 0.02,
    "concurrencies": [1, 8, 32, 100, 200],
    "sqlite_concurrencies": [1, 8, 32],
    # --pool processes against the thread pool (bench/processes.py).
    "pool_concurrencies": [2, 4],
    "pool_judged_concurrency": 4,  # where issue 15's bars are read: see docs/performance.md
    "pool_raw_concurrency": 4,  # where issue 19's bar (no-op drain vs raw claim+ack) is read
    "pool_cpu_jobs": 1_000,
    "pool_noop_jobs": 5_000,
    "pool_memory_concurrency": 8,
    "pool_memory_jobs": 2_000,
    # --against REF (bench/against.py): where issue 16 judges a plain queue's drain, ±5%.
    "against_concurrencies": [1, 8, 32],
    # Flow control (bench/flow.py): the limited drain against the plain one.
    "flow_jobs": 100_000,
    "flow_keys": 1_000,
    "flow_concurrencies": [8, 32, 100],
    "flow_timeout": 600.0,  # seconds a drain may take in all
    "flow_stall": 30.0,  # seconds a drain may log no job: a claim that takes nothing more
    # MariaDB or MySQL at MYSQL_URL (bench/mysql_part.py).
    "mysql_concurrencies": [1, 8, 32, 100, 200],
    # runworker against pgqueuer, each at its defaults (bench/pgqueuer_peer.py).
    "peer_jobs": 10_000,
    # Limited jobs behind a backlog (flow.measure_backlog): backlog_jobs keyed jobs, drain_jobs taken.
    "flow_backlog_concurrency": 32,
    # --pool asyncio against the thread pool (bench/asyncio_pool.py).
    "asyncio_io_jobs": 1_000,
    "asyncio_io_seconds": 1.0,
    "asyncio_thread_io": [100, 1_000],
    "asyncio_noop_jobs": 10_000,
    "asyncio_concurrencies": [32, 100, 1_000],
    "asyncio_thread_concurrencies": [8, 32, 100, 200],
}
QUICK = {
    **FULL,
    "runs": 1,
    "single_jobs": 500,
    "drain_jobs": 3_000,
    "backlog_jobs": 100_000,
    "pickup_jobs": 100,
    "concurrencies": [1, 8, 32],
    "sqlite_concurrencies": [1, 8],
    "pool_cpu_jobs": 300,
    "pool_noop_jobs": 2_000,
    "pool_memory_jobs": 500,
    "flow_jobs": 20_000,
    "flow_timeout": 180.0,
    "peer_jobs": 2_000,
    "asyncio_noop_jobs": 3_000,
}


NO_PGQUEUER = "pgqueuer is not installed (pip install -e '.[bench]'; make bench installs it)"


def pgqueuer_version() -> str | None:
    """pgqueuer's version, None if it is not installed: the peers part needs it (bench/pgqueuer_peer.py)."""
    try:
        return version("pgqueuer")
    except PackageNotFoundError:
        return None


def run_part(
    vendor: str, url: str, cfg: dict[str, Any], under_pgbouncer: bool = False
) -> dict[str, list[float]]:
    """Measure ``cfg["parts"]`` on one database in a process of its own; ``under_pgbouncer``: behind
    a private PgBouncer in front of ``url``'s server, which that process finds in ``PGBOUNCER_URL``."""
    env = {**os.environ, "DATABASE_URL": url, "DEBUG": "false"}
    subprocess.run(
        [sys.executable, "manage.py", "migrate", "--noinput", "-v", "0"], cwd=ROOT, env=env, check=True
    )
    command = [sys.executable, "-m", "bench.part", vendor, json.dumps(cfg)]
    if under_pgbouncer:
        command, env = pgbouncer.under(command, url, env)
    done = subprocess.run(
        command,
        cwd=ROOT,
        env=env,
        check=True,
        stdout=subprocess.PIPE,
        text=True,
    )
    samples: dict[str, list[float]] = json.loads(done.stdout.strip().splitlines()[-1])
    return samples


def print_part(title: str, rows: list[report.Row], samples: report.Samples, notes: str = "") -> None:
    """A part's table of medians, then its samples run by run, then its ``notes`` if any."""
    print(report.render(title, rows, samples))
    print(f"\nRun by run:\n{report.paired(samples, rows)}")
    if notes:
        print(notes)
    print()


def optional_part(
    parser: argparse.ArgumentParser,
    only: str | None,
    cfg: dict[str, Any],
    part: str,
    what: str,
    missing: str | None,
) -> str:
    """Add ``part``, which needs what may not be installed, to a full or PostgreSQL run.

    Where ``missing`` says what is not installed: ``--only part`` is an error, and a
    full or PostgreSQL run goes on without it; return the line that says so (printed
    now, and again under the tables), else "".
    """
    if missing is None:
        if only in (None, "postgresql"):
            cfg["parts"].append(part)
        return ""
    if only == part:
        parser.error(f"--only {part}: {missing}")
    if only not in (None, "postgresql"):
        return ""
    skipped = f"{what}: skipped, {missing}"
    print(skipped, file=sys.stderr)
    return skipped


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m bench", description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="smaller counts, one run: for iterating")
    parser.add_argument("--runs", type=int, help="runs per figure (default 3; --quick: 1)")
    parser.add_argument(
        "--only",
        choices=["postgresql", "mysql", "sqlite", "pool", "asyncio", "flow", "against", "peers", "pooler"],
        help="measure one database only (mysql: MariaDB or MySQL at MYSQL_URL); "
        "or on PostgreSQL only --pool processes against threads (pool), "
        "only --pool asyncio against threads (asyncio), "
        "only drains under concurrency limits against plain ones (flow), "
        "only the drains against --against's commit (against), "
        "only runworker against pgqueuer, each at its defaults (peers; needs the bench extra), "
        "or only an idle worker's pickup behind PgBouncer against the same without it "
        "(pooler; needs PgBouncer installed)",
    )
    parser.add_argument(
        "--against",
        metavar="REF",
        help="also drain no-op jobs with the thread pool of this tree and of the commit REF, in turns",
    )
    parser.add_argument("--json", type=Path, help="also write the raw samples to this file")
    args = parser.parse_args()
    cfg: dict[str, Any] = dict(QUICK if args.quick else FULL)
    if args.runs:
        cfg["runs"] = args.runs
    cfg["parts"] = {
        "pool": ["pool"],
        "asyncio": ["asyncio"],
        "flow": ["flow"],
        "against": [],
        "peers": ["peers"],
        "pooler": ["pooler"],
    }.get(args.only or "", ["queue", "pool", "asyncio", "flow"])
    missing_pgqueuer = NO_PGQUEUER if pgqueuer_version() is None else None
    peers_skipped = optional_part(
        parser, args.only, cfg, "peers", "runworker against pgqueuer", missing_pgqueuer
    )
    missing_pgbouncer = pgbouncer.NOT_INSTALLED if pgbouncer.binary() is None else None
    pooler_skipped = optional_part(
        parser, args.only, cfg, "pooler", "pickup behind PgBouncer", missing_pgbouncer
    )
    if args.against:
        commit = against.resolve(args.against)
        cfg["against"] = {"ref": args.against, "commit": commit, "tree": str(against.export(commit))}
        cfg["parts"].append("against")
    elif args.only == "against":
        parser.error("--only against needs --against REF")
    url = os.environ.get("DATABASE_URL", "")
    mysql_url = os.environ.get("MYSQL_URL", "")
    if args.only == "mysql" and not mysql_url.startswith("mysql://"):
        raise SystemExit(
            "set MYSQL_URL to a MariaDB or MySQL database, e.g. mysql://root@127.0.0.1:3306/jq_bench"
        )
    if args.only not in ("sqlite", "mysql") and not url.startswith(("postgres://", "postgresql://")):
        raise SystemExit(
            "set DATABASE_URL to a PostgreSQL database, e.g. postgres://postgres@127.0.0.1/jq_bench"
        )

    started = time.monotonic()
    load_before = os.getloadavg()[0]
    results: dict[str, dict[str, list[float]]] = {}
    if args.only not in ("sqlite", "mysql"):
        create_database(url)
        if "against" in cfg["parts"]:
            tree = Path(cfg["against"]["tree"])
            cfg["against"]["databases"] = against.databases(url, cfg["against"]["commit"], tree)
        # The pooler part in a process of its own, the only one behind a PgBouncer.
        direct = [part for part in cfg["parts"] if part != "pooler"]
        results["postgresql"] = run_part("postgresql", url, {**cfg, "parts": direct}) if direct else {}
        if "pooler" in cfg["parts"]:
            pooled = run_part("postgresql", url, {**cfg, "parts": ["pooler"]}, under_pgbouncer=True)
            results["postgresql"].update(pooled)
    mysql_skipped = ""
    if args.only in (None, "mysql") and mysql_url:
        create_mysql_database(mysql_url)
        results["mysql"] = run_part("mysql", mysql_url, {**cfg, "parts": ["queue"]})
    elif args.only is None:
        mysql_skipped = "MariaDB: skipped, MYSQL_URL is not set (e.g. mysql://root@127.0.0.1:3306/jq_bench)"
    if args.only in (None, "sqlite"):
        sqlite_file = ROOT / "var" / "bench.sqlite3"
        for suffix in ("", "-wal", "-shm"):
            Path(f"{sqlite_file}{suffix}").unlink(missing_ok=True)
        results["sqlite"] = run_part("sqlite", f"sqlite:///{sqlite_file}", cfg)
    if args.json:
        args.json.write_text(json.dumps({"config": cfg, "samples": results}, indent=1))

    print(
        f"\n{platform.node()}: {os.cpu_count()} cores, Python {platform.python_version()}; "
        f"medians of {cfg['runs']} run(s), noise = half the runs' range / median; "
        f"{time.monotonic() - started:.0f}s; load average {load_before:.1f} before, "
        f"{os.getloadavg()[0]:.1f} after\n"
    )
    if "postgresql" in results:
        samples = results["postgresql"]
        if "queue" in cfg["parts"]:
            print_part("PostgreSQL", report.postgresql_rows(samples, cfg["concurrencies"]), samples)
        if "pool" in cfg["parts"]:
            print_part("PostgreSQL: --pool processes", report.pool_rows(samples, cfg), samples)
        if "asyncio" in cfg["parts"]:
            print_part("PostgreSQL: --pool asyncio", report.asyncio_rows(samples, cfg), samples)
        if "flow" in cfg["parts"]:
            title = f"PostgreSQL: flow control, {cfg['flow_jobs']:,} jobs over {cfg['flow_keys']:,} keys"
            print_part(title, report.flow_rows(samples, cfg), samples, notes=report.flow_notes(samples, cfg))
        if "against" in cfg["parts"]:
            title = f"PostgreSQL: this tree against {args.against} ({cfg['against']['commit'][:7]})"
            print_part(title, report.against_rows(samples, cfg), samples)
        if "peers" in cfg["parts"]:
            title = f"PostgreSQL: against pgqueuer {pgqueuer_version()}, {cfg['peer_jobs']:,} no-op jobs"
            print_part(title, report.peer_rows(), samples)
        elif peers_skipped:
            print(f"{peers_skipped}\n")
        if "pooler" in cfg["parts"]:
            title = f"PostgreSQL: an idle worker's pickup behind PgBouncer {pgbouncer.version()}"
            print_part(title, report.pooler_rows(), samples, notes=report.pooler_notes(cfg))
        elif pooler_skipped:
            print(f"{pooler_skipped}\n")
    if "mysql" in results:
        samples = results["mysql"]
        print_part("MariaDB / MySQL", report.mysql_rows(samples, cfg["mysql_concurrencies"]), samples)
    elif mysql_skipped:
        print(f"{mysql_skipped}\n")
    if "sqlite" in results:
        samples = results["sqlite"]
        print(report.render("SQLite", report.sqlite_rows(samples, cfg["sqlite_concurrencies"]), samples))


if __name__ == "__main__":
    main()
