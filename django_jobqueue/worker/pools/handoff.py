"""The queue between the claimer and a pool's slots.

A slot takes a first job (waiting for one), then, under ``--pool processes``,
more only from those already waiting, up to its child's batch depth
(``processes/prefetch.py``) and to its fair share: the jobs waiting divided
among the slots idle at that moment, so that one child does not take a whole
claim while the others have nothing. ``None`` is a slot's stop token.
"""

from __future__ import annotations

import math
import queue
import threading
from typing import Generic, TypeVar

T = TypeVar("T")


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
