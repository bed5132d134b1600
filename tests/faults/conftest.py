"""Fixtures of the fault-injection suite: the ledger table, workers that run its jobs, fleets, figures."""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator
from functools import partial
from typing import Any

import pytest
from django.db import connection

from django_jobqueue import QueueClient
from tests.worker_support import ROOT, WorkerProcess

# jobs: imported in the test process too, so that enqueueing its jobs by name applies
# their @job options (faults.work's max_attempts) here as in the workers.
from . import jobs, ledger, trails  # noqa: F401
from .chaos import Fleet

FAULT_JOBS = "tests.faults.jobs"
FIGURES_DIR = ROOT / "var" / "fault-figures"


@pytest.fixture
def ledger_table(queue: QueueClient) -> Iterator[None]:
    """The ledger table on the test database, empty; dropped afterwards."""
    ledger.create()
    yield
    ledger.drop()


@pytest.fixture
def trail_tables(queue: QueueClient) -> Iterator[None]:
    """The copies of rate limit starts and deleted jobs (``trails.py``) on the test database."""
    trails.create()
    yield
    trails.drop()


@pytest.fixture
def fault_worker(
    ledger_table: None, start_worker: Callable[..., WorkerProcess]
) -> Callable[..., WorkerProcess]:
    """Start ``runworker`` with the suite's jobs loaded: ``fault_worker(*args, env=None)``."""

    def start(*args: str, env: dict[str, str] | None = None) -> WorkerProcess:
        return start_worker(*args, env={"JOBQUEUE_MODULES": FAULT_JOBS, **(env or {})})

    return start


@pytest.fixture
def start_fleet(fault_worker: Callable[..., WorkerProcess]) -> Callable[..., Fleet]:
    """Start ``size`` workers alike with the suite's jobs loaded, as a ``chaos.Fleet``.

    ``start_fleet(prefix, size, args, env=None, slot_env=None)``.
    """
    return partial(Fleet, fault_worker)


@pytest.fixture
def figures(request: pytest.FixtureRequest) -> Iterator[Callable[..., None]]:
    """Record a scenario's measured figures: printed, and kept in ``var/fault-figures/``."""
    recorded: dict[str, Any] = {}
    started = time.monotonic()

    def record(**values: Any) -> None:
        recorded.update(values)

    yield record
    if recorded:
        recorded.setdefault("database", connection.vendor)
        recorded["seconds"] = round(time.monotonic() - started, 1)
        FIGURES_DIR.mkdir(parents=True, exist_ok=True)
        name = f"{request.node.name}-{connection.vendor}".replace("/", "_")
        (FIGURES_DIR / f"{name}.json").write_text(json.dumps(recorded, indent=2, default=str) + "\n")
        print(f"\nFIGURES {name}: {json.dumps(recorded, default=str)}")
