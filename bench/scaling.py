"""What one PostgreSQL primary carries: jobs/s at 1, 2 and 4 worker processes, and where the limit is.

    python -m bench.scaling [--pg-url postgres://postgres@127.0.0.1:5432/jq_scaling]
                            [--jobs 20000] [--concurrency 16] [--runs 3]

The figures of docs/scaling.md. Each setup drains ``--jobs`` no-op jobs with
``runworker --burst --concurrency N`` processes started together, and reads:

- jobs/s, from the first job's outcome to the last one's, over every worker's log;
- the WAL written per job (``pg_current_wal_lsn()`` before and after);
- the CPU seconds per 1,000 jobs of the workers (``/proc/<pid>/stat``) and of
  everything else on the machine (``/proc/stat``'s busy time less the
  workers'), both sampled every 50 ms and read between the first outcome and
  the last, so that the workers' start and exit are left out: on a machine
  that runs only the database beside them, the second is the database server's;
- the sessions the workers held at their peak (``pg_stat_activity``).

The setups: 1, 2 and 4 workers on one database; then 2 workers on each of two
databases of the same server, which tells whether splitting queues across
databases of one server adds throughput (it cannot add CPU or disk). Two
databases, ``<name>`` and ``<name>_b``, are made anew and dropped at the end.
"""

from __future__ import annotations

import argparse
import itertools
import os
import statistics
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DEFAULT_URL = "postgres://postgres@127.0.0.1:5432/jq_scaling"
SETUPS = {
    "1 worker": (1, 0),
    "2 workers": (2, 0),
    "4 workers": (4, 0),
    "2 + 2 workers, two databases": (2, 2),
}
TICKS = os.sysconf("SC_CLK_TCK")


@dataclass(frozen=True)
class Figures:
    jobs_per_second: float
    wal_bytes_per_job: float
    worker_cpu_per_1000: float
    other_cpu_per_1000: float
    peak_sessions: int


def say(text: str) -> None:
    print(text, file=sys.stderr, flush=True)


def busy_seconds() -> float:
    """CPU seconds the whole machine has spent busy since boot (every core, all but idle and iowait)."""
    fields = [int(value) for value in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    user, nice, system, _idle, _iowait, irq, softirq, steal = fields[:8]
    return (user + nice + system + irq + softirq + steal) / TICKS


def setup(url: str, second_url: str) -> None:
    os.environ["DATABASE_URL"] = url
    os.environ["JOBQUEUE_SECOND_DATABASE_URL"] = second_url
    os.environ["JOBQUEUE_DATABASES"] = "second"
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "testproject.settings")
    os.environ["DEBUG"] = "false"
    sys.path.insert(0, str(ROOT))
    import django

    django.setup()


def migrated(url: str, alias: str) -> None:
    from django.core.management import call_command

    from .databases import create_database

    create_database(url, fresh=True)
    call_command("migrate", database=alias, verbosity=0)


def fill(alias: str, jobs: int) -> None:
    from django.db import connections

    from django_jobqueue import enqueue_many
    from django_jobqueue.models import Job

    with connections[alias].cursor() as cursor:
        cursor.execute(f"TRUNCATE {Job._meta.db_table} RESTART IDENTITY CASCADE")
    for start in range(0, jobs, 5_000):
        enqueue_many([("bench.noop", {"i": i}) for i in range(start, min(jobs, start + 5_000))], using=alias)
    with connections[alias].cursor() as cursor:
        cursor.execute(f"VACUUM ANALYZE {Job._meta.db_table}")


def wal_lsn() -> int:
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_wal_lsn_diff(pg_current_wal_lsn(), '0/0')")
        return int(cursor.fetchone()[0])


def sessions(names: list[str]) -> int:
    """The sessions open now on the bench's databases, but this one."""
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE datname = ANY(%s) AND pid <> pg_backend_pid()",
            [names],
        )
        return int(cursor.fetchone()[0])


def process_cpu(pid: int) -> float:
    """CPU seconds process ``pid`` has used (all its threads), 0 once it is gone."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / TICKS


class Sampler:
    """Every 50 ms: the time, the machine's busy CPU, the workers' CPU and the peak of sessions."""

    def __init__(self, pids: list[int], names: list[str]) -> None:
        self.pids, self.names = pids, names
        self.samples: list[tuple[float, float, float]] = []
        self.peak_sessions = 0
        self.done = threading.Event()
        self.thread = threading.Thread(target=self.run)
        self.last_cpu = dict.fromkeys(pids, 0.0)

    def run(self) -> None:
        from django.db import connection

        while not self.done.wait(0.05):
            for pid in self.pids:  # a worker that exited keeps its last reading
                self.last_cpu[pid] = process_cpu(pid) or self.last_cpu[pid]
            self.samples.append((time.time(), busy_seconds(), sum(self.last_cpu.values())))
            self.peak_sessions = max(self.peak_sessions, sessions(self.names))
        connection.close()

    def between(self, start: float, end: float) -> tuple[float, float]:
        """The machine's busy CPU and the workers' CPU from ``start`` to ``end``, interpolated."""

        def at(moment: float, index: int) -> float:
            for (t0, *v0), (t1, *v1) in itertools.pairwise(self.samples):
                if t0 <= moment <= t1:
                    return v0[index] + (v1[index] - v0[index]) * (moment - t0) / ((t1 - t0) or 1)
            raise RuntimeError("the drain was not sampled")

        return at(end, 0) - at(start, 0), at(end, 1) - at(start, 1)


def run_setup(urls: list[str], counts: tuple[int, int], jobs: int, concurrency: int) -> Figures:
    from .worker import outcomes_in_log, spawn, worker_env

    names = [url.rsplit("/", 1)[1] for url in urls]
    for alias, count in zip(("default", "second"), counts, strict=True):
        if count:
            fill(alias, jobs // len([c for c in counts if c]))
    args = ["--burst", "--concurrency", str(concurrency), "--no-schedules"]
    with tempfile.TemporaryDirectory(prefix="jq-scaling-") as tmp:
        wal = wal_lsn()
        procs, logs = [], []
        for alias, count in zip(("default", "second"), counts, strict=True):
            for index in range(count):
                log = Path(tmp) / f"{alias}-{index}.log"
                env = worker_env(urls[0], JOBQUEUE_SECOND_DATABASE_URL=urls[1], JOBQUEUE_DATABASES="second")
                procs.append(spawn([*args, "--database", alias], env, log))
                logs.append(log)
        sampler = Sampler([proc.pid for proc in procs], names)
        sampler.thread.start()
        for proc in procs:
            if proc.wait() != 0:
                raise RuntimeError(f"a worker exited {proc.returncode}")
        sampler.done.set()
        sampler.thread.join()
        wal = wal_lsn() - wal
        stamps = [
            stamp for log in logs for stamp, _outcome in outcomes_in_log(log.read_text(errors="replace"))
        ]
    if len(stamps) != jobs:
        raise RuntimeError(f"{len(stamps)} outcomes logged for {jobs} jobs")
    busy, worker_cpu = sampler.between(min(stamps), max(stamps))
    return Figures(
        jobs_per_second=(jobs - 1) / (max(stamps) - min(stamps)),
        wal_bytes_per_job=wal / jobs,
        worker_cpu_per_1000=1000 * worker_cpu / jobs,
        other_cpu_per_1000=1000 * max(0.0, busy - worker_cpu) / jobs,
        peak_sessions=sampler.peak_sessions,
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--pg-url", default=DEFAULT_URL)
    parser.add_argument("--jobs", type=int, default=20_000)
    parser.add_argument("--concurrency", type=int, default=16)
    parser.add_argument("--runs", type=int, default=3)
    options = parser.parse_args()
    urls = [options.pg_url, f"{options.pg_url}_b"]
    setup(*urls)
    migrated(urls[0], "default")
    migrated(urls[1], "second")
    results: dict[str, list[Figures]] = {name: [] for name in SETUPS}
    for run in range(options.runs):
        for name, counts in SETUPS.items():
            figures = run_setup(urls, counts, options.jobs, options.concurrency)
            say(f"run {run + 1} {name}: {figures}")
            results[name].append(figures)
    print(
        f"{options.jobs:,} no-op jobs, --concurrency {options.concurrency}, {os.cpu_count()} cores; "
        f"medians of {options.runs} runs (spread of jobs/s in brackets)\n"
    )
    print(
        "| setup | jobs/s | WAL per job | worker CPU s / 1,000 jobs | other CPU s / 1,000 jobs | sessions |"
    )
    print("| --- | --- | --- | --- | --- | --- |")
    for name, runs in results.items():
        rates = [figures.jobs_per_second for figures in runs]

        def median(field: str, runs: list[Figures] = runs) -> float:
            return statistics.median(getattr(figures, field) for figures in runs)

        print(
            f"| {name} | {median('jobs_per_second'):,.0f} ({min(rates):,.0f}–{max(rates):,.0f}) "
            f"| {median('wal_bytes_per_job'):,.0f} B | {median('worker_cpu_per_1000'):.2f} "
            f"| {median('other_cpu_per_1000'):.2f} | {max(figures.peak_sessions for figures in runs)} |"
        )
    from django.db import connections

    connections.close_all()
    from .databases import drop_database

    for url in urls:
        drop_database(url)


if __name__ == "__main__":
    started = time.monotonic()
    main()
    say(f"took {time.monotonic() - started:.0f}s")
