"""``--pool asyncio``: the pool, as the claiming loop sees it.

- **Coroutine jobs** (``async def``, and Django Tasks that are coroutines)
  run as tasks of one event loop, in a thread of its own: up to
  ``--concurrency`` at once, as many as the claimer claims for. A task costs
  a few kilobytes, so a worker can wait on a thousand slow APIs at once.
- **Plain functions** run in a thread pool beside the loop, as under ``--pool
  threads`` (time limits included): ``min(--concurrency, 10)`` threads. A job
  claimed while they are all busy waits for one, its claim kept alive.
- **Nothing on the loop waits on the database.** A plain ack goes to the
  completer, to ride on the claimer's next round as in the other pools; any
  other outcome (a retry, a dead letter, a timeout, a Task's ack) is written by
  one of ``WRITERS`` threads. Coroutine jobs' own queries run in the lanes'
  threads (``lanes.py``).

Stopping: the claimer stops handing jobs out; ``stop`` waits for the tasks
and the threads; a job handed back at shutdown has its task cancelled
(``target.py``). ``close`` ends the loop once no task runs; one that caught
its cancel and goes on is abandoned with the loop, as a thread would be.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from typing import TYPE_CHECKING

from ....models import Job
from ...run.coroutine import is_coroutine_job, run_coroutine_job
from ...run.outcomes import Outcome
from ...run.progress import reporter
from ..base import PoolStartError
from ..counted import CountedPool
from ..threads import ThreadPool
from .lanes import Lane, Lanes
from .target import TaskTarget
from .watch import LoopWatch

if TYPE_CHECKING:
    from ..base import PoolParts

logger = logging.getLogger(__name__)

# Threads for the plain functions a worker of this pool meets, and lanes for its coroutine
# jobs' queries, at most: each holds a database connection while its work queries.
PLAIN_THREADS = 10
# Threads that write the outcomes the completer does not carry: a retry, a dead letter.
WRITERS = 2
# Seconds start() waits for the loop to run.
START_TIMEOUT = 10.0


class EventLoopPool(CountedPool):
    """Coroutine jobs as tasks of one event loop; plain functions in a few threads beside it."""

    def __init__(self, parts: PoolParts) -> None:
        super().__init__(parts)
        config = parts.config
        threads = min(config.max_concurrency or config.concurrency, PLAIN_THREADS)
        self._plain = ThreadPool(
            replace(parts, config=replace(config, concurrency=threads, max_concurrency=None))
        )
        self._writers = ThreadPoolExecutor(WRITERS, thread_name_prefix="jobqueue-writer")
        self._loop = asyncio.new_event_loop()
        self._lanes = Lanes(threads)
        self._watch = LoopWatch(self._loop)
        self._thread = threading.Thread(target=self._serve, name="jobqueue-loop", daemon=True)
        self._running = threading.Event()
        self._failed: BaseException | None = None  # why the loop could not start or ended
        self._closing: asyncio.Event | None = None
        self._tasks: set[asyncio.Task[None]] = set()  # read from other threads: len() only

    # -- start -----------------------------------------------------------------

    def start(self) -> None:
        """Start the plain functions' threads and the loop's."""
        self._plain.start()
        self._thread.start()
        started = self._running.wait(START_TIMEOUT)
        if not started or self._failed is not None:
            self._plain.stop(1.0)
            why = repr(self._failed) if self._failed is not None else f"not running after {START_TIMEOUT:g}s"
            raise PoolStartError(f"the event loop could not start: {why}")
        self._watch.start()

    def _serve(self) -> None:
        asyncio.set_event_loop(self._loop)
        try:
            self._loop.run_until_complete(self._main())
        except BaseException as exc:  # noqa: B036 - told to start(), which refuses to start the worker
            self._failed = exc
            self._running.set()
            raise
        finally:
            self._loop.close()

    async def _main(self) -> None:
        self._closing = asyncio.Event()
        await self._lanes.open()
        self._watch.marking()
        self._running.set()
        await self._closing.wait()
        await self._lanes.close()

    # -- jobs ------------------------------------------------------------------

    def hand_off(self, jobs: Iterable[Job]) -> None:
        """Start each coroutine job as a task of the loop; give the others to the threads."""
        coroutines: list[Job] = []
        plain: list[Job] = []
        for job in jobs:
            (coroutines if is_coroutine_job(job) else plain).append(job)
        if plain:
            self._plain.hand_off(plain)
        if coroutines:
            self._loop.call_soon_threadsafe(self._start_tasks, coroutines)

    def _start_tasks(self, jobs: list[Job]) -> None:
        loop = self._loop
        for job in jobs:
            lane = self._lanes.next()
            task = loop.create_task(self._run(job, lane), context=lane.job_context())
            task.set_name(f"job {job.name} id={job.pk}")
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)

    async def _run(self, job: Job, lane: Lane) -> None:
        outcome = None
        try:
            if self.signalled.is_set():
                # Claimed as the worker was told to stop: back to the queue, unstarted.
                outcome = await self._write(self.executor.hand_back, job)
            else:
                outcome = await self._attempt(job)
        except Exception:
            logger.exception("job %s id=%s: the worker failed to run it", job.name, job.pk)
        finally:
            lane.used = True  # its connections are tidied at the lanes' next turn
            self._freed(job, outcome)

    async def _attempt(self, job: Job) -> Outcome:
        executor = self.executor
        control = executor.begin(job)
        task = asyncio.current_task()
        assert task is not None
        target = TaskTarget(self._loop, task, control)
        try:
            control.attach(target)
            worker_id = self.config.worker_id
            report = reporter(control, executor.progress)
            attempt = await run_coroutine_job(job, worker_id, self.client, control, report)
            target.leave()
            finish = executor.finish_later(job, control, attempt)
            if finish is None:
                return Outcome.PENDING
            return await self._write(finish)
        finally:
            target.leave()
            executor.end(control)

    async def _write(self, write: Callable[..., Outcome], *args: Job) -> Outcome:
        """Run ``write`` (which writes to the database) in a writer thread; return its outcome."""
        return await self._loop.run_in_executor(self._writers, write, *args)

    # -- autoscaling: a task needs nothing started ---------------------------------

    def _grow(self, target: int) -> None:
        self._count = target

    def _shrink(self, target: int) -> None:
        self._count = target  # the tasks above it finish; no more are claimed for them

    # -- stopping --------------------------------------------------------------

    def stop(self, wait: float) -> None:
        """Wait up to ``wait`` seconds for the running tasks and threads to finish."""
        deadline = time.monotonic() + wait
        while self._tasks and time.monotonic() < deadline:
            time.sleep(0.01)
        self._plain.stop(max(0.0, deadline - time.monotonic()))

    def still_running(self) -> int:
        """How many jobs still run: tasks of the loop, and threads."""
        return len(self._tasks) + self._plain.still_running()

    def close(self) -> None:
        """End the loop and its writers, unless a task still runs: they are abandoned with it."""
        self._watch.stop()
        self._plain.close()
        closing = self._closing
        if self._tasks or closing is None:
            return  # a handed-back job that caught its cancel: it may still write, as a thread would
        try:
            self._loop.call_soon_threadsafe(closing.set)
        except RuntimeError:
            pass  # already closed
        self._thread.join(5.0)
        self._writers.shutdown(wait=False)
