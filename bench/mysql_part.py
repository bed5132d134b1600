"""MariaDB (or MySQL): ours against mysqlclient's raw baseline on the same server, run by run.

What issue 38 reads: ``enqueue()`` against a raw single-row insert,
``enqueue_many()`` against raw multi-row INSERTs, one worker's drains against
the raw claim-and-ack in batches of 100 (``bench/raw_mysql.py``) measured right
before each, and an idle worker's pickup by poll against its poll interval.
"""

from __future__ import annotations

import statistics
import sys
import tempfile
from collections import defaultdict
from pathlib import Path
from typing import Any

from . import mysql_ceiling, ours, raw, raw_mysql
from .worker import drain, worker_env

Samples = dict[str, list[float]]


def say(text: str) -> None:
    print(text, file=sys.stderr, flush=True)


def measure(cfg: dict[str, Any], url: str) -> Samples:
    samples: Samples = defaultdict(list)
    env = worker_env(url)
    n_drain = cfg["drain_jobs"]
    with tempfile.TemporaryDirectory(prefix="jq-bench-") as tmp:
        for run in range(cfg["runs"]):
            say(f"mysql run {run + 1}/{cfg['runs']}")
            raw_rate, our_rate = single_inserts_interleaved(url, cfg["single_jobs"])
            samples["raw_insert"].append(raw_rate)
            samples["enqueue"].append(our_rate)
            raw_rate, our_rate = batch_inserts_interleaved(url, cfg["many_jobs"])
            samples["raw_copy"].append(raw_rate)
            samples["enqueue_many"].append(our_rate)
            samples["job_table_insert"].append(mysql_ceiling.insert_many(url, cfg["many_jobs"]))
            samples["job_table_claim_ack_100"].append(mysql_ceiling.claim_and_ack(url, n_drain))
            for batch in (1, 10):
                samples[f"raw_claim_ack_{batch}"].append(raw_mysql.claim_and_ack(url, n_drain, batch))
            for concurrency in cfg["mysql_concurrencies"]:
                samples[f"raw_claim_ack_100_c{concurrency}"].append(
                    raw_mysql.claim_and_ack(url, n_drain, 100)
                )
                ours.fill(n_drain)
                result = drain([f"--concurrency={concurrency}"], env)
                if result.done != n_drain:
                    raise RuntimeError(
                        f"runworker --concurrency={concurrency} acked {result.done}, not {n_drain}"
                    )
                samples[f"drain_c{concurrency}"].append(result.rate)
                say(f"  drain c={concurrency}: {result.rate:,.0f} jobs/s")
            samples["raw_claim_ack_100"].append(raw_mysql.claim_and_ack(url, n_drain, 100))
            ours.fill(n_drain)
            result = drain([], env)
            samples["drain_defaults"].append(result.rate)
            latencies = ours.pickup(env, cfg["pickup_jobs"], cfg["pickup_gap"], Path(tmp))
            for label, fraction in (("p50", 0.5), ("p95", 0.95), ("p99", 0.99)):
                samples[f"pickup_{label}"].append(raw.percentile(latencies, fraction) * 1000)
            samples["poll_interval"].append(1000.0)  # runworker's default --poll-interval, in ms
    best = max(cfg["mysql_concurrencies"], key=lambda c: statistics.median(samples[f"drain_c{c}"]))
    samples["best_concurrency"] = [float(best)]
    samples["drain_best"] = samples[f"drain_c{best}"]
    samples["raw_claim_ack_100_best"] = samples[f"raw_claim_ack_100_c{best}"]
    # Delete-on-ack (a documented setting) at the best concurrency, as the PostgreSQL part does.
    for _run in range(cfg["runs"]):
        samples["raw_claim_ack_100_delete"].append(raw_mysql.claim_and_ack(url, n_drain, 100))
        ours.fill(n_drain)
        result = drain([f"--concurrency={best}"], worker_env(url, JOBQUEUE_KEEP_COMPLETED="0"))
        if result.done != n_drain:
            raise RuntimeError(f"runworker --concurrency={best} acked {result.done}, not {n_drain}")
        samples["drain_best_delete"].append(result.rate)
        say(f"  drain c={best}, KEEP_COMPLETED=0: {result.rate:,.0f} jobs/s")
    ours.reset()
    raw_mysql.drop(url)
    return samples


def single_inserts_interleaved(url: str, count: int, block: int = 50) -> tuple[float, float]:
    """Jobs/s of one-per-transaction inserts, raw and ``enqueue()``, in alternating blocks."""
    raw_mysql.reset(url)
    ours.reset()
    raw_time = our_time = 0.0
    conn = raw_mysql.connect(url)
    for start in range(0, count, block):
        raw_time += raw_mysql.insert_block(conn, start, min(block, count - start))
        our_time += ours.enqueue_block(start, min(block, count - start))
    conn.close()
    return count / raw_time, count / our_time


def batch_inserts_interleaved(url: str, count: int, rounds: int = 5) -> tuple[float, float]:
    """Jobs/s of a batch of ``count``: raw multi-row INSERTs, ``enqueue_many()``; medians of ``rounds``."""
    raw_rates, our_rates = [], []
    for _round in range(rounds):
        raw_rates.append(raw_mysql.insert_many(url, count))
        our_rates.append(ours.enqueue_batch(count))
    return statistics.median(raw_rates), statistics.median(our_rates)
