"""A batch's cost: 10,000 no-op jobs of one ``batch()`` drained against 10,000 plain ones, in turns.

``python -m bench.batches [--jobs N] [--runs N] [--concurrency C ...]`` on the
database of ``DATABASE_URL`` (migrated first). Each side is filled, then
drained by one real ``runworker --burst``; the batch side's callback is
checked to be one, with the batch's count. The rate is the worker's, from its
log (first outcome to last); the fill's time is the enqueue's, block included.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time

import django

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "testproject.settings")
django.setup()

from django.db import connection  # noqa: E402

from django_jobqueue import batch, enqueue_many  # noqa: E402
from django_jobqueue.models import Batch, Job  # noqa: E402

from . import jobs, ours  # noqa: E402, F401 - jobs: the callback is registered here too
from .worker import ROOT, drain, worker_env  # noqa: E402


def say(text: str) -> None:
    print(text, file=sys.stderr, flush=True)


def fill(count: int, batched: bool) -> float:
    """Make ``count`` ready no-op jobs (the queue emptied first), in one batch or not; return the seconds."""
    ours.reset()
    Batch.objects.all().delete()
    items = [("bench.noop", {"i": i}) for i in range(count)]
    started = time.perf_counter()
    if batched:
        with batch(on_finish="bench.noop", payload={"callback": True}):
            enqueue_many(items)
    else:
        enqueue_many(items)
    elapsed = time.perf_counter() - started
    ours.analyze()
    return elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--jobs", type=int, default=10_000)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--concurrency", type=int, nargs="+", default=[8])
    args = parser.parse_args()
    subprocess.run([sys.executable, "manage.py", "migrate", "--noinput", "-v", "0"], cwd=ROOT, check=True)
    env = worker_env(os.environ.get("DATABASE_URL", ""))
    samples: dict[str, list[float]] = {}
    for run in range(args.runs):
        for concurrency in args.concurrency:
            sides = [("batch", True), ("plain", False)]
            for side, batched in sides if run % 2 == 0 else sides[::-1]:
                filled = fill(args.jobs, batched)
                result = drain([f"--concurrency={concurrency}"], env, 600)
                # The callback is enqueued with the last ack: the burst may end before it claims it.
                assert result.done - args.jobs in ((0, 1) if batched else (0,)), (side, result.done)
                if batched:
                    [row] = Batch.objects.all()
                    assert (row.total, row.done) == (args.jobs, args.jobs) and row.callback_job_id
                samples.setdefault(f"{side}_c{concurrency}", []).append(result.rate)
                samples.setdefault(f"{side}_fill", []).append(filled)
                say(
                    f"run {run + 1} c={concurrency} {side}: fill {filled:.2f} s, "
                    f"drain {result.rate:,.0f} jobs/s"
                )
    say(f"{connection.vendor}, {args.jobs:,} jobs, medians of {args.runs}:")
    for key, values in sorted(samples.items()):
        unit = "s" if key.endswith("_fill") else "jobs/s"
        say(f"  {key}: {statistics.median(values):,.2f} {unit}")
    Job.objects.all().delete()


if __name__ == "__main__":
    main()
