"""Real ``manage.py runworker`` processes: their drain rate, read from their own log, and their memory."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

# testproject's log format: "2026-11-29 11:45:35,123 INFO django_jobqueue.worker.executor: job ..."
_JOB_LINE = re.compile(r"^(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3}) \w+ [\w.]+: job \S+ id=\d+ .*outcome=(\w+)")


@dataclass(frozen=True)
class Drain:
    jobs: int  # jobs whose outcome was logged
    done: int  # of which acked
    span: float  # seconds from the first logged outcome to the last
    wall: float  # seconds from spawning the process to its exit
    peak_rss_mb: float  # the process's resident-set high-water mark

    @property
    def rate(self) -> float:
        """Jobs/s between the first and the last outcome: start-up and exit are not counted."""
        return (self.jobs - 1) / self.span if self.jobs > 1 and self.span > 0 else 0.0


def worker_env(database_url: str, **extra: str) -> dict[str, str]:
    env = dict(os.environ)
    env.update(
        DATABASE_URL=database_url,
        DEBUG="false",  # production: no query log kept in memory
        JOBQUEUE_MODULES="bench.jobs",
        JOBQUEUE_LOG_LEVEL="INFO",
        PYTHONUNBUFFERED="0",
    )
    env.update(extra)
    return env


def spawn(args: list[str], env: dict[str, str], log_path: Path, root: Path = ROOT) -> subprocess.Popen[bytes]:
    """``manage.py runworker`` of the tree ``root`` (this one, or another commit's: ``against.py``)."""
    with log_path.open("wb") as log:
        return subprocess.Popen(
            [sys.executable, "manage.py", "runworker", *args],
            cwd=root,
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
        )


def _peak_rss_mb(pid: int) -> float | None:
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return None
    match = re.search(r"^VmHWM:\s+(\d+) kB", status, re.MULTILINE)
    return int(match.group(1)) / 1024 if match else None


class DrainTimeout(RuntimeError):
    """A drain stopped by its time bounds; ``partial`` is what its log shows up to then."""

    def __init__(self, message: str, partial: Drain) -> None:
        super().__init__(message)
        self.partial = partial


def drain(
    args: list[str],
    env: dict[str, str],
    timeout: float = 600.0,
    root: Path = ROOT,
    stall: float | None = None,
) -> Drain:
    """Run ``runworker --burst`` (plus ``args``) of the tree ``root`` to its exit; measure it.

    Its rate comes from its log, its memory from /proc. Raise ``DrainTimeout``
    (the worker killed) if it runs ``timeout`` seconds, or, given ``stall``,
    logs no job for ``stall`` seconds: a claim that never takes the jobs left
    must end in a report, not a hang.
    """
    with tempfile.TemporaryDirectory(prefix="jq-bench-") as tmp:
        log_path = Path(tmp) / "worker.log"
        started = time.perf_counter()
        proc = spawn(["--burst", *args], env, log_path, root)
        peak, stopped = watch(proc, log_path, timeout, stall)
        wall = time.perf_counter() - started
        log = log_path.read_text(errors="replace")
    measured = measured_from_log(log, wall, peak)
    if stopped:
        raise DrainTimeout(f"runworker {args} {stopped}; {measured.jobs} jobs logged", measured)
    if proc.returncode != 0:
        raise RuntimeError(f"runworker {args} exited {proc.returncode}:\n{log[-3000:]}")
    return measured


def watch(
    proc: subprocess.Popen[bytes], log_path: Path, timeout: float, stall: float | None
) -> tuple[float, str]:
    """Wait for ``proc``; return its peak RSS and, if it was killed, why."""
    peak = 0.0
    now = time.monotonic()
    deadline, size, grew = now + timeout, 0, now
    while proc.poll() is None:
        # The high-water mark only grows: the last reading before exit is the peak seen.
        peak = max(peak, _peak_rss_mb(proc.pid) or 0.0)
        now = time.monotonic()
        # The log grows by a line per job: a stat is enough to see progress.
        if (current := log_path.stat().st_size) != size:
            size, grew = current, now
        stopped = ""
        if now > deadline:
            stopped = f"did not finish in {timeout:g}s"
        elif stall is not None and now - grew > stall:
            stopped = f"logged nothing for {stall:g}s"
        if stopped:
            proc.kill()
            proc.wait()
            return peak, stopped
        time.sleep(0.02)
    return peak, ""


def outcomes_in_log(log: str) -> list[tuple[float, str]]:
    """When each job line of a worker's log was written (a Unix time), and its outcome."""
    return [
        (datetime.strptime(match.group(1), "%Y-%m-%d %H:%M:%S,%f").timestamp(), match.group(2))
        for line in log.splitlines()
        if (match := _JOB_LINE.match(line))
    ]


def measured_from_log(log: str, wall: float, peak: float) -> Drain:
    outcomes = outcomes_in_log(log)
    stamps = [stamp for stamp, _outcome in outcomes]
    done = sum(outcome == "done" for _stamp, outcome in outcomes)
    span = max(stamps) - min(stamps) if stamps else 0.0
    return Drain(len(stamps), done, span, wall, peak)


class LongRunningWorker:
    """A ``runworker`` left running (not ``--burst``), for the idle pickup latency."""

    def __init__(self, args: list[str], env: dict[str, str]) -> None:
        self._tmp = tempfile.TemporaryDirectory(prefix="jq-bench-")
        self.log_path = Path(self._tmp.name) / "worker.log"
        self.proc = spawn(args, env, self.log_path)

    def wait_started(self, timeout: float = 30.0) -> None:
        deadline = time.monotonic() + timeout
        while "started:" not in self.log_path.read_text(errors="replace"):
            if self.proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"runworker did not start:\n{self.log_path.read_text(errors='replace')}")
            time.sleep(0.02)

    def wait_for_log(self, pattern: str, timeout: float = 30.0) -> None:
        """Wait until a line of the worker's log matches ``pattern``."""
        deadline = time.monotonic() + timeout
        while not re.search(pattern, self.log_path.read_text(errors="replace")):
            if self.proc.poll() is not None or time.monotonic() > deadline:
                log = self.log_path.read_text(errors="replace")
                raise RuntimeError(f"runworker did not log {pattern!r}:\n{log[-3000:]}")
            time.sleep(0.02)

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self._tmp.cleanup()
