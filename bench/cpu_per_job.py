"""Where a drain's CPU goes: the worker, its descendants and PostgreSQL, in microseconds per job.

    DATABASE_URL=postgres://… python -m bench.cpu_per_job 60000 --pool processes --concurrency 4

Fills the job table with that many ready no-op jobs, runs ``runworker
--burst`` with the options given, and reads from ``/proc`` (Linux) the CPU
time each process used meanwhile: the worker itself, every process started
under it (a fork server and the children of ``--pool processes``), and every
PostgreSQL process (their backends, and the writers that flush what they
write). A rate says how fast; this says what a job costs, and so the most a
machine of N cores could drain at those costs however well the processes
overlap: N cores / the CPU of a job.
"""

from __future__ import annotations

import os
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "testproject.settings")
os.environ["DEBUG"] = "false"

import django  # noqa: E402

django.setup()

from . import jobs as _jobs  # noqa: E402, F401 - the registry knows the jobs
from . import ours  # noqa: E402
from .worker import measured_from_log, spawn, worker_env  # noqa: E402

# Seconds between two readings of /proc: a process that starts and ends between two is missed.
INTERVAL = 0.05


def processes() -> dict[int, tuple[int, str, int]]:
    """Every process now: pid -> (parent pid, command line, CPU ticks used so far, user and system)."""
    found = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            stat = Path(f"/proc/{entry}/stat").read_text()
            command = (
                Path(f"/proc/{entry}/cmdline").read_bytes().replace(b"\0", b" ").decode("utf-8", "replace")
            )
        except OSError:
            continue  # ended meanwhile
        fields = stat.rsplit(")", 1)[1].split()
        found[int(entry)] = (int(fields[1]), command, int(fields[11]) + int(fields[12]))
    return found


def descends_from(pid: int, ancestor: int, parents: dict[int, int]) -> bool:
    while pid in parents and pid not in (0, 1):
        if pid == ancestor:
            return True
        pid = parents[pid]
    return False


def group_of(pid: int, worker: int, parents: dict[int, int], command: str) -> str | None:
    if pid == worker:
        return "worker"
    if descends_from(pid, worker, parents):
        return "its descendants"
    if command.startswith("postgres"):
        return "PostgreSQL"
    return None


def main() -> None:
    if len(sys.argv) < 2 or not sys.argv[1].isdigit():
        raise SystemExit(__doc__)
    count, args = int(sys.argv[1]), sys.argv[2:]
    url = os.environ.get("DATABASE_URL", "")
    if not url.startswith(("postgres://", "postgresql://")):
        raise SystemExit("set DATABASE_URL to a PostgreSQL database")
    ours.fill(count)
    ours.analyze()
    before = processes()
    latest = dict(before)
    parents: dict[int, int] = {pid: parent for pid, (parent, _command, _ticks) in before.items()}
    with tempfile.TemporaryDirectory(prefix="jq-bench-") as tmp:
        log_path = Path(tmp) / "worker.log"
        started = time.perf_counter()
        worker = spawn(["--burst", *args], worker_env(url), log_path)
        while worker.poll() is None:
            for pid, seen in processes().items():
                latest[pid] = seen
                parents[pid] = seen[0]
            time.sleep(INTERVAL)
        wall = time.perf_counter() - started
        drained = measured_from_log(log_path.read_text(errors="replace"), wall, 0.0)
    if worker.returncode != 0 or drained.done != count:
        raise SystemExit(f"runworker exited {worker.returncode} having acked {drained.done} of {count} jobs")
    used: Counter[str] = Counter()
    for pid, (_parent, command, ticks) in latest.items():
        group = group_of(pid, worker.pid, parents, command)
        if group is not None:
            # A pid seen before the worker started is a process that ran before it: its use since.
            used[group] += ticks - (before[pid][2] if pid in before else 0)
    tick = 1 / os.sysconf("SC_CLK_TCK")
    total = sum(used.values()) * tick
    command = " ".join(["runworker --burst", *args])
    print(f"{command}: {count:,} jobs, {drained.rate:,.0f} jobs/s, {wall:.2f} s in all")
    for group in ("worker", "its descendants", "PostgreSQL"):
        seconds = used[group] * tick
        print(f"  {group:16} {seconds:6.2f} s CPU  {seconds / count * 1e6:6.1f} µs a job")
    cores = os.cpu_count() or 1
    print(
        f"  {'in all':16} {total:6.2f} s CPU  {total / count * 1e6:6.1f} µs a job: "
        f"at most {cores * count / total:,.0f} jobs/s on {cores} cores at these costs"
    )


if __name__ == "__main__":
    main()
