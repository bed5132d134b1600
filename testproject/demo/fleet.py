"""The demo's worker processes: real ``manage.py runworker --burst`` subprocesses.

A burst worker exits once no job is due and none is running, even while some
wait for a backoff. The fleet starts another burst when such a job comes due,
the way cron would run ``runworker --burst`` every minute, only faster. A
fleet with ``burst=False`` runs long-lived workers instead, which also fire
the periodic jobs (a burst worker never does).
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO

# "2025-01-01 12:00:00,000 INFO django_jobqueue.worker.executor: <message>"
_LOG_LINE = re.compile(r"^\d{4}-\d\d-\d\d [\d:,.]+ +[A-Z]+ +[\w.]+: (?P<message>.*)$")


@dataclass
class WorkerProcess:
    """One ``runworker`` subprocess and the log file it writes to."""

    worker_id: str
    process: subprocess.Popen[bytes]
    log_path: Path
    log: IO[bytes]
    started_at: float = field(default_factory=time.monotonic)
    read_offset: int = 0

    @property
    def pid(self) -> int:
        return self.process.pid

    def poll(self) -> int | None:
        return self.process.poll()


class WorkerFleet:
    """Keep up to ``size`` burst workers busy on ``queue`` until the caller says stop."""

    def __init__(
        self,
        *,
        manage_py: Path,
        queue: str,
        size: int,
        concurrency: int,
        env: Mapping[str, str],
        log_dir: Path,
        shutdown_timeout: float = 5.0,
        burst: bool = True,
        name: str = "demo-worker",
    ) -> None:
        self.manage_py = manage_py
        self.queue = queue
        self.size = size
        self.concurrency = concurrency
        self.env = dict(env)
        self.log_dir = log_dir
        self.shutdown_timeout = shutdown_timeout
        self.burst = burst
        self.name = name
        self.alive: list[WorkerProcess] = []
        self.finished: list[tuple[WorkerProcess, int]] = []
        self.started = 0
        self.recent: deque[tuple[str, str]] = deque(maxlen=6)

    def command(self, worker_id: str) -> list[str]:
        return [
            sys.executable,
            str(self.manage_py),
            "runworker",
            *(["--burst"] if self.burst else []),
            "--queue",
            self.queue,
            "--concurrency",
            str(self.concurrency),
            "--worker-id",
            worker_id,
            "--poll-interval",
            "0.2",
            "--shutdown-timeout",
            str(self.shutdown_timeout),
        ]

    def start(self) -> WorkerProcess:
        """Start one worker; its output goes to a log file of its own."""
        self.started += 1
        worker_id = f"{self.name}-{self.started}"
        log_path = self.log_dir / f"{worker_id}.log"
        log = log_path.open("wb")
        process = subprocess.Popen(
            self.command(worker_id),
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            env=self.env,
            # Its own session: a Ctrl-C at the terminal reaches the demo only,
            # which then stops the workers with one SIGTERM each.
            start_new_session=True,
        )
        worker = WorkerProcess(worker_id, process, log_path, log)
        self.alive.append(worker)
        return worker

    def top_up(self, due_jobs: int) -> list[WorkerProcess]:
        """Start enough workers for ``due_jobs`` jobs, within the fleet's size."""
        wanted = min(self.size, -(-due_jobs // self.concurrency)) if due_jobs > 0 else 0
        return [self.start() for _ in range(max(0, wanted - len(self.alive)))]

    def reap(self) -> list[tuple[WorkerProcess, int]]:
        """Collect the workers that exited since the last call, with their exit codes."""
        exited = []
        for worker in list(self.alive):
            code = worker.poll()
            if code is not None:
                self.alive.remove(worker)
                worker.log.close()
                self.read_log(worker)
                exited.append((worker, code))
        self.finished.extend(exited)
        return exited

    def read_logs(self) -> None:
        for worker in self.alive:
            self.read_log(worker)

    def read_log(self, worker: WorkerProcess) -> None:
        """Add the worker's complete new log lines to ``recent``."""
        try:
            with worker.log_path.open("rb") as log:
                log.seek(worker.read_offset)
                chunk = log.read()
        except OSError:
            return
        end = chunk.rfind(b"\n") + 1
        worker.read_offset += end
        for raw in chunk[:end].decode(errors="replace").splitlines():
            match = _LOG_LINE.match(raw)
            line = match.group("message") if match else raw.strip()
            if line:
                self.recent.append((worker.worker_id, line))

    def stop(self) -> None:
        """Send each live worker one SIGTERM, wait for it to drain, then kill what is left."""
        for worker in self.alive:
            if worker.poll() is None:
                os.kill(worker.pid, signal.SIGTERM)
        deadline = time.monotonic() + self.shutdown_timeout + 5
        for worker in self.alive:
            try:
                worker.process.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                worker.process.kill()
                worker.process.wait()
        self.reap()


def log_tail(path: Path, lines: int = 15) -> str:
    """Return the last ``lines`` lines of a worker's log, for an error message."""
    try:
        text = path.read_text(errors="replace")
    except OSError:
        return ""
    return "\n".join(text.splitlines()[-lines:])
