"""The threads coroutine jobs' thread-sensitive calls run in: a few lanes for all of them.

Django's async ORM (``aget``, ``acreate``, ``asave``…) and any
``sync_to_async`` call (thread-sensitive by default) run synchronous code in a
thread, and each thread holds its own database connection. Under ASGI Django
gives each request a thread for that (asgiref's ``ThreadSensitiveContext``);
a thousand coroutine jobs given one each would hold a thousand connections.
So the pool opens ``count`` lanes, each a ``ThreadSensitiveContext`` with its
one thread, and deals its jobs among them in turn: the calls of the jobs of
one lane run one at a time, in its thread, on its connection, and the pool
never holds more than ``count`` connections for them.

A lane's connections are tidied as a slot's are between jobs (``CONN_MAX_AGE``,
broken ones): at most once a second, in its thread, once one of its jobs ended.
"""

from __future__ import annotations

import asyncio
import contextvars
import itertools

from asgiref.sync import ThreadSensitiveContext, sync_to_async
from django.db import connections

from ...run.connections import close_held_connections

# Seconds between two tidyings of a lane's connections, at most.
TIDY_INTERVAL = 1.0


class Lane:
    """One ``ThreadSensitiveContext``, held open for as long as the pool runs."""

    def __init__(self) -> None:
        self.context: contextvars.Context | None = None  # set once opened
        self.used = False  # one of its jobs ended since its connections were last tidied
        self._opened = asyncio.Event()
        self._closing = asyncio.Event()

    async def hold(self) -> None:
        """Open the lane and keep it open until ``close``; then close its thread's connections."""
        async with ThreadSensitiveContext():
            self.context = contextvars.copy_context()
            self._opened.set()
            await self._closing.wait()
            await sync_to_async(connections.close_all)()

    async def opened(self) -> None:
        await self._opened.wait()

    def close(self) -> None:
        self._closing.set()

    def job_context(self) -> contextvars.Context:
        """A context for one task to run in: the lane's, copied, so that its own variables stay its own."""
        assert self.context is not None  # opened before the pool takes jobs
        return self.context.copy()

    async def tidy(self) -> None:
        """Close its thread's connections past ``CONN_MAX_AGE``, or broken, as a slot does between jobs."""
        self.used = False
        await sync_to_async(close_held_connections)()


class Lanes:
    """The pool's lanes; every call is made on the loop."""

    def __init__(self, count: int) -> None:
        self.lanes = [Lane() for _ in range(count)]
        self._turn = itertools.cycle(self.lanes)
        self._holders: list[asyncio.Task[None]] = []
        self._tidier: asyncio.Task[None] | None = None

    async def open(self) -> None:
        self._holders = [asyncio.create_task(lane.hold(), name="jobqueue-lane") for lane in self.lanes]
        for lane in self.lanes:
            await lane.opened()
        self._tidier = asyncio.create_task(self._tidy(), name="jobqueue-lane-tidier")

    def next(self) -> Lane:
        """The lane the next job's calls run in."""
        return next(self._turn)

    async def close(self) -> None:
        if self._tidier is not None:
            self._tidier.cancel()
        for lane in self.lanes:
            lane.close()
        await asyncio.gather(*self._holders, return_exceptions=True)

    async def _tidy(self) -> None:
        while True:
            await asyncio.sleep(TIDY_INTERVAL)
            # Each in its lane's thread (a Django connection belongs to the thread that opened
            # it), side by side: a lane busy with a long query holds back no other.
            used = [lane for lane in self.lanes if lane.used]
            await asyncio.gather(
                *(asyncio.create_task(lane.tidy(), context=lane.job_context()) for lane in used)
            )
