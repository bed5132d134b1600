"""``runworker --pool asyncio`` against the thread pool: many I/O-bound jobs at once, and no-op drains.

Each figure is a real ``runworker --burst`` (``worker.drain``), the pools one
after the other on the same machine:

- **1,000 jobs that each await 1 s** (``bench.io_wait``, an ``asyncio.sleep``):
  the seconds from the first job's start (its ``started_at``, the claim's
  time) to the last one's end (its ``finished_at``), and the worker's peak
  resident memory (``VmHWM``). Under ``--pool asyncio --concurrency 1000``
  they all wait at once; the thread pool runs the same coroutines, each in an
  event loop of its own inside a slot, at 100 and at 1,000 threads.
- **No-op drains**: coroutines (``bench.anoop``) under the asyncio pool
  against plain functions (``bench.noop``) under the thread pool, each at the
  concurrencies listed; each run's best of either is compared.
"""

from __future__ import annotations

import sys
from typing import Any

from django.db import connection
from django.db.models import Max, Min

from django_jobqueue import enqueue_many
from django_jobqueue.models import Job

from . import ours
from .worker import Drain, drain, worker_env

Samples = dict[str, list[float]]


def say(text: str) -> None:
    print(text, file=sys.stderr, flush=True)


def fill(name: str, count: int, payload: dict[str, Any] | None = None) -> None:
    ours.reset()
    enqueue_many([(name, payload or {})] * count)


def span_of_jobs() -> float:
    """Seconds from the first job's claim to the last one's end, on the database's clock."""
    bounds = Job.objects.filter(status="done").aggregate(first=Min("started_at"), last=Max("finished_at"))
    return (bounds["last"] - bounds["first"]).total_seconds()


def run(args: list[str], env: dict[str, str], count: int) -> Drain:
    result = drain(args, env)
    done = Job.objects.filter(status="done").count()
    if done != count:
        raise RuntimeError(f"runworker {args}: {done} of {count} jobs done; {result}")
    return result


def measure(cfg: dict[str, Any], url: str, samples: Samples) -> None:
    env = worker_env(url)  # done jobs are kept (KEEP_COMPLETED): their finished_at is read back
    waits, seconds = cfg["asyncio_io_jobs"], cfg["asyncio_io_seconds"]
    for number in range(cfg["runs"]):
        say(f"asyncio run {number + 1}/{cfg['runs']}")
        for pool, concurrency in (("asyncio", waits), *(("threads", c) for c in cfg["asyncio_thread_io"])):
            fill("bench.io_wait", waits, {"seconds": seconds})
            result = run([f"--pool={pool}", f"--concurrency={concurrency}"], env, waits)
            key = f"aio_io_{pool}_c{concurrency}"
            samples[f"{key}_span"].append(span_of_jobs())
            samples[f"{key}_rss"].append(result.peak_rss_mb)
            say(
                f"  {waits:,} waits of {seconds:g}s, {pool} c={concurrency}: "
                f"{samples[f'{key}_span'][-1]:.2f}s, peak RSS {result.peak_rss_mb:.0f} MB"
            )
        count = cfg["asyncio_noop_jobs"]
        for pool, name, concurrencies in (
            ("asyncio", "bench.anoop", cfg["asyncio_concurrencies"]),
            ("threads", "bench.noop", cfg["asyncio_thread_concurrencies"]),
        ):
            rates = []
            for concurrency in concurrencies:
                fill(name, count)
                result = run([f"--pool={pool}", f"--concurrency={concurrency}"], env, count)
                samples[f"aio_noop_{pool}_c{concurrency}"].append(result.rate)
                rates.append(result.rate)
                say(f"  no-op drain, {pool} c={concurrency}: {result.rate:,.0f} jobs/s")
            samples[f"aio_noop_{pool}_best"].append(max(rates))
    ours.reset()
    connection.close()
