"""``--concurrency MIN:MAX``: how many slots a worker runs, decided from what its claims saw.

Pure: no threads, no clock of its own, no database; the claiming loop feeds
it the time and what each round found, and applies its answer.

- **Grow** when the last claiming round filled every free slot and more jobs
  were due: the slots double (capped at MAX). Doubling reaches any MAX in a
  few steps (1, 2, 4, 8 … in ``log2(MAX/MIN)`` intervals) and stops as soon
  as a round leaves a slot empty.
- **Shrink** when slots were not needed for ``shrink_after`` seconds: the
  policy remembers, for each number of slots k, the last time at least k
  jobs were held, and retires every slot above the highest k needed in that
  window (never below MIN, never a slot that holds a job).
- At most one resize, either way, every ``resize_interval`` seconds: a worker
  logs at most one resize line per interval, and a shrink right after a
  growth (or the reverse) never flaps.

Slots are interchangeable (they take jobs from one hand-off queue), so "the
third slot was idle for 30 s" and "no more than two jobs were held at once
for 30 s" are the same statement; the second is the one the loop can see.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

# Defaults of --resize-interval and --shrink-after, in seconds.
DEFAULT_RESIZE_INTERVAL = 1.0
DEFAULT_SHRINK_AFTER = 30.0


@dataclass(frozen=True)
class SlotRange:
    """The slots a worker may run: it starts with ``minimum`` and stays within both bounds."""

    minimum: int
    maximum: int

    def __post_init__(self) -> None:
        if self.minimum < 1:
            raise ValueError(f"the lowest number of slots must be 1 or more, got {self.minimum}")
        if self.maximum < self.minimum:
            raise ValueError(f"MIN must not be above MAX, got {self.minimum}:{self.maximum}")

    @property
    def fixed(self) -> bool:
        return self.minimum == self.maximum

    def __str__(self) -> str:
        return str(self.minimum) if self.fixed else f"{self.minimum}:{self.maximum}"


class SlotPolicy:
    """How many slots to run now, from the jobs held and what the last claiming round found."""

    def __init__(self, slots: SlotRange, resize_interval: float, shrink_after: float, now: float) -> None:
        self.range = slots
        self.resize_interval = resize_interval
        self.shrink_after = shrink_after
        self.slots = slots.minimum
        # True while the last round that had free slots filled them all and said more were due.
        self.backlog = False
        self._last_resized = -math.inf  # the first backlog grows at once
        # _needed_at[k]: the last time k + 1 jobs or more were held. Never increasing with k.
        self._needed_at = [now] * self.slots

    def claimed(self, filled_every_slot: bool) -> None:
        """Note what a round that had free slots found: all of them filled and more due, or not."""
        self.backlog = filled_every_slot

    def decide(self, now: float, held: int) -> int:
        """The number of slots to run now, ``held`` jobs being held; it becomes ``slots``.

        Never fewer than ``held``: a slot that holds a job is not retired.
        """
        held = min(held, self.slots)
        # The slots holding jobs are needed now, so the shrink below never retires one of them.
        self._needed_at[:held] = [now] * held
        if now - self._last_resized < self.resize_interval:
            return self.slots
        if self.backlog and self.slots < self.range.maximum:
            self.resized(min(self.range.maximum, self.slots * 2), now)
            self._last_resized = now
        elif self.slots > self.range.minimum:
            keep = self._slots_needed_since(now - self.shrink_after, floor=self.range.minimum)
            if keep < self.slots:
                self.resized(keep, now)
                self._last_resized = now
        return self.slots

    def resized(self, slots: int, now: float) -> None:
        """Take ``slots`` as the number running (the loop could start fewer than it was told)."""
        if slots > self.slots:
            self._needed_at.extend([now] * (slots - self.slots))
        else:
            del self._needed_at[slots:]
        self.slots = slots

    def seconds_to_growth(self, now: float) -> float | None:
        """How long until a backlog may grow the slots; None if it cannot (no backlog, or at MAX)."""
        if not self.backlog or self.slots >= self.range.maximum:
            return None
        return max(0.0, self._last_resized + self.resize_interval - now)

    def _slots_needed_since(self, since: float, floor: int) -> int:
        """The most jobs held at once after ``since``, and at least ``floor``."""
        keep = self.slots
        while keep > floor and self._needed_at[keep - 1] <= since:
            keep -= 1
        return keep
