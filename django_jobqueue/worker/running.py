"""The jobs a worker holds claims on: handed to a slot, running, or finishing.

A job whose claim is no longer this worker's to keep while its code still runs
(cancelled, lost, or given up after its time limit) is *detached*: no longer
heartbeated or handed back, but its slot still counts as taken until the code
returns.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterable

from ..models import Job


class RunningJobs:
    """A thread-safe set of claimed jobs, keyed by claim so a re-claimed job counts twice."""

    def __init__(self) -> None:
        self._jobs: dict[tuple[int, int], Job] = {}
        self._detached: dict[tuple[int, int], Job] = {}
        self._changed = threading.Condition()

    def add_many(self, jobs: Iterable[Job]) -> None:
        with self._changed:
            for job in jobs:
                self._jobs[(job.pk, job.claim_token)] = job

    def add(self, job: Job) -> None:
        self.add_many([job])

    def remove_many(self, jobs: Iterable[Job]) -> None:
        """Forget ``jobs``; those already forgotten are skipped."""
        with self._changed:
            for job in jobs:
                self._jobs.pop((job.pk, job.claim_token), None)
            # Only wait_empty() waits on the condition: wake it only when there is something to see.
            if not self._jobs and not self._detached:
                self._changed.notify_all()

    def remove(self, job: Job) -> bool:
        """Forget ``job``; return False if it was already forgotten."""
        key = (job.pk, job.claim_token)
        with self._changed:
            found = self._jobs.pop(key, None) is not None
            if self._detached:
                found = self._detached.pop(key, None) is not None or found
            if not self._jobs and not self._detached:
                self._changed.notify_all()
            return found

    def detach(self, job: Job) -> None:
        """Stop keeping ``job``'s claim (no heartbeat, no hand-back); its slot stays taken till ``remove``."""
        key = (job.pk, job.claim_token)
        with self._changed:
            if self._jobs.pop(key, None) is not None:
                self._detached[key] = job

    def snapshot(self) -> list[Job]:
        """The jobs whose claims this worker keeps (the detached ones left out)."""
        with self._changed:
            return list(self._jobs.values())

    def __len__(self) -> int:
        """The slots taken: claims kept, and detached jobs still running."""
        with self._changed:
            return len(self._jobs) + len(self._detached)

    def wait_empty(self, timeout: float | None) -> bool:
        """Wait until no job is held, for up to ``timeout`` seconds (None = for ever)."""
        deadline = None if timeout is None else time.monotonic() + timeout
        with self._changed:
            while self._jobs or self._detached:
                remaining = None if deadline is None else deadline - time.monotonic()
                if remaining is not None and remaining <= 0:
                    return False
                self._changed.wait(remaining)
            return True
