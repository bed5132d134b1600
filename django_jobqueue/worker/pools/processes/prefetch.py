"""``--pool processes``: how many claimed jobs a slot hands its child at once, and which ones.

A child gets a *batch* of jobs in one message and runs them one after the
other without waiting for its parent in between (``child.py``). That hides
the round trip between the worker and the child, and lets the worker claim
many jobs per round, but a job that waits in a batch behind a long one waits
for it. So the batch size, the *depth*, adapts to the jobs seen:

- ``Depth`` keeps a moving average of how long recent jobs ran in the
  children, and allows as many jobs per batch as fit in ``BATCH_SECONDS`` of
  that average: 1 for jobs of ``BATCH_SECONDS`` or more (no prefetching), up
  to ``MAX_DEPTH`` for very short ones. It starts at 1, as if jobs were
  long, grows within a few dozen short jobs, and falls back to 1 after a
  single long one. The claimer claims for every child's depth
  (``Slots.capacity``).
- ``HandOff`` is the queue between the claimer and the slots. A slot takes a
  first job (waiting for one), then more only from those already waiting,
  up to the depth and to its fair share: the jobs waiting divided among the
  slots idle at that moment, so that one child does not take a whole claim
  while the others have nothing.
"""

from __future__ import annotations

import math
import queue
import threading
from typing import Generic, TypeVar

# Seconds of work a batch aims at: long enough that a child rarely waits for its next job
# (the worker's claim round and hand-off take a millisecond or two), short enough that a job
# waits little behind the others of its batch.
BATCH_SECONDS = 0.01
# The most jobs in one batch: 4 slots of 64 claim 256 at once, a claim round's worth.
MAX_DEPTH = 64
# Weight of the latest job in the moving average: about the last ten jobs count.
SMOOTHING = 0.2

T = TypeVar("T")


class Depth:
    """How many jobs a batch may hold now, from how long recent jobs ran."""

    def __init__(self, batch_seconds: float = BATCH_SECONDS, most: int = MAX_DEPTH) -> None:
        self.batch_seconds = batch_seconds
        self.most = most
        # Unknown jobs are taken for long ones: no prefetching until short jobs are seen.
        self.average = batch_seconds
        self.value = 1

    def note(self, seconds: float) -> None:
        """Count a job that ran ``seconds`` in a child (slots call it at once: a lost update is harmless)."""
        average = self.average + SMOOTHING * (seconds - self.average)
        self.average = average
        self.value = max(1, min(self.most, int(self.batch_seconds / average) if average > 0 else self.most))


class HandOff(Generic[T]):
    """Claimed jobs on their way to the slots; ``None`` is a slot's stop token."""

    def __init__(self) -> None:
        self._queue: queue.SimpleQueue[T | None] = queue.SimpleQueue()
        self._lock = threading.Lock()
        self._idle = 0  # slots waiting in take()

    def put(self, item: T | None) -> None:
        self._queue.put(item)

    def get(self) -> T | None:
        """The next job (or stop token), waiting for one: a slot that runs one job at a time."""
        return self._queue.get()

    def take(self, most: int) -> tuple[list[T], bool]:
        """Up to ``most`` jobs, the first waited for; and whether a stop token came with them.

        A slot that takes a stop token runs the jobs it took with it, then exits.
        """
        with self._lock:
            self._idle += 1
        try:
            first = self._queue.get()
        finally:
            with self._lock:
                self._idle -= 1
                others = self._idle
        if first is None:
            return [], True
        taken = [first]
        # Its share of what waits now, the idle slots counted: each of them wakes for one of these.
        share = math.ceil((self._queue.qsize() + 1) / (others + 1))
        while len(taken) < min(most, share):
            try:
                item = self._queue.get_nowait()
            except queue.Empty:
                break
            if item is None:
                return taken, True
            taken.append(item)
        return taken, False

    def waiting(self) -> tuple[list[T], int]:
        """Take every job waiting (the worker was signalled); return them, and the stop tokens put back."""
        jobs: list[T] = []
        tokens = 0
        while True:
            try:
                item = self._queue.get_nowait()
            except queue.Empty:
                break
            if item is None:
                tokens += 1
            else:
                jobs.append(item)
        for _token in range(tokens):
            self._queue.put(None)
        return jobs, tokens
