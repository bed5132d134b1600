"""What every pool shares: its parts, how many jobs it runs at once, and freeing a job's place.

Every pool keeps a slot count: the jobs the claimer claims for. With a fixed
``--concurrency`` it never changes. With ``MIN:MAX`` the claimer asks, each
round, for a resize; ``autoscale.py``'s policy decides, and the pool applies
the answer in its own way (``_grow`` and ``_shrink``): the slots of
``slots.py`` start and retire threads, the asyncio pool's tasks need nothing
started. The count is logged when it changes and written on the worker row,
for the admin.

A job's place is freed when its run ends (``_freed``), by whichever pool ran
it, the same way: unless its ack waits in the completer.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import TYPE_CHECKING

from ..outage import DATABASE_ERRORS
from ..run.outcomes import Outcome
from .autoscale import SlotPolicy

if TYPE_CHECKING:
    from ...models import Job
    from .base import PoolParts

logger = logging.getLogger(__name__)


class CountedPool:
    """A pool's parts and its slot count, within ``--concurrency MIN:MAX`` (fixed without a range)."""

    def __init__(self, parts: PoolParts) -> None:
        config = parts.config
        self.config = config
        self.client = parts.client
        self.executor = parts.executor
        self.running = parts.running
        self.wake = parts.wake
        self.signalled = parts.signalled
        self._count = config.concurrency  # the slots claims are made for; retiring ones left out
        self._policy: SlotPolicy | None = None
        if not config.slot_range.fixed:
            self._policy = SlotPolicy(
                config.slot_range, config.resize_interval, config.shrink_after, time.monotonic()
            )
        self._row_slots = config.concurrency  # what the worker row says, for the admin
        self.on_resize: Callable[[int], None] | None = None

    @property
    def count(self) -> int:
        """The slots the worker runs now: ``--concurrency``, or within its MIN:MAX."""
        return self._count

    @property
    def capacity(self) -> int:
        """The jobs the worker claims for: one per slot."""
        return self._count

    def _freed(self, job: Job, outcome: Outcome | None) -> None:
        """``job``'s run ended with ``outcome`` (None: it failed to run): free its place.

        An ack batched with a claim frees its place once written (the
        supervisor's ``_acks_written``); anything else frees it here.
        """
        if outcome is not Outcome.PENDING and self.running.remove(job):
            self.wake()

    def _grow(self, target: int) -> None:
        """Run up to ``target`` jobs at once; fewer if a slot cannot start."""
        raise NotImplementedError

    def _shrink(self, target: int) -> None:
        """Run ``target`` jobs at once, once those above it have finished."""
        raise NotImplementedError

    def resize(self, held: int) -> None:
        """Grow or shrink the slots as the policy says, log it, and tell the worker row.

        Does nothing for a fixed ``--concurrency``.
        """
        if self._policy is None:
            return
        now = time.monotonic()
        before = self._count
        target = self._policy.decide(now, held)
        why = ""
        if target > before:
            self._grow(target)
            why = "due jobs were waiting"
        elif target < before:
            self._shrink(target)
            why = f"slots unneeded for {self.config.shrink_after:g}s"
        if self._count != target:
            self._policy.resized(self._count, now)
        if self._count != before:
            logger.info(
                "worker %s: %s -> %s slots (%s; range %s)",
                self.config.worker_id,
                before,
                self._count,
                why,
                self.config.slot_range,
            )
        self._record_slots()
        if self.on_resize is not None:
            self.on_resize(self._count)

    def claimed(self, filled_every_slot: bool) -> None:
        """Tell the policy what a round that had free slots found (see ``SlotPolicy.claimed``)."""
        if self._policy is not None:
            self._policy.claimed(filled_every_slot)

    def growth_due(self) -> float | None:
        """Seconds the loop may sleep before a waiting backlog can grow the slots; None: a poll interval."""
        if self._policy is None:
            return None
        wait = self._policy.seconds_to_growth(time.monotonic())
        return None if wait is None else min(wait, self.config.poll_interval)

    def _record_slots(self) -> None:
        """Write the slot count on the worker row if it changed; a failed write is tried next round."""
        count = self._count
        if count == self._row_slots:
            return
        try:
            self.client.resize_worker(self.config.worker_id, count)
        except DATABASE_ERRORS as exc:
            logger.debug("worker %s: could not record %s slots yet: %s", self.config.worker_id, count, exc)
            return
        # A row pruned meanwhile is written again, with this count, when the heartbeat registers again.
        self._row_slots = count
