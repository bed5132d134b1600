"""A peer, measured side by side: pgqueuer's worker at its defaults against ``runworker`` at ours.

pgqueuer (the ``bench`` extra) keeps its own tables, installed by its own
``pgq install`` into the benchmark's database beside ours. Each run fills its
queue with ``peer_jobs`` ready no-op jobs through its own ``Queries.enqueue``
(not timed), then drains them with one real ``pgq run
bench.pgqueuer_app:create --mode drain`` process on asyncpg, every other
setting at pgqueuer's default; then fills ours with as many and drains them
with ``runworker --burst`` at our defaults (``bench/worker.py``). ``--mode
drain`` and ``--burst`` are the same thing on each side: exit once nothing is
left. After the two, pgqueuer drains twice more for comparison only (``OTHERS``):
on psycopg, and at ``--batch-size 100``.

pgqueuer logs no line per job; its rate comes from its log table instead:
the acked jobs (``status = 'successful'``), less one, over the time from the
first ack to the last (``created``, the ack statement's ``now()``), just as
ours comes from the first and last outcome lines, which the worker writes
once each ack has committed. Start-up and exit are counted on neither side.
A drain whose log table does not show every job acked, and none left in the
queue, fails the benchmark.
"""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from . import ours
from .worker import ROOT, drain, watch, worker_env

if TYPE_CHECKING:
    from pgqueuer.domain.settings import QualifiedNames

Samples = dict[str, list[float]]
# pgqueuer at its defaults: the factory of bench/pgqueuer_app.py, no option of pgq run's but --mode drain.
DEFAULTS = "create"
# For comparison: the samples' key, the factory, pgq run's options. The batch size is 10 by default:
# the jobs one statement claims, and the acks the buffer gathers before it writes them at once.
OTHERS = [
    ("peer_pgqueuer_psycopg", "create_psycopg", []),
    ("peer_pgqueuer_b100", DEFAULTS, ["--batch-size=100"]),
]
# Jobs per enqueue statement: pgqueuer sends each column as one array, an element per job.
CHUNK = 10_000


def say(text: str) -> None:
    print(text, file=sys.stderr, flush=True)


@dataclass(frozen=True)
class PeerDrain:
    jobs: int  # jobs acked, by pgqueuer's log table
    later: int  # of which acked after the first ack statement
    span: float  # seconds from the first ack statement to the last
    wall: float  # seconds from spawning the process to its exit
    peak_rss_mb: float

    @property
    def rate(self) -> float:
        """Jobs/s between the first and the last ack, as ``worker.Drain.rate`` counts ours.

        The jobs of the first ack statement are left out, as ours leaves out its
        first job: with acks a batch at a time, ``jobs - 1`` would count a batch
        that took no time.
        """
        return self.later / self.span if self.span > 0 else 0.0


def pgq(*args: str) -> list[str]:
    """A ``pgq`` command line, the script installed beside this interpreter."""
    return [str(Path(sys.executable).with_name("pgq")), *args]


def pgq_env(dsn: str) -> dict[str, str]:
    """The environment of a ``pgq`` process: the database in ``PGDSN``, as its CLI reads it."""
    return {**os.environ, "PGDSN": dsn}


def install(dsn: str) -> None:
    """Install pgqueuer's schema with its own CLI, unless it is there already."""
    env = pgq_env(dsn)
    present = subprocess.run(pgq("verify", "--expect", "present"), env=env, capture_output=True)
    if present.returncode != 0:
        subprocess.run(pgq("install"), env=env, check=True, capture_output=True)


def fill(dsn: str, count: int) -> None:
    """Empty pgqueuer's queue, log and statistics, and enqueue ``count`` ready no-op jobs."""
    asyncio.run(_fill(dsn, count))


async def _fill(dsn: str, count: int) -> None:
    import psycopg
    from pgqueuer import Queries

    from .pgqueuer_app import ENTRYPOINT

    names = _tables()
    async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as conn:
        await conn.execute(f"TRUNCATE {names.queue_table}, {names.queue_table_log}, {names.statistics_table}")
        queries = Queries.from_psycopg_connection(conn)
        for start in range(0, count, CHUNK):
            size = min(CHUNK, count - start)
            await queries.enqueue([ENTRYPOINT] * size, [None] * size, [0] * size)
        # As ours.fill does for the job table: autovacuum's work after a bulk load, done before timing.
        await conn.execute(f"VACUUM ANALYZE {names.queue_table}")


def _tables() -> QualifiedNames:
    """pgqueuer's own names for its tables, as its settings spell them."""
    from pgqueuer.domain.settings import DBSettings

    return DBSettings().qualified


def drain_pgqueuer(dsn: str, count: int, factory: str, args: list[str], timeout: float = 600.0) -> PeerDrain:
    """Run ``pgq run bench.pgqueuer_app:FACTORY --mode drain`` (plus ``args``) to its exit; measure it.

    Raise ``RuntimeError`` if the process fails or outlives ``timeout``, or if
    its log table does not show all ``count`` jobs acked and the queue empty.
    """
    command = pgq("run", f"bench.pgqueuer_app:{factory}", "--mode", "drain", *args)
    with tempfile.TemporaryDirectory(prefix="jq-bench-") as tmp:
        log_path = Path(tmp) / "pgq.log"
        started = time.perf_counter()
        with log_path.open("wb") as log:
            proc = subprocess.Popen(command, cwd=ROOT, env=pgq_env(dsn), stdout=log, stderr=subprocess.STDOUT)
        peak, stopped = watch(proc, log_path, timeout, None)
        wall = time.perf_counter() - started
        output = log_path.read_text(errors="replace")
    shown = " ".join(command[1:])
    if stopped or proc.returncode != 0:
        raise RuntimeError(f"pgq {shown} {stopped or f'exited {proc.returncode}'}:\n{output[-3000:]}")
    jobs, later, span, failed, left = asyncio.run(_acked(dsn))
    if jobs != count or left or failed:
        raise RuntimeError(f"pgq {shown} acked {jobs} of {count} jobs ({failed} failed, {left} left queued)")
    return PeerDrain(jobs, later, span, wall, peak)


async def _acked(dsn: str) -> tuple[int, int, float, int, int]:
    """From pgqueuer's log and queue tables: ``(acked, acked after the first ack statement,
    seconds from the first to the last, jobs not acked, jobs left in the queue)``."""
    import psycopg

    names = _tables()
    async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as conn:
        cursor = await conn.execute(
            f"WITH acks AS (SELECT created FROM {names.queue_table_log} WHERE status = 'successful')"
            " SELECT count(*), count(*) FILTER (WHERE created > (SELECT min(created) FROM acks)),"
            " coalesce(extract(epoch FROM max(created) - min(created)), 0) FROM acks"
        )
        acked, later, span = await cursor.fetchone() or (0, 0, 0)
        # Every job's end is logged: a job that failed, or was cancelled or deleted, is not a drained one.
        cursor = await conn.execute(
            f"SELECT count(*) FROM {names.queue_table_log}"
            " WHERE status IN ('exception', 'canceled', 'deleted', 'failed')"
        )
        (failed,) = await cursor.fetchone() or (0,)
        cursor = await conn.execute(f"SELECT count(*) FROM {names.queue_table}")
        (left,) = await cursor.fetchone() or (0,)
    return int(acked), int(later), float(span), int(failed), int(left)


def measure(cfg: dict[str, Any], url: str, samples: Samples) -> None:
    """pgqueuer at its defaults, then ours at ours, then pgqueuer as ``OTHERS`` sets it, run after run."""
    dsn = url.replace("postgres://", "postgresql://", 1)
    count = cfg["peer_jobs"]
    install(dsn)
    env = worker_env(url)
    for run in range(cfg["runs"]):
        say(f"peers run {run + 1}/{cfg['runs']}: {count:,} no-op jobs, each side at its defaults")
        record_pgqueuer(dsn, count, "peer_pgqueuer", DEFAULTS, [], samples)
        ours.fill(count)
        result = drain([], env)
        if result.done != count:
            raise RuntimeError(f"runworker at its defaults acked {result.done} jobs, not {count}")
        samples["peer_ours"].append(result.rate)
        samples["peer_ours_rss"].append(result.peak_rss_mb)
        say(f"  runworker --burst: {result.rate:,.0f} jobs/s, {result.peak_rss_mb:.0f} MB")
        for key, factory, args in OTHERS:
            record_pgqueuer(dsn, count, key, factory, args, samples)
    # Leave neither queue holding jobs: the next part of the benchmark starts from empty tables.
    fill(dsn, 0)
    ours.reset()


def record_pgqueuer(dsn: str, count: int, key: str, factory: str, args: list[str], samples: Samples) -> None:
    fill(dsn, count)
    result = drain_pgqueuer(dsn, count, factory, args)
    samples[key].append(result.rate)
    samples[f"{key}_rss"].append(result.peak_rss_mb)
    command = " ".join(["pgq run", f"bench.pgqueuer_app:{factory}", "--mode drain", *args])
    say(f"  {command}: {result.rate:,.0f} jobs/s, {result.peak_rss_mb:.0f} MB")
