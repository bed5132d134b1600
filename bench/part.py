"""Measure one database, ours and the baseline, interleaved run by run; print the samples as JSON.

Run by ``python -m bench`` in a process of its own per database (Django takes
its database from ``DATABASE_URL`` at start-up):
``python -m bench.part postgresql|mysql|sqlite CONFIG_JSON``.
"""

from __future__ import annotations

import json
import os
import shlex
import statistics
import sys
import tempfile
from collections import defaultdict
from pathlib import Path
from typing import Any

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "testproject.settings")
os.environ["DEBUG"] = "false"  # production: no query log kept in memory

import django  # noqa: E402

django.setup()

from django.db import connection  # noqa: E402

from . import against, asyncio_pool, flow, mysql_part, ours, pgqueuer_peer, pooler, processes, raw, raw_sqlite  # noqa: E402
from . import jobs as _jobs  # noqa: E402, F401 - the registry knows the jobs, as a web process would
from .worker import drain, worker_env  # noqa: E402

Samples = dict[str, list[float]]
ROOT = Path(__file__).resolve().parent.parent


def say(text: str) -> None:
    print(text, file=sys.stderr, flush=True)


def conninfo(database_url: str) -> str:
    # psycopg takes the URL as it is, less the scheme spelling django-environ allows.
    return database_url.replace("postgres://", "postgresql://", 1)


def single_inserts_interleaved(info: str, count: int, block: int = 50) -> tuple[float, float]:
    """Jobs/s of one-per-transaction inserts, raw and ``enqueue()``, in alternating blocks.

    Each such insert waits for its commit to reach the disk, and this machine's
    flush time drifts by several times within a minute: alternating blocks of
    ``block`` makes both sides meet the same drift.
    """
    raw.reset(info)
    ours.reset()
    raw_time = our_time = 0.0
    with raw.connect(info) as conn:
        for start in range(0, count, block):
            raw_time += raw.insert_block(conn, start, min(block, count - start))
            our_time += ours.enqueue_block(start, min(block, count - start))
    return count / raw_time, count / our_time


def batch_inserts_interleaved(info: str, count: int, rounds: int = 5) -> tuple[float, float, float]:
    """Jobs/s of a batch of ``count``: raw ``COPY``, the job table's ceiling, ``enqueue_many()``.

    Each is the median of ``rounds``. A batch takes a few dozen milliseconds,
    and this machine's disk makes any one of them swing by twice as much:
    taking the three in turn, ``rounds`` times, meets them with the same
    swings, and the medians leave the outliers out. The ceiling is a COPY of
    ready-made job rows into the job table (``raw.copy_ready_rows``).
    """
    columns, rows = ours.ready_rows(count)
    raw_rates, ceiling_rates, our_rates = [], [], []
    for _round in range(rounds):
        raw_rates.append(raw.copy_many(info, count))
        ours.reset()
        ceiling_rates.append(raw.copy_ready_rows(info, ours.JOB, columns, rows))
        our_rates.append(ours.enqueue_batch(count))
    return statistics.median(raw_rates), statistics.median(ceiling_rates), statistics.median(our_rates)


def measure_postgresql(cfg: dict[str, Any], url: str) -> Samples:
    samples: Samples = defaultdict(list)
    if "queue" in cfg["parts"]:
        measure_queue(cfg, url, samples)
    if "pool" in cfg["parts"]:
        measure_pool(cfg, url, samples)
    if "asyncio" in cfg["parts"]:
        asyncio_pool.measure(cfg, url, samples)
    if "flow" in cfg["parts"]:
        flow.measure(cfg, url, samples)
        flow.measure_backlog(cfg, url, samples)
    if "against" in cfg["parts"]:
        measure_against(cfg, samples)
    if "peers" in cfg["parts"]:
        pgqueuer_peer.measure(cfg, url, samples)
    if "pooler" in cfg["parts"]:
        pooler.measure(cfg, url, samples)
    ours.reset()
    return samples


def measure_queue(cfg: dict[str, Any], url: str, samples: Samples) -> None:
    """Enqueue, drain, pickup and backlog, ours against the raw baseline."""
    env = worker_env(url)
    info = conninfo(url)
    n_drain = cfg["drain_jobs"]
    with tempfile.TemporaryDirectory(prefix="jq-bench-") as tmp:
        for run in range(cfg["runs"]):
            say(f"postgresql run {run + 1}/{cfg['runs']}")
            raw_rate, our_rate = single_inserts_interleaved(info, cfg["single_jobs"])
            samples["raw_insert"].append(raw_rate)
            samples["enqueue"].append(our_rate)
            raw_rate, ceiling_rate, our_rate = batch_inserts_interleaved(info, cfg["many_jobs"])
            samples["raw_copy"].append(raw_rate)
            samples["job_table_copy"].append(ceiling_rate)
            samples["enqueue_many"].append(our_rate)
            for batch in (1, 10, 100):
                samples[f"raw_claim_ack_{batch}"].append(raw.claim_and_ack(info, n_drain, batch))
            for concurrency in cfg["concurrencies"]:
                # The baseline again, right before the drain it is read against: its commits wait
                # for the disk, whose flush time drifts within minutes (see raw_just_before).
                samples[f"raw_claim_ack_100_c{concurrency}"].append(raw_just_before(info, n_drain))
                ours.fill(n_drain)
                result = drain([f"--concurrency={concurrency}"], env)
                check_drained(result.done, n_drain, concurrency)
                samples[f"drain_c{concurrency}"].append(result.rate)
                samples[f"rss_c{concurrency}"].append(result.peak_rss_mb)
                say(f"  drain c={concurrency}: {result.rate:,.0f} jobs/s, {result.peak_rss_mb:.0f} MB")
            samples["raw_claim_ack_100_defaults"].append(raw_just_before(info, n_drain))
            drain_at_defaults(env, n_drain, samples)
            raw_latencies = raw.listen_pickup(info, cfg["pickup_jobs"], cfg["pickup_gap"])
            our_latencies = ours.pickup(env, cfg["pickup_jobs"], cfg["pickup_gap"], Path(tmp))
            for name, latencies in (("raw_pickup", raw_latencies), ("pickup", our_latencies)):
                for label, fraction in (("p50", 0.5), ("p95", 0.95), ("p99", 0.99)):
                    samples[f"{name}_{label}"].append(raw.percentile(latencies, fraction) * 1000)
        best = best_concurrency(samples, cfg["concurrencies"])
        samples["best_concurrency"] = [float(best)]
        # Delete-on-ack against keep-and-prune, at the best concurrency.
        for _run in range(cfg["runs"]):
            samples["raw_claim_ack_100_delete"].append(raw_just_before(info, n_drain))
            ours.fill(n_drain)
            result = drain([f"--concurrency={best}"], worker_env(url, JOBQUEUE_KEEP_COMPLETED="0"))
            check_drained(result.done, n_drain, best)
            samples["drain_best_delete"].append(result.rate)
        # The same drain with a backlog: a large table behind the jobs being claimed.
        say(f"postgresql: filling a backlog of {cfg['backlog_jobs']:,} jobs")
        ours.fill(cfg["backlog_jobs"])
        for _run in range(cfg["runs"]):
            result = drain([f"--concurrency={best}", f"--max-jobs={n_drain}"], env)
            check_drained(result.done, n_drain, best)
            samples["drain_backlog"].append(result.rate)
            say(f"  backlog drain c={best}: {result.rate:,.0f} jobs/s")
        ours.reset()
        with connection.cursor() as cursor:
            cursor.execute(f"DROP TABLE IF EXISTS {raw.TABLE}")


def measure_pool(cfg: dict[str, Any], url: str, samples: Samples) -> None:
    """``--pool processes`` against the thread pool at the same concurrency, run after run.

    The no-op drains are also read against the raw baseline's claim-and-ack
    in batches of 100, of as many jobs, measured in the same run right before
    them, so that both meet the same load.
    """
    env = worker_env(url)
    info = conninfo(url)
    loops, took = processes.calibrate_spin()
    samples["spin_ms"].append(took * 1000)
    say(f"pool: bench.spin({loops:,}) takes {took * 1000:.2f} ms here")
    n_cpu, n_noop = cfg["pool_cpu_jobs"], cfg["pool_noop_jobs"]
    for run in range(cfg["runs"]):
        say(f"pool run {run + 1}/{cfg['runs']}")
        samples["spin_1_process"].append(processes.spin_rate(1, loops))
        samples["spin_2_processes"].append(processes.spin_rate(2, loops))
        for concurrency in cfg["pool_concurrencies"]:
            raw_key = f"pool_raw_claim_ack_100_c{concurrency}"
            for pool in ("threads", "processes"):
                args = [f"--concurrency={concurrency}", f"--pool={pool}"]
                processes.fill_spin(n_cpu, loops)
                result = drain(args, env)
                check_drained(result.done, n_cpu, concurrency)
                samples[f"cpu_{pool}_c{concurrency}"].append(result.rate)
                baseline = ""
                if pool == "processes":
                    samples[raw_key].append(raw_just_before(info, n_noop))
                    baseline = f" (raw claim+ack batch 100 just before: {samples[raw_key][-1]:,.0f}/s)"
                ours.fill(n_noop)
                result = drain(args, env)
                check_drained(result.done, n_noop, concurrency)
                samples[f"noop_{pool}_c{concurrency}"].append(result.rate)
                say(
                    f"  {pool} c={concurrency}: cpu {samples[f'cpu_{pool}_c{concurrency}'][-1]:,.0f} jobs/s, "
                    f"no-op {result.rate:,.0f} jobs/s{baseline}"
                )
        concurrency = cfg["pool_memory_concurrency"]
        for pool in ("threads", "processes"):
            tree = processes.memory_after_jobs(
                [f"--concurrency={concurrency}", f"--pool={pool}"], env, cfg["pool_memory_jobs"]
            )
            if pool == "processes" and len(tree.children) != concurrency:
                raise RuntimeError(
                    f"found {len(tree.children)} children of the fork server, not {concurrency}"
                )
            mb = processes.MB
            samples[f"mem_{pool}_rss"].append(tree.worker.rss / mb)
            samples[f"mem_{pool}_pss"].append(tree.worker.pss / mb)
            samples[f"mem_{pool}_total_pss"].append(tree.total_pss / mb)
            if pool == "processes":
                samples["mem_fork_server_rss"].append(tree.fork_server.rss / mb)
                samples["mem_children_rss"].append(tree.children_rss / mb)
                samples["mem_children_pss"].append(tree.children_pss / mb)
                samples["mem_helpers_pss"].append(tree.helpers_pss / mb)
            say(
                f"  memory, {pool} c={concurrency}: worker RSS {tree.worker.rss / mb:.0f} MB, "
                f"PSS of its tree {tree.total_pss / mb:.0f} MB"
            )
    with connection.cursor() as cursor:
        cursor.execute(f"DROP TABLE IF EXISTS {raw.TABLE}")


def measure_against(cfg: dict[str, Any], samples: Samples) -> None:
    """The thread pool's no-op drains of this tree and of another commit's, taking turns run by run.

    Each tree fills and drains a database of its own (``bench/against.py``). ``BENCH_HERE_ARGS``
    (split as a shell would) adds options to this tree's workers alone, to measure what one costs:
    ``BENCH_HERE_ARGS="--metrics-port 19100"``.
    """
    here_args = shlex.split(os.environ.get("BENCH_HERE_ARGS", ""))
    urls = cfg["against"]["databases"]
    roots = {"here": ROOT, "there": Path(cfg["against"]["tree"])}
    n_drain = cfg["drain_jobs"]
    for run in range(cfg["runs"]):
        say(f"against {cfg['against']['ref']}: run {run + 1}/{cfg['runs']}")
        for concurrency in cfg["against_concurrencies"]:
            # Who goes first alternates, so that neither always meets a machine just left idle.
            turns = ["here", "there"] if run % 2 == 0 else ["there", "here"]
            for side in turns:
                against.fill(roots[side], urls[side], n_drain)
                args = [f"--concurrency={concurrency}", *(here_args if side == "here" else [])]
                result = drain(args, worker_env(urls[side]), root=roots[side])
                check_drained(result.done, n_drain, concurrency)
                samples[f"{side}_drain_c{concurrency}"].append(result.rate)
            here = samples[f"here_drain_c{concurrency}"][-1]
            there = samples[f"there_drain_c{concurrency}"][-1]
            say(f"  drain c={concurrency}: {here:,.0f}/s against {there:,.0f}/s ({here / there:.2f}x)")


def measure_sqlite(cfg: dict[str, Any], url: str) -> Samples:
    samples: Samples = defaultdict(list)
    env = worker_env(url)
    n_drain = cfg["drain_jobs"]
    with tempfile.TemporaryDirectory(prefix="jq-bench-") as tmp:
        raw_path = Path(tmp) / "raw.sqlite3"
        for run in range(cfg["runs"]):
            say(f"sqlite run {run + 1}/{cfg['runs']}")
            raw_sqlite.reset(raw_path)
            ours.reset()
            raw_time = our_time = 0.0
            conn = raw_sqlite.connect(raw_path)
            for start in range(0, cfg["single_jobs"], 50):
                raw_time += raw_sqlite.insert_block(conn, start, min(50, cfg["single_jobs"] - start))
                our_time += ours.enqueue_block(start, min(50, cfg["single_jobs"] - start))
            conn.close()
            samples["raw_insert"].append(cfg["single_jobs"] / raw_time)
            samples["enqueue"].append(cfg["single_jobs"] / our_time)
            samples["raw_copy"].append(raw_sqlite.insert_many(raw_path, cfg["many_jobs"]))
            samples["enqueue_many"].append(ours.enqueue_batch(cfg["many_jobs"]))
            for batch in (1, 10, 100):
                samples[f"raw_claim_ack_{batch}"].append(raw_sqlite.claim_and_ack(raw_path, n_drain, batch))
            for concurrency in cfg["sqlite_concurrencies"]:
                ours.fill(n_drain)
                result = drain([f"--concurrency={concurrency}"], env)
                check_drained(result.done, n_drain, concurrency)
                samples[f"drain_c{concurrency}"].append(result.rate)
                say(f"  drain c={concurrency}: {result.rate:,.0f} jobs/s")
            drain_at_defaults(env, n_drain, samples)
        samples["best_concurrency"] = [float(best_concurrency(samples, cfg["sqlite_concurrencies"]))]
    ours.reset()
    return samples


def raw_just_before(info: str, count: int) -> float:
    """The raw baseline's claim-and-ack in batches of 100, of ``count`` jobs, for the drain that follows.

    Each of its commits waits for the disk, and this machine's flush time
    drifts by up to twice within minutes: measured once at the start of a
    run, the baseline met another disk than the drains read against it a
    minute later (14,700/s in one run, 30,000/s in the process pool's part
    of the same). Measured right before each drain, the two meet the same.
    """
    return raw.claim_and_ack(info, count, 100)


def drain_at_defaults(env: dict[str, str], count: int, samples: Samples) -> None:
    """``runworker --burst`` with no other option: what a newcomer's worker drains."""
    ours.fill(count)
    result = drain([], env)
    check_drained(result.done, count, "(default)")
    samples["drain_defaults"].append(result.rate)
    say(f"  drain at defaults: {result.rate:,.0f} jobs/s")


def check_drained(done: int, expected: int, concurrency: int | str) -> None:
    if done != expected:
        raise RuntimeError(f"runworker --concurrency={concurrency} acked {done} jobs, not {expected}")


def best_concurrency(samples: Samples, concurrencies: list[int]) -> int:
    return max(concurrencies, key=lambda c: statistics.median(samples[f"drain_c{c}"]))


def main() -> None:
    vendor, cfg = sys.argv[1], json.loads(sys.argv[2])
    url = os.environ["DATABASE_URL"]
    if connection.vendor != vendor:
        raise SystemExit(f"DATABASE_URL is {connection.vendor}, not {vendor}")
    if vendor == "postgresql":
        samples = measure_postgresql(cfg, url)
    elif vendor == "mysql":
        samples = mysql_part.measure(cfg, url)
    else:
        samples = measure_sqlite(cfg, url)
    print(json.dumps(samples))


if __name__ == "__main__":
    main()
