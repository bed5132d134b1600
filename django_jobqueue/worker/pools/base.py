"""The one interface a worker's claiming loop talks to, whatever its pool: ``Pool``.

Imported by the process pool's fork server before Django is set up (through
its package): nothing here may import a model at import time.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from ...models import Job
    from ...queue import QueueClient
    from ..config import WorkerConfig
    from ..run.executor import Executor
    from ..running import RunningJobs


class PoolStartError(RuntimeError):
    """A pool could not start its slots (a child process that would not start): why, to be logged."""


@dataclass(frozen=True)
class PoolParts:
    """What a pool is given by its worker."""

    config: WorkerConfig
    client: QueueClient
    executor: Executor  # runs each job and writes its outcome
    running: RunningJobs  # the claims the worker holds: a pool frees a job's slot by removing it
    wake: Callable[[], None]  # wakes the claiming loop: a slot is free
    signalled: threading.Event  # set by SIGTERM/SIGINT: hand jobs back instead of running them


class Pool(Protocol):
    """What the claiming loop asks of a pool.

    Each round the loop calls ``resize``, claims up to ``capacity`` less the
    jobs it holds, and passes what it claimed to ``hand_off``. The pool runs
    each job through the executor, then frees its slot: it removes the job
    from ``running`` and calls ``wake`` (unless the outcome is ``PENDING``:
    the loop frees that one once its ack is written). Stopping: ``stop``, then
    ``close``; whatever still runs after that is counted by ``still_running``.
    """

    # Told the slot count after each resize (runworker --metrics-port's), or None.
    on_resize: Callable[[int], None] | None

    @property
    def count(self) -> int:
        """The slots the worker runs now: ``--concurrency``, or within its MIN:MAX."""
        ...

    @property
    def capacity(self) -> int:
        """How many jobs the worker may hold claims on for this pool at once."""
        ...

    def start(self) -> None:
        """Start the slots; raise ``PoolStartError`` (having undone its start) if it cannot."""
        ...

    def hand_off(self, jobs: Iterable[Job]) -> None:
        """Run ``jobs``, claimed for it, as slots come free."""
        ...

    def resize(self, held: int) -> None:
        """Grow or shrink the slots by ``--concurrency MIN:MAX``, ``held`` jobs being claimed."""
        ...

    def claimed(self, filled_every_slot: bool) -> None:
        """Hear what a round with free slots found."""
        ...

    def growth_due(self) -> float | None:
        """Seconds the loop may sleep before the slots may grow; None: a poll interval."""
        ...

    def stop(self, wait: float) -> None:
        """Let each slot exit once its job is done; wait up to ``wait`` seconds for them."""
        ...

    def still_running(self) -> int:
        """How many slots still run a job (one handed back at shutdown)."""
        ...

    def close(self) -> None:
        """Release what the slots held (child processes); the worker is stopping."""
        ...
