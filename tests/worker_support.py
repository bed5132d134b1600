"""Real ``runworker`` processes for the tests, on the test database, and ways to wait on them."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any
from urllib.parse import quote

import pytest
from django.db import connections

from django_jobqueue import QueueClient

ROOT = Path(__file__).resolve().parent.parent
JOB_MODULE = "tests.jobs_for_workers"


def database_url(alias: str = "default") -> str:
    """A DATABASE_URL for the test database of ``alias`` that pytest-django set up."""
    settings = connections[alias].settings_dict
    if connections[alias].vendor == "sqlite":
        return f"sqlite:///{Path(settings['NAME']).resolve()}"
    user = quote(settings.get("USER") or "")
    password = f":{quote(settings['PASSWORD'])}" if settings.get("PASSWORD") else ""
    host = settings.get("HOST") or "127.0.0.1"
    port = f":{settings['PORT']}" if settings.get("PORT") else ""
    scheme = "mysql" if connections[alias].vendor == "mysql" else "postgres"
    return f"{scheme}://{user}{password}@{host}{port}/{quote(settings['NAME'])}"


def run_manage(*args: str, env: Mapping[str, str], root: Path = ROOT) -> subprocess.CompletedProcess[str]:
    """Run ``manage.py`` with ``args`` in a process of its own, ``env`` its whole environment, to its end.

    Its output is captured as text; it may take a minute at the most. ``root``
    is the directory of the ``manage.py`` to run, as for ``WorkerProcess``.
    """
    command = [sys.executable, "manage.py", *args]
    return subprocess.run(command, cwd=root, env=dict(env), capture_output=True, text=True, timeout=60)


def wait_until(predicate: Callable[[], Any], timeout: float = 10.0, message: str = "") -> Any:
    """Poll ``predicate`` every 10 ms until it returns something true; fail after ``timeout``."""
    value = first_within(predicate, timeout)
    if value is None:
        pytest.fail(f"timed out after {timeout}s waiting for {message or predicate}")
    return value


def first_within(predicate: Callable[[], Any], timeout: float) -> Any:
    """Poll ``predicate`` until it returns something true, and return it; None after ``timeout``.

    ``wait_until`` is this, failing the test instead of returning None.
    """
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value or time.monotonic() > deadline:
            return value or None
        time.sleep(0.01)


class WorkerProcess:
    """One ``manage.py runworker`` subprocess; its stdout and stderr go to a log file.

    ``root`` is the directory of the ``manage.py`` it runs: this checkout's, or
    another release's code (the upgrade test's old workers).
    """

    def __init__(self, args: list[str], log_path: Path, env: dict[str, str], root: Path = ROOT) -> None:
        self.args = args
        self.log_path = log_path
        self._log_file = log_path.open("wb")
        self.proc = subprocess.Popen(
            [sys.executable, "manage.py", "runworker", *args],
            cwd=root,
            env=env,
            stdout=self._log_file,
            stderr=subprocess.STDOUT,
        )

    @property
    def pid(self) -> int:
        return self.proc.pid

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def wait_for_log(self, pattern: str, timeout: float = 10.0) -> re.Match[str]:
        def found() -> re.Match[str] | None:
            if self.proc.poll() is not None and not re.search(pattern, self.log()):
                pytest.fail(
                    f"worker exited ({self.proc.returncode}) before logging {pattern!r}:\n{self.log()}"
                )
            return re.search(pattern, self.log())

        match: re.Match[str] = wait_until(found, timeout, f"log line {pattern!r}")
        return match

    def wait_started(self, timeout: float = 15.0) -> None:
        self.wait_for_log(r"worker \S+ started", timeout)

    def send(self, signum: int) -> None:
        self.proc.send_signal(signum)

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(10)

    def wait(self, timeout: float = 15.0) -> int:
        try:
            return self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            pytest.fail(f"worker still running after {timeout}s:\n{self.log()}")

    def close(self) -> None:
        self.kill()
        self._log_file.close()


@pytest.fixture
def start_worker(queue: QueueClient, tmp_path: Path) -> Iterator[Callable[..., WorkerProcess]]:
    """Start ``runworker`` with the given arguments on the test database; killed at teardown.

    ``env`` adds environment variables (for example ``JOBQUEUE_BACKOFF_BASE``);
    ``root`` runs another tree's ``manage.py`` (``WorkerProcess``).
    Without ``--concurrency`` among the arguments the worker runs one slot, the
    one-job-at-a-time worker these scenarios are written for; ``defaults=True``
    starts it at runworker's own defaults instead. Every worker is stopped
    before pytest-django empties the tables.
    """
    started: list[WorkerProcess] = []
    base_env = {
        **os.environ,
        "DATABASE_URL": database_url(),
        "JOBQUEUE_MODULES": JOB_MODULE,
        "PYTHONUNBUFFERED": "1",
    }

    def start(
        *args: str, env: dict[str, str] | None = None, defaults: bool = False, root: Path = ROOT
    ) -> WorkerProcess:
        if not defaults and not any(arg.startswith("--concurrency") for arg in args):
            args = ("--concurrency", "1", *args)
        log_path = tmp_path / f"worker-{len(started)}.log"
        worker = WorkerProcess(list(args), log_path, {**base_env, **(env or {})}, root)
        started.append(worker)
        return worker

    yield start
    for worker in started:
        worker.close()


@pytest.fixture
def events_path(tmp_path: Path) -> str:
    """The file the test jobs append their events to."""
    return str(tmp_path / "events.jsonl")


def worker_sessions(name: str) -> int:
    """The sessions of PostgreSQL whose ``application_name`` is ``name``: a worker's, given its URL."""
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute("SELECT count(*) FROM pg_stat_activity WHERE application_name = %s", [name])
        return int(cursor.fetchone()[0])
