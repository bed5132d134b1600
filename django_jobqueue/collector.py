"""Python's cyclic garbage collector: paused for a batch of new jobs, tuned for a worker's process.

Both for the same reason: what a batch or a running job makes is nearly all
freed by reference counting or still in use, so a collection in between
frees nothing and only walks objects (docs/decisions.md, "Python's garbage
collector"). A leaf module, imported by ``queue/`` and ``worker/`` alike.
"""

from __future__ import annotations

import gc
import sys
from collections.abc import Iterator
from contextlib import contextmanager

# Python's default threshold for collecting the youngest generation (2,000 since 3.13), and the worker's.
PYTHON_YOUNG_THRESHOLD = 2_000 if sys.version_info >= (3, 13) else 700
YOUNG_THRESHOLD = 10_000


def keep_out_of_collections() -> None:
    """Spare the worker's hot path collections of the cyclic garbage collector that free nothing.

    Each job makes and drops a few dozen tracked objects, nearly all freed
    by reference counting; yet with 200 jobs in flight the count of young
    objects swings past Python's default threshold
    (``PYTHON_YOUNG_THRESHOLD``) every few jobs, and each collection walked
    every job in flight to free none of them. The full collections that
    followed walked every object imported at start as well, tens of
    thousands. Together that was about 8 µs of each no-op job's 130. Frozen
    after one last collection, what the process holds from its start is left
    out of every later collection; a young threshold of ``YOUNG_THRESHOLD``
    (unless the project set one of its own) lets a collection come when
    garbage has grown, not when jobs are in flight. Cyclic garbage a job
    leaves is still collected, a little later; an object of the start that
    becomes cyclic garbage later is never freed, as with any frozen object.
    """
    gc.collect()
    gc.freeze()
    young, *older = gc.get_threshold()
    if young == PYTHON_YOUNG_THRESHOLD:
        gc.set_threshold(YOUNG_THRESHOLD, *older)


@contextmanager
def paused() -> Iterator[None]:
    """Hold the collector off while a batch makes its jobs.

    A batch makes several tracked objects per job (its item, its ``Job`` and
    that Job's dicts and state, its row), all still reachable when it returns:
    a collection in between finds nothing to free, yet the heap's growth sets
    off one after another, a full one among them that walks every object of
    the process; for 10,000 jobs, a third of ``enqueue_many``'s time. Once
    resumed, the next allocation collects the youngest generation once. A
    collector already off (the application's choice) stays off; the pause is
    process-wide, so another thread's cyclic garbage waits for the batch's end.
    """
    if not gc.isenabled():
        yield
        return
    gc.disable()
    try:
        yield
    finally:
        gc.enable()
