"""What the kill scenarios share: a fleet of workers, the kills aimed at its work in progress, its stop."""

from __future__ import annotations

import os
import random
import signal
import time
from collections.abc import Callable, Mapping
from itertools import count

from tests.worker_support import WorkerProcess, first_within

from . import ledger, processes


class Fleet:
    """Workers started alike, each in a slot with an id of its own, replaced in their slot when killed.

    ``workers`` holds the live ones by slot, as ``(worker id, process)``;
    ``started`` every one the scenario started, for their logs. ``kills`` and
    ``child_kills`` note when each worker (by id) and each child process of a
    ``--pool processes`` worker (by pid) was SIGKILLed: what the checker
    explains extra runs by. A slot of ``slot_env`` starts its workers with
    those environment variables added.
    """

    def __init__(
        self,
        start_worker: Callable[..., WorkerProcess],
        prefix: str,
        size: int,
        args: tuple[str, ...],
        env: Mapping[str, str] | None = None,
        slot_env: Mapping[int, Mapping[str, str]] | None = None,
    ) -> None:
        self._start_worker = start_worker
        self._ids = (f"{prefix}-{n}" for n in count())
        self.args = args
        self.env = dict(env or {})
        self.slot_env = slot_env or {}
        self.started: dict[str, WorkerProcess] = {}
        self.slot_of: dict[str, int] = {}
        self.kills: dict[str, float] = {}
        self.child_kills: dict[int, float] = {}
        self.workers = [self._start(slot) for slot in range(size)]

    def _start(self, slot: int) -> tuple[str, WorkerProcess]:
        worker_id = next(self._ids)
        env = {**self.env, **self.slot_env.get(slot, {})}
        self.started[worker_id] = self._start_worker(*self.args, "--worker-id", worker_id, env=env)
        self.slot_of[worker_id] = slot
        return worker_id, self.started[worker_id]

    def __len__(self) -> int:
        return len(self.workers)

    def wait_started(self, timeout: float = 60) -> None:
        for _worker_id, worker in self.workers:
            worker.wait_started(timeout)

    def replace(self, slot: int) -> None:
        """Start a new worker in ``slot``, in place of one that is gone."""
        self.workers[slot] = self._start(slot)

    def kill(self, slot: int) -> None:
        """SIGKILL ``slot``'s worker, note when, and replace it once it is gone."""
        worker_id, worker = self.workers[slot]
        worker.send(signal.SIGKILL)
        self.kills[worker_id] = time.time()
        worker.wait()
        self.replace(slot)

    def slot_mid_job(self, within: float, otherwise: int, spare: frozenset[int] = frozenset()) -> int:
        """The slot of a worker in the middle of a job once there is one (within seconds), else ``otherwise``.

        On a loaded machine a worker restarted a few seconds before may not
        yet have a job when a timed kill comes. A worker running a job of
        ``spare`` (job ids) is not one.
        """
        busy = first_within(lambda: ledger.slots_mid_job(self.workers, spare=spare), within)
        return busy[0] if busy else otherwise

    def kill_in_order(self, times: int, every: float) -> None:
        """SIGKILL ``times`` workers in slot order, one every ``every`` seconds, on the chaos's own pace."""
        began = time.monotonic()
        for n in range(1, times + 1):
            time.sleep(max(0.0, began + n * every - time.monotonic()))
            self.kill(len(self.kills) % len(self))

    def kill_in_turns(
        self,
        rounds: int,
        every: float,
        aim_within: float,
        rng: random.Random,
        spare: frozenset[int] = frozenset(),
    ) -> None:
        """SIGKILL, every ``every`` seconds, in turn a ``--pool processes`` worker and one of its children.

        Each kill is aimed at one the ledger shows in the middle of a job, once
        one is (within ``aim_within`` seconds). A worker or child running a job
        of ``spare`` (job ids) is not aimed at: a scenario that must see those
        jobs' own ends keeps the kills off them.
        """

        def children_running_a_job() -> list[int]:
            runs = ledger.unended()
            running = {run.pid for run in runs} - {run.pid for run in runs if run.job_id in spare}
            children = [pid for _, worker in self.workers for pid in processes.pool_children(worker.pid)]
            return [pid for pid in children if pid in running]

        for round_ in range(rounds):
            time.sleep(every)
            if round_ % 2 == 0:
                self.kill(self.slot_mid_job(aim_within, otherwise=round_ % len(self), spare=spare))
            else:
                victims = first_within(children_running_a_job, aim_within)
                if victims:
                    victim = rng.choice(victims)
                    os.kill(victim, signal.SIGKILL)
                    self.child_kills[victim] = time.time()

    def logs(self) -> dict[str, str]:
        """The log of every worker started, by id."""
        return {worker_id: worker.log() for worker_id, worker in self.started.items()}

    def stop(self, timeout: float = 30.0) -> None:
        """SIGTERM every live worker once it has started, then check that each one exits 0."""
        for _worker_id, worker in self.workers:
            worker.wait_started(60)
            worker.send(signal.SIGTERM)
        for _worker_id, worker in self.workers:
            assert worker.wait(timeout) == 0, worker.log()
