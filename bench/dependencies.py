"""depends_on at 10,000: fan-out (one job, 10,000 dependents) and fan-in (10,000 dependencies of one job).

Run against a migrated database, in a process of its own (it empties the queue's tables):
``DATABASE_URL=... python manage.py migrate && DATABASE_URL=... python -m bench.dependencies [JOBS] [RUNS]``.

Each figure is the median of ``RUNS`` runs, in seconds, taken in this process
through ``QueueClient`` (the statements a worker runs, without its threads):

- fan-out: ``enqueue_many`` of the 10,000 dependents of one job, then the
  ack of that job, which releases all of them in its transaction;
- fan-in: the enqueue of one job naming 10,000 dependencies, then the acks of
  the 10,000 in rounds of 50 (``ack_many``), against the same acks of 10,000
  jobs nobody waits on; and the last ack alone, the one that releases.
"""

from __future__ import annotations

import os
import statistics
import sys
import time

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "testproject.settings")
os.environ["DEBUG"] = "false"  # production: no query log kept in memory

import django  # noqa: E402

django.setup()

from django.db import connection  # noqa: E402

from django_jobqueue import QueueClient, enqueue_many  # noqa: E402
from django_jobqueue.models import Dependency, Job  # noqa: E402

from . import jobs as _jobs  # noqa: E402, F401 - the registry knows the jobs
from . import ours  # noqa: E402

ROUND = 50


def reset() -> None:
    ours.reset()
    with connection.cursor() as cursor:
        cursor.execute(f"DELETE FROM {Dependency._meta.db_table}")


def fan_out(client: QueueClient, jobs: int) -> dict[str, float]:
    reset()
    root = client.push("bench.noop", {})
    began = time.perf_counter()
    enqueue_many([("bench.noop", {"i": i}, {"depends_on": [root]}) for i in range(jobs)])
    enqueued = time.perf_counter() - began
    claimed = client.pull(worker_id="bench")
    assert claimed is not None and claimed.pk == root.pk
    began = time.perf_counter()
    assert client.ack(claimed, worker_id="bench")
    released = time.perf_counter() - began
    assert Job.objects.filter(status="ready").count() == jobs
    return {
        f"fan-out: enqueue {jobs:,} dependents": enqueued,
        "fan-out: the ack that releases them": released,
    }


def acks(client: QueueClient) -> tuple[float, float]:
    """Claim and ack every ready job in rounds of ``ROUND``; return the acks' time, and the last round's."""
    total = last = 0.0
    while claimed := client.pull_many(worker_id="bench", limit=ROUND):
        began = time.perf_counter()
        client.ack_many([(job, None) for job in claimed], worker_id="bench")
        last = time.perf_counter() - began
        total += last
    return total, last


def fan_in(client: QueueClient, jobs: int) -> dict[str, float]:
    reset()
    plain = enqueue_many([("bench.noop", {"i": i}) for i in range(jobs)])
    plain_acks, _ = acks(client)
    reset()
    deps = enqueue_many([("bench.noop", {"i": i}) for i in range(jobs)])
    began = time.perf_counter()
    last = client.push("bench.noop", {}, depends_on=deps)
    enqueued = time.perf_counter() - began
    assert last.status == "waiting" and len(plain) == len(deps)
    dep_acks, last_round = acks(client)
    assert Job.objects.get(pk=last.pk).status in ("ready", "running", "done")
    return {
        f"fan-in: enqueue 1 job on {jobs:,} dependencies": enqueued,
        f"fan-in: ack the {jobs:,} dependencies (rounds of {ROUND})": dep_acks,
        f"baseline: ack {jobs:,} jobs nobody waits on (rounds of {ROUND})": plain_acks,
        "fan-in: the last round, which releases": last_round,
    }


def main() -> None:
    jobs = int(sys.argv[1]) if len(sys.argv) > 1 else 10_000
    runs = int(sys.argv[2]) if len(sys.argv) > 2 else 3
    client = QueueClient()
    samples: dict[str, list[float]] = {}
    for _ in range(runs):
        for figures in (fan_out(client, jobs), fan_in(client, jobs)):
            for name, seconds in figures.items():
                samples.setdefault(name, []).append(seconds)
    reset()
    print(f"{connection.vendor}, {jobs:,} jobs, median of {runs} runs:")
    for name, values in samples.items():
        print(f"  {name:<60} {statistics.median(values):8.3f} s")


if __name__ == "__main__":
    main()
