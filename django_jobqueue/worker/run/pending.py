"""One attempt's latest ``ctx.progress()`` report, kept until it is written (``progress.py``)."""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ...models import Job


class PendingProgress:
    """One attempt's latest report, and which of its reports is written."""

    def __init__(self, job: Job) -> None:
        self.job = job
        self._lock = threading.Lock()
        self._reported = 0  # how many reports the job made
        self._written = 0  # the number of the last report written
        self._value: dict[str, Any] | None = None
        self.last_write = 0.0  # monotonic time of its last write (DirectProgress's pace)

    def report(self, value: dict[str, Any]) -> None:
        # A lock: a job's own threads may report at once, and the latest report must win.
        with self._lock:
            self._reported += 1
            self._value = value

    def unwritten(self) -> tuple[int, dict[str, Any]] | None:
        """The latest report and its number, if it is not written yet."""
        with self._lock:
            if self._value is None or self._reported == self._written:
                return None
            return self._reported, self._value

    def written(self, number: int) -> None:
        with self._lock:
            self._written = max(self._written, number)
