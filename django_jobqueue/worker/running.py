"""The jobs a worker holds claims on: handed to a slot, running, or finishing."""

from __future__ import annotations

import threading
import time

from ..models import Job


class RunningJobs:
    """A thread-safe set of claimed jobs, keyed by claim so a re-claimed job counts twice."""

    def __init__(self) -> None:
        self._jobs: dict[tuple[int, int], Job] = {}
        self._changed = threading.Condition()

    def add(self, job: Job) -> None:
        with self._changed:
            self._jobs[(job.pk, job.claim_token)] = job

    def remove(self, job: Job) -> None:
        with self._changed:
            self._jobs.pop((job.pk, job.claim_token), None)
            self._changed.notify_all()

    def snapshot(self) -> list[Job]:
        with self._changed:
            return list(self._jobs.values())

    def __len__(self) -> int:
        with self._changed:
            return len(self._jobs)

    def wait_empty(self, timeout: float | None) -> bool:
        """Wait until no job is held, for up to ``timeout`` seconds (None = for ever)."""
        deadline = None if timeout is None else time.monotonic() + timeout
        with self._changed:
            while self._jobs:
                remaining = None if deadline is None else deadline - time.monotonic()
                if remaining is not None and remaining <= 0:
                    return False
                self._changed.wait(remaining)
            return True
