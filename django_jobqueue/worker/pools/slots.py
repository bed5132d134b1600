"""The slots of a pool: the threads that run its jobs, one job (or batch) at a time each.

The claimer puts each job it claims in one hand-off queue (``handoff.py``);
any idle slot takes it and runs it through the executor. Slots are numbered
from 0 as they start, and a number is never reused. What a slot does with
the jobs it takes is its pool's (``threads.py``, ``processes/pool.py``).

- With ``--concurrency MIN:MAX`` the claimer asks, each round, for a resize
  (``autoscale.py`` decides): growing starts new slots before the claim that
  fills them; shrinking puts a stop token in the hand-off queue for each
  slot to retire, behind every job already handed out. A slot retires by
  taking a stop token instead of a job, so only a slot with nothing to run
  ever takes one, and a shrink can neither lose nor run a job twice. The
  slot count is written on the worker row, for the admin.
- Stopping puts one stop token per slot ever started: every slot still
  running exits once its job (or batch) is done. A slot that takes a stop
  token along with jobs runs them, then exits.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Iterable
from typing import TYPE_CHECKING

from django.db import connections

from ...models import Job
from ..run.executor import Runner
from .counted import CountedPool
from .handoff import HandOff

if TYPE_CHECKING:
    from .base import PoolParts

logger = logging.getLogger(__name__)


class Slots(CountedPool):
    """A pool's slots: their hand-off queue, their threads and their number."""

    def __init__(self, parts: PoolParts) -> None:
        super().__init__(parts)
        # A job for any idle slot, or None: the slot that takes it exits (retired, or stopping).
        self._handoff: HandOff[Job] = HandOff()
        self._threads: dict[int, threading.Thread] = {}  # every slot started, by number; never reused

    # -- what a pool does with its slots -----------------------------------------

    def _serve(self, number: int) -> None:
        """Run the jobs slot ``number`` takes from the hand-off queue until it takes a stop token."""
        raise NotImplementedError

    def _slot_exited(self, number: int) -> None:
        """Slot ``number`` runs nothing more (retired, or stopping)."""

    def _add_slot(self, number: int) -> bool:
        """Get what slot ``number`` needs before it starts; False if it cannot start now."""
        return True

    def close(self) -> None:
        """Release what the slots held; the worker is stopping."""

    # -- start -----------------------------------------------------------------

    def start(self) -> None:
        """Start the ``--concurrency`` slots (MIN of a range)."""
        for number in range(self.config.concurrency):
            self._start_slot(number)

    def _start_slot(self, number: int) -> None:
        slot = threading.Thread(target=self._run, args=(number,), name=f"jobqueue-slot-{number}", daemon=True)
        self._threads[number] = slot
        slot.start()

    def hand_off(self, jobs: Iterable[Job]) -> None:
        """Give each of ``jobs`` to the next idle slot."""
        for job in jobs:
            self._handoff.put(job)

    # -- a slot ----------------------------------------------------------------

    def _run(self, number: int) -> None:
        try:
            self._serve(number)
        finally:
            self._slot_exited(number)
            connections.close_all()

    def _run_one(self, job: Job, runner: Runner | None) -> None:
        """Run ``job`` (through ``runner``, or here); then free its slot unless its ack is pending."""
        outcome = None
        try:
            outcome = self.executor.run(job, runner)
        finally:
            self._freed(job, outcome)

    def _hand_back(self, job: Job) -> None:
        """Give ``job`` back unstarted (a signal, or its child skipped it), and free its slot."""
        self._freed(job, self.executor.hand_back(job))

    # -- autoscaling (--concurrency MIN:MAX: counted.py decides) ----------------

    def _grow(self, target: int) -> None:
        """Start slots up to ``target``; fewer if one cannot start."""
        while self._count < target:
            number = len(self._threads)
            if not self._add_slot(number):
                return
            self._start_slot(number)
            self._count += 1

    def _shrink(self, target: int) -> None:
        # Each token is taken by a slot that has no job: it exits. The jobs already handed off
        # sit before the tokens and go to slots that stay.
        for _ in range(self._count - target):
            self._handoff.put(None)
        self._count = target

    # -- stopping --------------------------------------------------------------

    def stop(self, wait: float) -> None:
        """Tell every slot to exit once its job is done; wait up to ``wait`` seconds for them all."""
        # One stop token per slot ever started: those retired took theirs, the extra ones are never read.
        for _slot in self._threads:
            self._handoff.put(None)
        deadline = time.monotonic() + wait
        for slot in self._threads.values():
            slot.join(max(0.0, deadline - time.monotonic()))

    def still_running(self) -> int:
        """How many slots' threads are still alive (running a job that was handed back)."""
        return sum(slot.is_alive() for slot in self._threads.values())
