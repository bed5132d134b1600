"""``runworker --pool processes`` against the thread pool: drains of CPU-bound and no-op jobs, and memory.

Each drain is a real ``runworker --burst`` (``worker.drain``), the thread pool
and the process pool at the same ``--concurrency`` one after the other, so
that both meet the same machine. The CPU-bound job is ``bench.spin``, a
Python loop whose length is calibrated in this process to take about
``SPIN_SECONDS``.

The memory of a worker is read from ``/proc/<pid>/smaps_rollup`` once it has
run a few thousand no-op jobs and sits idle: its resident set (RSS) and its
proportional set (PSS: each shared page divided among the processes sharing
it). Under ``--pool processes`` the worker starts a fork server, which forks
the slots' children; the three kinds are reported apart, the children summed.
"""

from __future__ import annotations

import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from django_jobqueue import enqueue_many
from django_jobqueue.models import Job

from . import jobs, ours
from .worker import LongRunningWorker

# A CPU-bound job's length: long enough that the queue's own cost per job is small beside it.
SPIN_SECONDS = 0.005
MB = 1024 * 1024


def calibrate_spin(seconds: float = SPIN_SECONDS, rounds: int = 21) -> tuple[int, float]:
    """The loop count of ``bench.spin`` that takes about ``seconds`` of CPU here, and what it took.

    Timed in CPU time, the least of ``rounds`` calls: other processes lengthen
    a call even in CPU time (they share the core's caches, and on a virtual
    machine its host), and a count fitted to a slowed call makes short jobs.
    """
    count = 20_000
    for _step in range(2):
        count = max(1, round(count * seconds / _timed_spin(count, rounds)))
    return count, _timed_spin(count, rounds)


def _timed_spin(count: int, rounds: int) -> float:
    timings = []
    for _round in range(rounds):
        started = time.thread_time()
        jobs.spin(count)
        timings.append(time.thread_time() - started)
    return min(timings)


# bench.spin's loop, run ``calls`` times by a bare interpreter: no queue, no Django. In a
# function, as bench.spin is: at module level its variables would be dict lookups, twice as slow.
_SPIN_ALONE = """
import sys


def spin(n):
    total = 0
    for i in range(n):
        total += i
    return total


loops, calls = int(sys.argv[1]), int(sys.argv[2])
for _call in range(calls):
    spin(loops)
"""


def spin_rate(processes: int, loops: int, calls: int = 200) -> float:
    """Calls/s of ``bench.spin(loops)`` in ``processes`` bare interpreters at once.

    Two against one is what this machine's cores give pure Python: the
    ceiling of the process pool's lead on CPU-bound jobs, whatever the queue does.
    """
    started = time.perf_counter()
    command = [sys.executable, "-c", _SPIN_ALONE, str(loops), str(calls)]
    spinners = [subprocess.Popen(command) for _ in range(processes)]
    for spinner in spinners:
        if spinner.wait() != 0:
            raise RuntimeError(f"a spinning interpreter exited {spinner.returncode}")
    return processes * calls / (time.perf_counter() - started)


def fill_spin(count: int, loops: int) -> None:
    """Make ``count`` ready ``bench.spin`` jobs of ``loops`` each (the queue emptied first)."""
    ours.reset()
    enqueue_many([("bench.spin", {"n": loops})] * count)


@dataclass(frozen=True)
class Usage:
    """One process's memory, in bytes."""

    rss: int
    pss: int


@dataclass(frozen=True)
class TreeMemory:
    """A worker's memory and its descendants': the fork server, the children it forked, and helpers."""

    worker: Usage
    fork_server: Usage  # zero under the thread pool
    children: list[Usage]  # one per slot under --pool processes
    helpers: list[Usage]  # the worker's other child processes (multiprocessing's resource tracker)

    @property
    def children_rss(self) -> int:
        return sum(usage.rss for usage in self.children)

    @property
    def children_pss(self) -> int:
        return sum(usage.pss for usage in self.children)

    @property
    def helpers_pss(self) -> int:
        return sum(usage.pss for usage in self.helpers)

    @property
    def total_pss(self) -> int:
        """What the whole tree costs the machine: PSS adds up across processes, RSS does not."""
        return self.worker.pss + self.fork_server.pss + self.children_pss + self.helpers_pss


def memory_after_jobs(args: list[str], env: dict[str, str], count: int, timeout: float = 120.0) -> TreeMemory:
    """Start a worker with ``args``, let it run ``count`` no-op jobs, and read its tree's memory, idle."""
    ours.reset()
    worker = LongRunningWorker(["--no-schedules", *args], env)
    try:
        worker.wait_started()
        enqueue_many([("bench.noop", {"i": i}) for i in range(count)])
        deadline = time.monotonic() + timeout
        while Job.objects.filter(status="done").count() < count:
            if worker.proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"runworker {args} did not run {count} jobs in {timeout}s")
            time.sleep(0.05)
        return read_tree(worker.proc.pid)
    finally:
        worker.stop()


def read_tree(pid: int) -> TreeMemory:
    """The memory of worker ``pid`` and of every process under it: fork server, its children, helpers."""
    children = _children(pid)
    fork_server = next((child for child in children if _is_fork_server(child)), None)
    helpers = [usage(child) for child in children if child != fork_server]
    if fork_server is None:
        return TreeMemory(usage(pid), Usage(0, 0), [], helpers)
    slots = [usage(child) for child in _children(fork_server)]
    return TreeMemory(usage(pid), usage(fork_server), slots, helpers)


def usage(pid: int) -> Usage:
    """RSS and PSS of ``pid`` from ``/proc/<pid>/smaps_rollup`` (Linux 4.14 and later)."""
    fields = {}
    for line in Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines()[1:]:
        name, _, rest = line.partition(":")
        value = rest.split()
        if value and value[-1] == "kB":
            fields[name] = int(value[0]) * 1024
    return Usage(fields["Rss"], fields["Pss"])


def _children(pid: int) -> list[int]:
    found = []
    for task in Path(f"/proc/{pid}/task").iterdir():
        found += [int(child) for child in (task / "children").read_text().split()]
    return found


def _is_fork_server(pid: int) -> bool:
    return b"multiprocessing.forkserver" in Path(f"/proc/{pid}/cmdline").read_bytes()
