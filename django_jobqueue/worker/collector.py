"""The cyclic garbage collector, tuned for a process that runs jobs all its life."""

from __future__ import annotations

import gc
import sys

# Python's default threshold for collecting the youngest generation (2,000 since 3.13), and the worker's.
PYTHON_YOUNG_THRESHOLD = 2_000 if sys.version_info >= (3, 13) else 700
YOUNG_THRESHOLD = 10_000


def keep_out_of_collections() -> None:
    """Spare the worker's hot path collections of the cyclic garbage collector that free nothing.

    Each job makes and drops a few dozen tracked objects, nearly all freed
    by reference counting; yet with 200 jobs in flight the count of young
    objects swings past Python's default threshold (700) every few jobs,
    and each collection walked every job in flight to free none of them.
    The full collections that followed walked every object imported at
    start as well, tens of thousands. Together that was about 8 µs of
    each no-op job's 130. Frozen after one last collection, what the
    process holds from its start is left out of every later collection; a
    young threshold of ``YOUNG_THRESHOLD`` (unless the project set one of
    its own) lets a collection come when garbage has grown, not when jobs
    are in flight. Cyclic garbage a job leaves is still collected, a
    little later; an object of the start that becomes cyclic garbage later
    is never freed, as with any frozen object.
    """
    gc.collect()
    gc.freeze()
    young, *older = gc.get_threshold()
    if young == PYTHON_YOUNG_THRESHOLD:
        gc.set_threshold(YOUNG_THRESHOLD, *older)
