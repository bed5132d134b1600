"""Flow control's cost: a drain under per-key limits against the same drain without keys, in turns.

The *limited* drain is ``flow_jobs`` ready no-op jobs spread over
``flow_keys`` concurrency keys (``tenant:N``, limit 1 each), the keys in a
seeded random order, so that a claim's next jobs in claim order often share
a key that already runs; the *plain* drain is as many jobs without keys. Both
are filled through ``enqueue_many`` and drained by one real ``runworker
--burst`` at each of ``flow_concurrencies``, the two taking turns run by run.

Every drain is bounded (``flow_timeout`` in all, ``flow_stall`` without a job
logged): a claim that leaves keyed jobs untaken stops the drain, and the
samples record how many jobs it got through instead of a rate.
"""

from __future__ import annotations

import json
import random
import sys
from typing import Any

from django.db import connection

from django_jobqueue import enqueue_many

from . import ours
from .worker import Drain, DrainTimeout, drain, worker_env

Samples = dict[str, list[float]]
# Jobs per enqueue_many call: each returns its Job objects, and 100,000 at once
# would hold a few hundred MB in this process for nothing.
CHUNK = 10_000
SEED = 16


def say(text: str) -> None:
    print(text, file=sys.stderr, flush=True)


def key_order(count: int, keys: int, seed: int = SEED) -> list[int]:
    """The key number of each of ``count`` jobs: every key as often as the others, shuffled."""
    order = [n % keys for n in range(count)]
    random.Random(seed).shuffle(order)
    return order


def fill(count: int, keys: int | None) -> None:
    """Make ``count`` ready no-op jobs (the queue emptied first), over ``keys`` keys of limit 1, or none."""
    ours.reset()
    if keys is None:
        for start in range(0, count, CHUNK):
            enqueue_many([("bench.noop", {"i": i}) for i in range(start, min(count, start + CHUNK))])
    else:
        fill_keyed(count, key_order(count, keys))
    ours.analyze()


def fill_keyed(count: int, order: list[int]) -> None:
    """``count`` jobs through ``enqueue_many``, job ``i`` with the key ``tenant:order[i]`` of limit 1."""
    for start in range(0, count, CHUNK):
        enqueue_many([keyed_item(i, order[i]) for i in range(start, min(count, start + CHUNK))])


def keyed_item(i: int, key: int) -> tuple[str, dict[str, int], dict[str, Any]]:
    return ("bench.noop", {"i": i}, {"concurrency_key": f"tenant:{key}", "concurrency_limit": 1})


def claim_rounds() -> int:
    """The claim rounds that took the done jobs: one per distinct ``started_at``.

    Each round is one transaction, and the claim stamps ``started_at`` with
    the transaction's ``now()``: no two rounds share one (to the microsecond),
    and every job of a round has its round's.
    """
    with connection.cursor() as cursor:
        cursor.execute(f"SELECT count(DISTINCT started_at) FROM {ours.JOB} WHERE status = 'done'")
        row = cursor.fetchone()
    return int(row[0]) if row else 0


def measure(cfg: dict[str, Any], url: str, samples: Samples) -> None:
    """The limited and the plain drain at each concurrency, in turns; a failed limited one is not retried."""
    env = worker_env(url)
    count, keys = cfg["flow_jobs"], cfg["flow_keys"]
    failed: set[int] = set()
    for run in range(cfg["runs"]):
        say(f"flow run {run + 1}/{cfg['runs']}: {count:,} jobs, {keys:,} keys of limit 1 against none")
        for concurrency in cfg["flow_concurrencies"]:
            # Who goes first alternates, so that neither always meets a freshly vacuumed table.
            turns: list[tuple[str, int | None]] = [("limited", keys), ("plain", None)]
            for side, side_keys in turns if run % 2 == 0 else turns[::-1]:
                if side == "limited" and concurrency in failed:
                    continue
                fill(count, side_keys)
                if not drain_once(cfg, env, side, concurrency, samples):
                    failed.add(concurrency)
            report_run(samples, concurrency)


def measure_backlog(cfg: dict[str, Any], url: str, samples: Samples) -> None:
    """Limited jobs behind a backlog: ``drain_jobs`` keyed jobs drained from a table of ``backlog_jobs``.

    Every job has a key of limit 1 (over ``flow_keys`` keys) and the queue a
    cap and a rate limit that do not bind: every round goes through the limited
    claim, its lock, its walk over the keys and its ledger. The same drain from
    a table of ``drain_jobs`` is the baseline, in turns.
    """
    env = worker_env(url, JOBQUEUE_QUEUES=json.dumps(NON_BINDING_LIMITS))
    concurrency, count = cfg["flow_backlog_concurrency"], cfg["drain_jobs"]
    args = [f"--concurrency={concurrency}", f"--max-jobs={count}"]
    for run in range(cfg["runs"]):
        turns = [("small", count), ("backlog", cfg["backlog_jobs"])]
        for side, size in turns if run % 2 == 0 else turns[::-1]:
            fill_keyed_copies(size, cfg["flow_keys"])
            result = drain(args, env, cfg["flow_timeout"], stall=cfg["flow_stall"])
            if result.done != count:
                raise SystemExit(f"limited {side} drain acked {result.done:,} of {count:,} jobs")
            samples[f"flow_{side}_drain"].append(result.rate)
            say(f"  limited drain c={concurrency}, {count:,} of {size:,} keyed jobs: {result.rate:,.0f}/s")


# A queue cap and a rate far above what one worker reaches: in force, never binding.
NON_BINDING_LIMITS = {"default": {"concurrency": 100_000, "rate_limit": "1000000/s"}}


def fill_keyed_copies(count: int, keys: int, seed: int = CHUNK) -> None:
    """``count`` keyed jobs: ``seed`` through ``enqueue_many``, the rest copied from them in SQL."""
    ours.reset()
    have = min(seed, count)
    fill_keyed(have, key_order(have, keys))
    ours.copy_until(count, have)


def drain_once(
    cfg: dict[str, Any], env: dict[str, str], side: str, concurrency: int, samples: Samples
) -> bool:
    """Drain the queue as filled; record its rate and claim rounds, or how far it got. True if whole."""
    count = cfg["flow_jobs"]
    key = f"flow_{side}_c{concurrency}"
    args = [f"--concurrency={concurrency}"]
    try:
        result = drain(args, env, cfg["flow_timeout"], stall=cfg["flow_stall"])
    except DrainTimeout as stopped:
        say(f"  {side} drain c={concurrency} stopped: {stopped}")
        samples[f"{key}_timeout"].append(float(stopped.partial.done))
        return False
    if result.done != count:
        # A burst ends at a round that claims nothing while nothing runs and no limit holds a job back.
        say(f"  {side} drain c={concurrency} exited having acked {result.done:,} of {count:,} jobs")
        samples[f"{key}_short"].append(float(result.done))
        return False
    record(samples, key, result)
    return True


def record(samples: Samples, key: str, result: Drain) -> None:
    samples[key].append(result.rate)
    samples[f"{key}_rounds"].append(float(claim_rounds()))


def report_run(samples: Samples, concurrency: int) -> None:
    limited = samples.get(f"flow_limited_c{concurrency}") or []
    plain = samples.get(f"flow_plain_c{concurrency}") or []
    if limited and plain and len(limited) == len(plain):
        say(
            f"  c={concurrency}: limited {limited[-1]:,.0f}/s against plain {plain[-1]:,.0f}/s "
            f"({limited[-1] / plain[-1]:.2f}x); claim rounds "
            f"{samples[f'flow_limited_c{concurrency}_rounds'][-1]:,.0f} against "
            f"{samples[f'flow_plain_c{concurrency}_rounds'][-1]:,.0f}"
        )
