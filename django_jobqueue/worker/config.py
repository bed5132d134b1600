"""What a worker is told to do: ``runworker``'s options, parsed, its default id, its start line."""

from __future__ import annotations

import os
import secrets
import socket
from dataclasses import dataclass

from django.db import connections

from .. import __version__
from .pools.autoscale import DEFAULT_RESIZE_INTERVAL, DEFAULT_SHRINK_AFTER, SlotRange
from .pools.processes.children import ChildLimits
from .run.executor import DEFAULT_CANCEL_GRACE


def default_worker_id() -> str:
    """``<hostname>-<pid>-<6 hex digits>``: unique even when a pid is reused after a restart."""
    return f"{socket.gethostname()[:200]}-{os.getpid()}-{secrets.token_hex(3)}"


@dataclass(frozen=True)
class WorkerConfig:
    """What ``runworker``'s options say; see the command's help for each."""

    worker_id: str
    using: str
    queues: tuple[tuple[str, int], ...] = ()  # (name, weight); empty = every queue
    concurrency: int = 1  # the slots at start, and the fewest an autoscaling worker keeps
    max_concurrency: int | None = None  # --concurrency MIN:MAX: the most slots; None: fixed
    resize_interval: float = DEFAULT_RESIZE_INTERVAL  # seconds between two resizes at most
    shrink_after: float = DEFAULT_SHRINK_AFTER  # seconds a slot stays unneeded before it retires
    burst: bool = False
    max_jobs: int | None = None
    visibility_timeout: float | None = None  # None: each job's own
    poll_interval: float = 1.0
    shutdown_timeout: float = 25.0
    default_visibility_timeout: float = 30.0  # paces the ticker when no override is given
    fire_schedules: bool = True  # run the scheduler (never in a burst)
    pool: str = "threads"  # or "processes": each slot's jobs run in a child process
    cancel_grace: float = DEFAULT_CANCEL_GRACE  # seconds a job told to stop gets before it is forced
    child_limits: ChildLimits = ChildLimits()  # --pool processes: when a child is replaced
    verbosity: int = 1  # -v, for the children's console lines
    metrics_host: str = "127.0.0.1"
    metrics_port: int = 0  # 0: no /metrics nor /healthz
    # synchronous_commit of the claiming rounds on PostgreSQL (JOBQUEUE["WORKER_SYNCHRONOUS_COMMIT"]);
    # None: the database's own.
    synchronous_commit: str | None = None

    @property
    def slot_range(self) -> SlotRange:
        return SlotRange(self.concurrency, self.max_concurrency or self.concurrency)

    def about(self) -> dict[str, str]:
        """What the worker's metrics say of it in ``jobqueue_worker_info``."""
        return {"database": self.using, "pool": self.pool, "version": __version__}

    def start_line(self, wake_up: str, schedules: int | None) -> str:
        """The line a worker logs once started: what it serves, how it wakes, which release it runs.

        ``schedules`` is how many periodic jobs it fires (None: it fires none).
        The version says, while an upgrade rolls through a fleet, which workers
        are still the old ones.
        """
        database = connections[self.using]
        queues = ",".join(f"{name}:{weight}" for name, weight in self.queues) or "*"
        return (
            f"worker {self.worker_id} started: queues={queues} concurrency={self.slot_range}"
            f" database={self.using} ({database.vendor} {database.settings_dict.get('NAME')})"
            f" wake-up={wake_up} schedules={'off' if schedules is None else schedules}"
            + (" burst" if self.burst else "")
            + (f" max-jobs={self.max_jobs}" if self.max_jobs else "")
            + (f" pool={self.pool}" if self.pool != "threads" else "")
            + f" version={__version__}"
        )
