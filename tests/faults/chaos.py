"""What the kill scenarios share: kills aimed at work in progress, and the workers' stop at the end."""

from __future__ import annotations

import os
import random
import signal
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from tests.worker_support import WorkerProcess, first_within

from . import ledger, processes

Workers = list[tuple[str, WorkerProcess]]


@dataclass
class Kills:
    """When each worker (by id) and each child process (by pid) was killed."""

    workers: dict[str, float] = field(default_factory=dict)
    children: dict[int, float] = field(default_factory=dict)


def kill_in_turns(
    workers: Workers,
    start: Callable[[], tuple[str, WorkerProcess]],
    rounds: int,
    every: float,
    aim_within: float,
    rng: random.Random,
    spare: frozenset[int] = frozenset(),
) -> Kills:
    """SIGKILL, every ``every`` seconds, in turn a ``--pool processes`` worker and one of its children.

    Each kill is aimed at one the ledger shows in the middle of a job, once one
    is (within ``aim_within`` seconds): on a loaded machine a worker restarted
    a few seconds before may not yet have a job when a timed kill comes. A
    killed worker is replaced at once by ``start()``, in its place in ``workers``.
    A worker or child running a job of ``spare`` (job ids) is not aimed at:
    a scenario that must see those jobs' own ends keeps the kills off them.
    """
    kills = Kills()

    def children_running_a_job() -> list[int]:
        runs = ledger.unended()
        running = {run.pid for run in runs} - {run.pid for run in runs if run.job_id in spare}
        return [pid for _, worker in workers for pid in processes.pool_children(worker.pid) if pid in running]

    for round_ in range(rounds):
        time.sleep(every)
        if round_ % 2 == 0:
            busy = first_within(lambda: ledger.slots_mid_job(workers, spare=spare), aim_within)
            slot = busy[0] if busy else round_ % len(workers)
            worker_id, worker = workers[slot]
            worker.send(signal.SIGKILL)
            kills.workers[worker_id] = time.time()
            worker.wait()
            workers[slot] = start()
        else:
            victims = first_within(children_running_a_job, aim_within)
            if victims:
                victim = rng.choice(victims)
                os.kill(victim, signal.SIGKILL)
                kills.children[victim] = time.time()
    return kills


def stop_gracefully(workers: Iterable[tuple[str, WorkerProcess]], timeout: float = 30.0) -> None:
    """SIGTERM every worker once it has started, then check that each one exits 0."""
    stopping = [worker for _worker_id, worker in workers]
    for worker in stopping:
        worker.wait_started(60)
        worker.send(signal.SIGTERM)
    for worker in stopping:
        assert worker.wait(timeout) == 0, worker.log()
