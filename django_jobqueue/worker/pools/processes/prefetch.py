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
  (``ProcessPool.capacity``).
- a slot takes up to the depth from the hand-off queue (``pools/handoff.py``),
  and no more than its share of the jobs waiting.
"""

from __future__ import annotations

# Seconds of work a batch aims at: long enough that a child rarely waits for its next job
# (the worker's claim round and hand-off take a millisecond or two), short enough that a job
# waits little behind the others of its batch.
BATCH_SECONDS = 0.01
# The most jobs in one batch: 4 slots of 64 claim 256 at once, a claim round's worth.
MAX_DEPTH = 64
# Weight of the latest job in the moving average: about the last ten jobs count.
SMOOTHING = 0.2


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
