"""Schedules at scale: what an idle worker costs with 10,000 schedules, and how late they fire.

    DATABASE_URL=postgres://… python -m bench.schedules [--schedules 10000] [--seconds 60]

Empties the queue and its schedules, then runs one ``runworker`` at its
defaults with ``--schedules`` schedules declared (``bench/schedule_settings.py``):
one every second and the others once a day each, about seven of those a
minute. No job is enqueued but theirs, so the worker is idle but for its
schedules. Once it has started and settled (``--settle`` seconds), for
``--seconds`` it reads from ``/proc`` (Linux) the CPU time used by the
worker's process and by the PostgreSQL backends serving it, and then the
lateness of each job the every-second schedule fired in that window: its
``created_at`` (the database's clock when the fire's transaction began)
minus its ``run_at`` (its fire time). The database is created if missing
and migrated; give it one of its own.
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
from datetime import datetime
from pathlib import Path

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "testproject.settings")
os.environ["DEBUG"] = "false"

import django  # noqa: E402

django.setup()

from django.core.management import call_command  # noqa: E402
from django.db import connection  # noqa: E402

from django_jobqueue.models import Job, Schedule  # noqa: E402
from django_jobqueue.queue.schedules import ScheduleBook  # noqa: E402

from . import ours  # noqa: E402
from .databases import create_database  # noqa: E402
from .raw import percentile  # noqa: E402
from .worker import LongRunningWorker, worker_env  # noqa: E402

TICK = 1 / os.sysconf("SC_CLK_TCK")


def cpu_seconds(pid: int) -> float:
    """The CPU time (user and system) process ``pid`` has used so far; 0 if it is gone."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) * TICK


def backends() -> list[int]:
    """The pids of the other client backends of this database: the worker's connections."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT pid FROM pg_stat_activity WHERE datname = current_database() "
            "AND backend_type = 'client backend' AND pid <> pg_backend_pid()"
        )
        return [int(row[0]) for row in cursor.fetchall()]


def lateness(start: datetime, end: datetime) -> tuple[list[float], int]:
    """Seconds late of each every-second job whose fire time is in (start, end]; and how many such times."""
    jobs = Job.objects.filter(name="bench.noop", payload__tick=True, run_at__gt=start, run_at__lte=end)
    times = jobs.values_list("run_at", "created_at")
    late = [(created - run_at).total_seconds() for run_at, created in times]
    owed = int(end.timestamp()) - int(start.timestamp())
    return late, owed


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.schedules", description=__doc__.split("\n\n")[0])
    parser.add_argument("--schedules", type=int, default=10_000, help="schedules declared (default 10,000)")
    parser.add_argument("--seconds", type=float, default=60.0, help="seconds measured (default 60)")
    parser.add_argument("--settle", type=float, default=10.0, help="seconds after the start not measured")
    args = parser.parse_args()
    url = os.environ.get("DATABASE_URL", "")
    if not url.startswith(("postgres://", "postgresql://")):
        raise SystemExit("set DATABASE_URL to a PostgreSQL database of its own")
    create_database(url)
    call_command("migrate", verbosity=0)
    ours.reset()
    Schedule.objects.all().delete()

    settings = {"DJANGO_SETTINGS_MODULE": "bench.schedule_settings", "BENCH_SCHEDULES": str(args.schedules)}
    env = worker_env(url, **settings)
    started = time.monotonic()
    worker = LongRunningWorker([], env)
    try:
        worker.wait_started(timeout=300)
        up = time.monotonic() - started
        time.sleep(args.settle)
        book = ScheduleBook()
        pids = backends()
        before = {pid: cpu_seconds(pid) for pid in [worker.proc.pid, *pids]}
        start, wall = book.now(), time.monotonic()
        time.sleep(args.seconds)
        end, wall = book.now(), time.monotonic() - wall
        pids = sorted(set(pids) | set(backends()))
        used = {pid: cpu_seconds(pid) - before.get(pid, 0.0) for pid in [worker.proc.pid, *pids]}
        alive = worker.proc.poll() is None
    finally:
        worker.stop()
    if not alive:
        raise SystemExit("runworker exited during the measurement")

    late, owed = lateness(start, end)
    fired = Job.objects.filter(name="bench.noop", run_at__gt=start, run_at__lte=end).count() - len(late)
    mine = used.pop(worker.proc.pid)
    print(
        f"runworker at its defaults, {args.schedules - 1:,} daily cron lines and one every-second schedule "
        f"declared: {wall:.0f} s measured after {up:.0f} s to start and {args.settle:g} s"
    )
    serving = sum(used.values())
    print(f"  worker process: {mine:.2f} s CPU, {mine / wall:.3f} of a core")
    print(f"  its {len(used)} PostgreSQL backends: {serving:.2f} s CPU, {serving / wall:.3f} of a core")
    if late:
        print(
            f"  every-second schedule: {len(late)} jobs for {owed} fire times; late by "
            f"p50 {percentile(late, 0.5) * 1000:.0f} ms, p99 {percentile(late, 0.99) * 1000:.0f} ms, "
            f"max {max(late) * 1000:.0f} ms, mean {statistics.mean(late) * 1000:.0f} ms"
        )
    else:
        print(f"  every-second schedule: no job for {owed} fire times")
    print(f"  daily schedules fired meanwhile: {fired}; load average {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
