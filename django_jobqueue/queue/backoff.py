"""How long a failed job waits before its next attempt.

The delay doubles with each attempt, is capped, and is jittered so that jobs
that failed together do not all come back in the same instant::

    delay(attempt) = min(BACKOFF_MAX, BACKOFF_BASE * 2 ** (attempt - 1)) * uniform(0.5, 1.0)
"""

from __future__ import annotations

import random


def backoff_delay(attempt: int, base: float, cap: float, rng: random.Random | None = None) -> float:
    """Return the seconds to wait after the ``attempt``-th run failed (``attempt`` >= 1)."""
    exponent = min(max(attempt, 1) - 1, 64)  # 2**64 * base is past any cap
    ceiling = min(cap, base * 2.0**exponent)
    return ceiling * (rng or random).uniform(0.5, 1.0)


def backoff_table(attempts: int, base: float, cap: float) -> list[tuple[int, float, float]]:
    """Return ``(attempt, shortest, longest)`` delays for the first ``attempts`` failures."""
    rows = []
    for attempt in range(1, attempts + 1):
        ceiling = min(cap, base * 2.0 ** min(attempt - 1, 64))
        rows.append((attempt, ceiling * 0.5, ceiling))
    return rows
