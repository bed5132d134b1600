"""The pools a worker's jobs run in, behind the one interface its claiming loop talks to: ``Pool``.

``runworker --pool NAME`` picks one of ``POOLS``:

- ``threads`` (``threads.py``): each slot runs its jobs in a thread of the worker;
- ``processes`` (``processes/``): each slot feeds a child process of its own;
- ``asyncio`` (``loop/``): coroutine jobs run as tasks of one event loop,
  plain functions in a few threads beside it.

The first two are ``Slots`` (``slots.py``): numbered slot threads fed from
one hand-off queue. Every pool is a ``CountedPool`` (``counted.py``): its
parts, its slot count, grown and shrunk by ``--concurrency MIN:MAX``
(``autoscale.py``), and a job's place freed when its run ends. A pool needs
only to keep ``Pool``'s promises; it is made in ``make_pool`` and named in
``POOLS``, and the supervisor does not change.
"""

from __future__ import annotations

import os

from .base import Pool, PoolParts, PoolStartError

__all__ = ["POOLS", "Pool", "PoolParts", "PoolStartError", "default_concurrency", "make_pool"]

POOLS = ("threads", "processes", "asyncio")
# Slots when --concurrency is not given: most jobs wait on the network or the
# database, and ten threads keep a worker busy without holding many connections
# (docs/workers.md#how-many-processes-how-many-threads). Child processes run
# Python in parallel, so a process pool gets one per CPU.
DEFAULT_THREADS = 10
# A coroutine job waiting on the network costs a task of the loop, a few kilobytes: a hundred
# of them cost less than ten threads (docs/workers.md#pools).
DEFAULT_TASKS = 100


def default_concurrency(pool: str) -> int:
    """The slots of a worker of ``pool`` started without ``--concurrency``."""
    if pool == "processes":
        return os.cpu_count() or 1
    if pool == "asyncio":
        return DEFAULT_TASKS
    return DEFAULT_THREADS


def make_pool(parts: PoolParts) -> Pool:
    """The pool ``--pool`` names."""
    if parts.config.pool == "processes":
        from .processes.pool import ProcessPool

        return ProcessPool(parts)
    if parts.config.pool == "asyncio":
        from .loop.pool import EventLoopPool

        return EventLoopPool(parts)
    from .threads import ThreadPool

    return ThreadPool(parts)
