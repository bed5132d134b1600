"""How a worker splits its free slots between the queues it serves.

``--queue NAME:WEIGHT`` gives each queue a weight (default 1). Every claiming
round hands out the free slots one at a time by smooth weighted round-robin
(nginx's algorithm): each queue earns its weight in credit per slot, the
richest queue takes the slot and pays the sum of the weights. Over any stretch
of rounds a queue gets its weight's share of the slots, interleaved rather than
in bursts, and the shares become per-queue limits of one claim statement
(``QueueClient.claim``). So a queue with a backlog of 10,000 jobs takes only its
share, and another queue's new job waits at most for one slot to come free.
Inside a queue the claim is strict priority, then oldest ``run_at``.

A queue that had fewer due jobs than its share is *dry*: for one poll interval
(or until an enqueue into it is notified) its share goes to the other queues,
so that a mostly empty queue does not keep slots idle. When the worker is idle
every queue is asked, whatever its state.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable, Iterable, Sequence

from ..models import Job


class QueueShares:
    """Per-queue claim limits for a worker's free slots, by weight."""

    def __init__(
        self,
        weights: Sequence[tuple[str, int]],
        dry_for: float,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if not weights:
            raise ValueError("QueueShares needs at least one queue")
        self.weights = dict(weights)
        self.dry_for = dry_for
        self._clock = clock
        self._credit = dict.fromkeys(self.weights, 0)
        self._dry_until: dict[str, float] = {}

    def plan(self, free: int, *, ask_all: bool = False) -> list[tuple[str, int]]:
        """Return ``(queue, limit)`` pairs whose limits add up to ``free``."""
        now = self._clock()
        wet = [q for q in self.weights if ask_all or self._dry_until.get(q, 0.0) <= now]
        queues = wet or list(self.weights)
        total = sum(self.weights[q] for q in queues)
        shares: Counter[str] = Counter()
        for _slot in range(free):
            for queue in queues:
                self._credit[queue] += self.weights[queue]
            richest = max(queues, key=self._credit.__getitem__)
            self._credit[richest] -= total
            shares[richest] += 1
        return [(queue, shares[queue]) for queue in queues if shares[queue]]

    def record(self, plan: Sequence[tuple[str, int]], claimed: Sequence[Job]) -> bool:
        """Note which queues ran dry; return True if some queue filled its share (it may have more)."""
        now = self._clock()
        got = Counter(job.queue for job in claimed)
        more = False
        for queue, limit in plan:
            if got[queue] < limit:
                self._dry_until[queue] = now + self.dry_for
            else:
                self._dry_until.pop(queue, None)
                more = True
        return more

    def refill(self, queues: Iterable[str]) -> None:
        """Forget that ``queues`` were dry (a job was just enqueued into them)."""
        for queue in queues:
            self._dry_until.pop(queue, None)
