"""The worker's claim round alone, back to back in one thread, against the raw claim-and-ack.

``python -m bench.rounds [BATCH ...]`` with ``DATABASE_URL`` a PostgreSQL
database migrated by this tree: for each batch size, ``QueueClient.ack_and_claim``
(a worker's round: the acks of the last round's jobs and the next claim, one
transaction) drains ready no-op jobs with nothing else running (no slots, no
log lines), then the raw baseline drains as many. The ceiling of any worker
whose claiming loop does only that; the client's CPU per job is its Python.
"""

from __future__ import annotations

import os
import sys
import time

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "testproject.settings")
os.environ["DEBUG"] = "false"

import django  # noqa: E402

django.setup()

from django_jobqueue import QueueClient  # noqa: E402
from django_jobqueue.models import Job  # noqa: E402

from . import ours, raw  # noqa: E402
from .part import conninfo  # noqa: E402

JOBS = 20_000


def rounds(batch: int) -> tuple[float, float]:
    """Jobs/s of back-to-back rounds of ``batch``, and the client's CPU seconds per job."""
    ours.fill(JOBS)
    client = QueueClient()
    client.round_commit = "off"  # as runworker's rounds (JOBQUEUE["WORKER_SYNCHRONOUS_COMMIT"])
    held: list[Job] = []
    done = 0
    started, cpu = time.perf_counter(), time.thread_time()
    while True:
        acked, held = client.ack_and_claim(
            [(job, None) for job in held], worker_id="bench-rounds", queue_limits=None, limit=batch
        )
        done += len(acked)
        if not held:
            break
    return done / (time.perf_counter() - started), (time.thread_time() - cpu) / done


def main() -> None:
    url = os.environ["DATABASE_URL"]
    for batch in [int(arg) for arg in sys.argv[1:]] or [100]:
        rate, cpu = rounds(batch)
        baseline = raw.claim_and_ack(conninfo(url), JOBS, batch)
        print(
            f"batch {batch}: rounds {rate:,.0f}/s ({cpu * 1e6:.1f} µs of client CPU per job), "
            f"raw {baseline:,.0f}/s: {rate / baseline:.2f}×; load average {os.getloadavg()[0]:.1f}"
        )
    ours.reset()


if __name__ == "__main__":
    main()
