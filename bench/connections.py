"""``python -m bench.connections``: a worker's database connections, counted, direct and behind PgBouncer.

Starts real ``manage.py runworker`` processes at each ``--concurrency`` and
``--pool``, with ``CONN_MAX_AGE`` 0 (Django's default) and 600, running jobs
that query the database (``bench.query``), and counts their connections in
four phases of each worker's life:

- *idle*: the first second after its listener heard its probe, no job yet;
- *busy*: as many jobs as slots running at once (the peak);
- *after*: from 1 to 1.5 s after the last of them finished, the worker idle again;
- *stopping*: as many jobs again, and ``SIGTERM`` once every one runs (half a
  second after all are claimed): the worker waits for them and writes their
  outcomes on its way out.

Each phase's figure is the most seen in it, sampled every 20 ms. The jobs:

- ``query``: each job is one query (``pg_sleep``) the job long: every slot is
  inside a query at once, the most server connections a pooler must lend;
- ``brief``: each job queries once, then works in Python;
- ``duties``: as ``query``, each job also reporting progress (``ctx.progress``)
  and the worker declaring a schedule: every duty of the worker holds its
  connection;
- ``fails``: as ``query``, each job then failing (``bench.query_fails``, one
  attempt): the worker records a dead letter for each.

*Direct*, the worker's connections go to PostgreSQL, and its sessions are
counted in ``pg_stat_activity`` by their ``application_name``. *Behind
PgBouncer* (transaction mode), the worker's ``DATABASE_URL`` goes through a
private PgBouncer, its ``LISTEN`` on a direct alias (``LISTEN_DATABASE``), as
docs/deployment.md says to set it; PgBouncer's admin console counts its client
connections (``SHOW CLIENTS``, by ``application_name``) and the server
connections of the database's pool (``SHOW POOLS``: ``sv_active``, the ones
inside a transaction at the moment, and the pool's open ones, ``sv_active`` +
``sv_idle`` + ``sv_used`` + ``sv_tested`` + ``sv_login``), the pool emptied
(``KILL``, ``RESUME``) before each worker; ``pg_stat_activity`` counts its
direct sessions, the ``LISTEN``.

The PgBouncer is its own: without ``PGBOUNCER_URL`` the script runs itself
again under ``scripts/pgbouncer run`` (``PGBOUNCER_HOME`` says where it keeps
its files). Without PgBouncer installed it counts the direct connections only,
and says so. ``DATABASE_URL`` names the PostgreSQL database (created if
missing, migrated, its queue emptied). See docs/workers.md, "The connection
budget".
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlencode, urlsplit

from . import pgbouncer
from .databases import create_database
from .worker import ROOT, LongRunningWorker, worker_env

PHASES = ("idle", "busy", "after", "stopping")
JOBS = ("query", "brief", "duties", "fails")
HEARD = r"LISTEN on alias '\w+' heard its probe"
SAMPLE_EVERY = 0.02
# A schedule a worker declares for the ``duties`` jobs: its scheduler then keeps its connection.
SCHEDULES = {"bench-connections": {"job": "bench.noop", "every": 3600}}


def say(text: str) -> None:
    print(text, file=sys.stderr, flush=True)


@dataclass(frozen=True)
class Setup:
    pool: str
    concurrency: int
    conn_max_age: int
    jobs: str
    pooled: bool

    @property
    def tag(self) -> str:
        """The worker's ``application_name``: its connections, and only they, carry it."""
        route = "pgb" if self.pooled else "direct"
        return f"jq-conn-{route}-{self.pool}-{self.concurrency}-{self.conn_max_age}-{self.jobs}"


@dataclass
class Peaks:
    """The most of each count seen in each phase."""

    counts: dict[str, dict[str, int]] = field(default_factory=dict)

    def see(self, phase: str, sample: dict[str, int]) -> None:
        seen = self.counts.setdefault(phase, {})
        for name, value in sample.items():
            seen[name] = max(seen.get(name, 0), value)

    def get(self, phase: str, name: str) -> int:
        return self.counts.get(phase, {}).get(name, 0)

    def peak(self, name: str) -> int:
        return max(self.get(phase, name) for phase in PHASES)


class Counter:
    """Counts a worker's connections: its sessions on PostgreSQL, and PgBouncer's clients and servers."""

    def __init__(self, url: str, pooled_url: str | None) -> None:
        import psycopg

        self.database = urlsplit(url).path.lstrip("/")
        self.direct = psycopg.connect(url.replace("postgres://", "postgresql://", 1), autocommit=True)
        self.admin = None
        if pooled_url:
            parts = urlsplit(pooled_url)
            # The admin console speaks the simple protocol only: no prepared statements.
            self.admin = psycopg.connect(
                host=parts.hostname,
                port=parts.port,
                user=parts.username or "postgres",
                dbname="pgbouncer",
                autocommit=True,
                prepare_threshold=None,
            )

    def close(self) -> None:
        self.direct.close()
        if self.admin is not None:
            self.admin.close()

    def empty_pool(self) -> None:
        """Close the database's server connections in PgBouncer, so that a worker's are counted from 0."""
        if self.admin is not None:
            self.admin.execute(f"KILL {self.database}")
            self.admin.execute(f"RESUME {self.database}")

    def sample(self, setup: Setup) -> dict[str, int]:
        """The worker's connections now; behind PgBouncer, its ``sessions`` are its direct ``LISTEN``."""
        direct = listen_tag(setup) if setup.pooled else setup.tag
        row = self.direct.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE application_name = %s", [direct]
        ).fetchone()
        counts = {"sessions": int(row[0]) if row else 0}
        if setup.pooled and self.admin is not None:
            clients = self._show("CLIENTS")
            counts["clients"] = sum(client["application_name"] == setup.tag for client in clients)
            for pool in self._show("POOLS"):
                if pool["database"] == self.database:
                    counts["sv_active"] = int(pool["sv_active"])
                    counts["sv_open"] = sum(
                        int(pool[name])
                        for name in ("sv_active", "sv_idle", "sv_used", "sv_tested", "sv_login")
                    )
                    counts["cl_waiting"] = int(pool["cl_waiting"])
        return counts

    def _show(self, what: str) -> list[dict[str, Any]]:
        assert self.admin is not None
        cursor = self.admin.execute(f"SHOW {what}")
        names = [column.name for column in cursor.description or []]
        return [dict(zip(names, row, strict=True)) for row in cursor.fetchall()]


def listen_tag(setup: Setup) -> str:
    """The ``application_name`` of a pooled worker's direct connection, its ``LISTEN``."""
    return f"{setup.tag}-listen"


def with_query(url: str, **params: str) -> str:
    parts = urlsplit(url)
    query = "&".join(filter(None, [parts.query, urlencode(params)]))
    return parts._replace(query=query).geturl()


def env_for(setup: Setup, url: str, pooled_url: str | None) -> dict[str, str]:
    params = {"application_name": setup.tag, "conn_max_age": str(setup.conn_max_age)}
    extra: dict[str, str] = {}
    if setup.jobs == "duties":
        extra["JOBQUEUE_SCHEDULES"] = json.dumps(SCHEDULES)
    if not setup.pooled:
        return worker_env(with_query(url, **params), **extra)
    assert pooled_url is not None
    return worker_env(
        with_query(pooled_url, **params),
        DATABASE_POOLER_URL=pooled_url,
        JOBQUEUE_LISTEN_DATABASE="listen",
        # A name of its own: PgBouncer's server connections carry the worker's clients' name.
        JOBQUEUE_LISTEN_DATABASE_URL=with_query(url, application_name=listen_tag(setup)),
        **extra,
    )


def watch_while(
    counter: Counter, peaks: Peaks, phase: str, setup: Setup, until: Callable[[], bool], timeout: float
) -> None:
    """Sample ``setup``'s worker into ``phase`` every ``SAMPLE_EVERY`` until ``until()``."""
    deadline = time.monotonic() + timeout
    while True:
        peaks.see(phase, counter.sample(setup))
        if until():
            return
        if time.monotonic() > deadline:
            raise RuntimeError(f"{setup.tag}: the {phase} phase did not end within {timeout:g}s")
        time.sleep(SAMPLE_EVERY)


def measure(setup: Setup, url: str, pooled_url: str | None, counter: Counter, seconds: float) -> Peaks:
    """Start one worker of ``setup``; count its connections through its four phases."""
    from django_jobqueue import enqueue_many
    from django_jobqueue.models import Job

    from . import ours

    ours.reset()
    counter.empty_pool()
    peaks = Peaks()
    name = "bench.query_fails" if setup.jobs == "fails" else "bench.query"
    payload: dict[str, Any] = {"seconds": seconds}
    if setup.jobs != "fails":
        payload.update(hold=setup.jobs != "brief", progress=setup.jobs == "duties")
    jobs = [(name, payload)] * setup.concurrency

    def count(*statuses: str) -> int:
        return Job.objects.filter(name=name, status__in=statuses).count()

    args = [f"--concurrency={setup.concurrency}", f"--pool={setup.pool}", "--shutdown-timeout=60"]
    worker = LongRunningWorker(args, env_for(setup, url, pooled_url))
    try:
        worker.wait_started(60)
        worker.wait_for_log(HEARD)
        started = time.monotonic()
        watch_while(counter, peaks, "idle", setup, lambda: time.monotonic() - started > 1.0, 5)
        enqueue_many(jobs)
        watch_while(counter, peaks, "busy", setup, lambda: count("ready", "running") == 0, 60)
        time.sleep(1.0)  # the slots' connections close as their jobs end, or are kept
        settled = time.monotonic()
        watch_while(counter, peaks, "after", setup, lambda: time.monotonic() - settled > 0.5, 5)
        enqueue_many(jobs)
        watch_while(counter, peaks, "busy", setup, lambda: count("running") == setup.concurrency, 60)
        # Claimed is not started: under --pool processes a slot may take several jobs for its
        # child, and gives those behind a long one to other slots after a moment (LOOK_MS).
        # Signalled before, the worker would hand them back, each from its slot's thread.
        claimed = time.monotonic()
        watch_while(counter, peaks, "busy", setup, lambda: time.monotonic() - claimed > 0.5, 5)
        worker.proc.send_signal(signal.SIGTERM)
        watch_while(counter, peaks, "stopping", setup, lambda: worker.proc.poll() is not None, 90)
        if worker.proc.returncode != 0:
            raise RuntimeError(f"{setup.tag}: runworker exited {worker.proc.returncode}")
        left = counter.sample(setup)
        if left["sessions"] or left.get("clients"):
            # A connection's close may reach PostgreSQL a moment after its process exited.
            time.sleep(0.5)
            left = counter.sample(setup)
        if left["sessions"] or left.get("clients"):
            raise RuntimeError(f"{setup.tag}: connections left after the worker exited: {left}")
    finally:
        worker.stop()
    return peaks


def table(title: str, header: list[str], rows: list[list[str]]) -> str:
    widths = [max(len(line[i]) for line in [header, *rows]) for i in range(len(header))]
    lines = [f"### {title}", ""]
    for index, line in enumerate([header, *rows]):
        lines.append(
            "| " + " | ".join(cell.ljust(width) for cell, width in zip(line, widths, strict=True)) + " |"
        )
        if index == 0:
            lines.append("|" + "|".join("-" * (width + 2) for width in widths) + "|")
    return "\n".join(lines)


def report(results: list[tuple[Setup, Peaks]]) -> str:
    first = ["pool", "N", "CONN_MAX_AGE", "jobs"]
    direct_rows, pooled_rows = [], []
    for setup, peaks in results:
        row = [setup.pool, str(setup.concurrency), str(setup.conn_max_age), setup.jobs]
        if not setup.pooled:
            sessions = [str(peaks.get(phase, "sessions")) for phase in PHASES]
            peak = peaks.peak("sessions")
            direct_rows.append([*row, *sessions, str(peak), f"{peak - setup.concurrency:+d}"])
        else:
            clients = [str(peaks.get(phase, "clients")) for phase in PHASES]
            pooled_rows.append(
                [
                    *row,
                    *clients,
                    str(peaks.peak("clients")),
                    f"{peaks.peak('clients') - setup.concurrency:+d}",
                    str(peaks.peak("sv_active")),
                    str(peaks.peak("sv_open")),
                    str(peaks.peak("cl_waiting")),
                    str(peaks.peak("sessions")),
                ]
            )
    out = []
    if direct_rows:
        header = [*first, *(f"sessions {phase}" for phase in PHASES), "peak", "peak − N"]
        out.append(table("Direct: the worker's sessions in pg_stat_activity", header, direct_rows))
    if pooled_rows:
        header = [
            *first,
            *(f"clients {phase}" for phase in PHASES),
            "clients peak",
            "clients peak − N",
            "sv_active peak",
            "server conns opened",
            "cl_waiting peak",
            "direct sessions (LISTEN)",
        ]
        out.append(
            table("Behind PgBouncer (transaction mode): clients, and the pool's servers", header, pooled_rows)
        )
    return "\n\n".join(out)


def setup_django(url: str) -> None:
    """Django on ``url``, as the example project, with the benchmark's jobs registered."""
    os.environ["DATABASE_URL"] = url
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "testproject.settings")
    os.environ["DEBUG"] = "false"  # production: no query log kept in memory
    import django

    django.setup()
    from . import jobs as _jobs  # noqa: F401 - enqueue_many checks payloads against the registry


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.connections", description=__doc__.split("\n\n")[0])
    parser.add_argument("--concurrency", type=int, nargs="+", default=[4, 16])
    parser.add_argument(
        "--pool", nargs="+", choices=["threads", "processes"], default=["threads", "processes"]
    )
    parser.add_argument("--conn-max-age", type=int, nargs="+", default=[0, 600])
    parser.add_argument("--jobs", nargs="+", choices=JOBS, default=list(JOBS))
    parser.add_argument("--seconds", type=float, default=1.5, help="how long each job runs (default 1.5)")
    parser.add_argument("--direct-only", action="store_true", help="count the direct connections only")
    args = parser.parse_args()
    url = os.environ.get("DATABASE_URL", "")
    if not url.startswith(("postgres://", "postgresql://")):
        raise SystemExit(
            "set DATABASE_URL to a PostgreSQL database, e.g. postgres://postgres@127.0.0.1/jq_bench"
        )
    pooled_url = os.environ.get("PGBOUNCER_URL") or None
    if pooled_url is None and not args.direct_only:
        if pgbouncer.binary() is not None:
            # Again, under a PgBouncer of its own, which scripts/pgbouncer stops afterwards.
            command = [sys.executable, "-m", "bench.connections", *sys.argv[1:]]
            command, env = pgbouncer.under(command, url, dict(os.environ))
            os.execvpe(command[0], command, env)
        say(f"behind PgBouncer: skipped, {pgbouncer.NOT_INSTALLED}")
    create_database(url)
    env = {**os.environ, "DATABASE_URL": url, "DEBUG": "false"}
    subprocess.run(
        [sys.executable, "manage.py", "migrate", "--noinput", "-v", "0"], cwd=ROOT, env=env, check=True
    )
    if args.direct_only:
        pooled_url = None
    setup_django(url)
    results: list[tuple[Setup, Peaks]] = []
    counter = Counter(url, pooled_url)
    try:
        for pooled in [False, True] if pooled_url else [False]:
            for pool, concurrency, conn_max_age, jobs in itertools.product(
                args.pool, args.concurrency, args.conn_max_age, args.jobs
            ):
                setup = Setup(pool, concurrency, conn_max_age, jobs, pooled)
                peaks = measure(setup, url, pooled_url, counter, args.seconds)
                results.append((setup, peaks))
                say(f"{setup.tag}: {json.dumps(peaks.counts)}")
    finally:
        counter.close()
    print()
    print(report(results))
    if not pooled_url and not args.direct_only:
        print(f"\nbehind PgBouncer: skipped, {pgbouncer.NOT_INSTALLED}")


if __name__ == "__main__":
    main()
