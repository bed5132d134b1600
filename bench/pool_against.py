"""The process pool of this tree against another commit's, run by run, beside the raw baseline.

``python -m bench.pool_against REF [--runs N] [--concurrency C]``, with
``DATABASE_URL`` a PostgreSQL database migrated by this tree (both trees must
share the job table's schema): in each run, a CPU-bound drain by each tree's
``runworker --pool processes``, the raw claim-and-ack in batches of 100, and
a no-op drain by each tree; who goes first alternates. Each tree is
exported as ``--against`` does (``against.export``). Prints each run's rates
and their medians.
"""

from __future__ import annotations

import argparse
import os
import statistics
from collections import defaultdict

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "testproject.settings")
os.environ["DEBUG"] = "false"

import django  # noqa: E402

django.setup()

from . import against, ours, processes, raw  # noqa: E402
from .part import conninfo  # noqa: E402
from .worker import ROOT, drain, worker_env  # noqa: E402


def main() -> None:
    summary = (__doc__ or "").split("\n\n")[0]
    parser = argparse.ArgumentParser(prog="python -m bench.pool_against", description=summary)
    parser.add_argument("ref", help="the commit to measure against")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--concurrency", type=int, default=4)
    parser.add_argument("--cpu-jobs", type=int, default=1_000)
    parser.add_argument("--noop-jobs", type=int, default=5_000)
    args = parser.parse_args()
    url = os.environ["DATABASE_URL"]
    trees = {"before": against.export(against.resolve(args.ref)), "now": ROOT}
    env = worker_env(url)
    pool = [f"--concurrency={args.concurrency}", "--pool=processes"]
    loops, took = processes.calibrate_spin()
    print(f"bench.spin({loops:,}): {took * 1000:.2f} ms; load average {os.getloadavg()[0]:.1f}")
    rates: dict[str, list[float]] = defaultdict(list)
    for run in range(args.runs):
        turns = ["before", "now"] if run % 2 == 0 else ["now", "before"]
        for side in turns:
            processes.fill_spin(args.cpu_jobs, loops)
            rates[f"CPU-bound, {side}"].append(drain(pool, env, root=trees[side]).rate)
        rates["raw claim+ack batch 100"].append(raw.claim_and_ack(conninfo(url), args.noop_jobs, 100))
        for side in turns:
            ours.fill(args.noop_jobs)
            rates[f"no-op, {side}"].append(drain(pool, env, root=trees[side]).rate)
        line = ", ".join(f"{name} {values[-1]:,.0f}/s" for name, values in rates.items())
        print(f"run {run + 1}: {line}; load average {os.getloadavg()[0]:.1f}", flush=True)
    for name, values in rates.items():
        print(f"{name}: median {statistics.median(values):,.0f}/s")


if __name__ == "__main__":
    main()
