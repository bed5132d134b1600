"""The limited claim: jobs a concurrency key, a queue cap or a rate limit applies to.

A job is *limited* when it has a ``concurrency_key`` or its queue has a
``concurrency`` or ``rate_limit`` in ``JOBQUEUE["QUEUES"]``. Every other job is
claimed by the plain statement of ``rounds.py``, which takes no lock. Limited
jobs are claimed only by a statement that runs after the *flow lock* (on
PostgreSQL an advisory lock held to the commit, taken by a statement of its
own so that the claim's snapshot sees every earlier limited claim; on SQLite
the single writer): so the counts it reads are the fleet's, and two workers
claiming at once never both take a key's last slot.

What counts as running is a ``running`` job whose claim has not expired: a
worker that died frees its slots as soon as their claims expire, without
waiting for ``tick_timeouts``. Rate limits count the ``QueueStart`` ledger's
rows of the last window, written by the claim itself.

No head-of-line blocking: the candidates are a *window* of the next due jobs
with a key, in claim order; a job is taken if its key has room. When the
window is full and keys at their limit hold part of it, the next limited round
*walks* the keys instead (the first due job of each of the next keys in key
order, a few index probes a key, resuming after the last key visited), so a
tenant whose backlog fills the window never keeps another's jobs waiting for
more than a round.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from ...models import QueueStart, QueueState
from ..engines import Engine
from ..flow import QueueLimits
from .tables import live_jobs

STATE = QueueState._meta.db_table
STARTS = QueueStart._meta.db_table
_CANDIDATE = "id, queue, priority, run_at, concurrency_key, concurrency_limit"
_ORDER = "priority DESC, run_at, id"


# How often a plain round asks whether keyed jobs wait while its claims fill
# every free slot: a keyed job waits at most this long for a busy worker.
PROBE_EVERY = 0.1


@dataclass
class FlowState:
    """What a claimer remembers between rounds (one per ``QueueClient``)."""

    # Due jobs with a key may wait in the claimer's queues: its rounds take the flow lock.
    keyed_waiting: bool = False
    # The window was full and held: the next limited round walks the keys.
    walk_next: bool = False
    # The last key the walk visited; the next walk starts after it.
    walk_after: str = ""
    # Limited jobs were due but had no room in the last round (a --burst worker waits for them).
    held: int = 0
    # The last plain round claimed fewer jobs than it asked for.
    short: bool = True
    # When a plain round last asked whether keyed jobs wait (time.monotonic()).
    probed_at: float = field(default=-PROBE_EVERY)

    def probe_due(self) -> bool:
        """Whether this plain round asks (one index probe): after a short round, or now and then."""
        return self.short or time.monotonic() - self.probed_at >= PROBE_EVERY

    def probed(self, keyed_waiting: bool) -> None:
        self.keyed_waiting = keyed_waiting
        self.probed_at = time.monotonic()


def window_size(limit: int) -> int:
    """How many due keyed jobs a round looks at for ``limit`` free slots."""
    return 2 * limit + 8


def limited_queues(
    queue_limits: Sequence[tuple[str, int]] | None, limits: Mapping[str, QueueLimits]
) -> list[str]:
    """The queues with limits that the claimer serves (every one, when it serves every queue)."""
    if queue_limits is None:
        return sorted(limits)
    return [queue for queue, _share in queue_limits if queue in limits]


def not_paused(queue_sql: str) -> str:
    """SQL true while the queue that ``queue_sql`` (a parameter or a constant) names is not paused.

    Not correlated with the row: the database reads it once per statement.
    """
    return f"NOT EXISTS (SELECT 1 FROM {STATE} WHERE {STATE}.queue = {queue_sql} AND {STATE}.paused)"


# SQL true for a row of a queue that is not paused: the paused queues are read once, as a set.
NOT_PAUSED_ROW = f"queue NOT IN (SELECT queue FROM {STATE} WHERE paused)"


@dataclass
class LimitedPick:
    """The SQL of one limited round's pick, and the parameters in their order."""

    ctes: list[str]
    params: list[Any]
    recursive: bool
    # SQL of the flow marker's values: held candidates, the last key walked.
    held: str
    walked: str


# SQL of how many keyed candidates the round saw (the CTE ``keyed``, window or walk).
KEYED_SEEN = "(SELECT COUNT(*) FROM keyed)"


def limited_pick(
    engine: Engine,
    queue_limits: Sequence[tuple[str, int]] | None,
    limit: int,
    limits: Mapping[str, QueueLimits],
    flow: FlowState,
) -> LimitedPick:
    """The CTEs that pick the limited jobs one round may claim (see the module's docstring)."""
    pick = LimitedPick([], [], False, "", "NULL")
    _keyed_candidates(pick, engine, queue_limits, limit, flow)
    _unkeyed_candidates(pick, engine, queue_limits, limit, limits)
    pick.ctes.append(
        "candidates AS (SELECT * FROM keyed UNION ALL SELECT * FROM unkeyed), "
        "key_ranked AS (SELECT candidates.*, ROW_NUMBER() OVER "
        f"(PARTITION BY concurrency_key ORDER BY {_ORDER}) AS key_rank FROM candidates), "
        f"{_running_keys(engine)}, "
        "queue_ranked AS (SELECT key_ok.*, ROW_NUMBER() OVER "
        f"(PARTITION BY queue ORDER BY {_ORDER}) AS queue_rank, "
    )
    limits_room, limits_params = _limits_room(engine, limits)
    pick.ctes[-1] += (
        f"{limits_room} AS limits_room, {_share_room(queue_limits, limit)} AS share_room FROM key_ok)"
    )
    pick.params += limits_params
    pick.ctes.append(
        "admitted AS (SELECT id, priority, run_at FROM queue_ranked "
        "WHERE queue_rank <= limits_room AND queue_rank <= share_room)"
    )
    # Held: due jobs a limit keeps back (their key's, their queue's cap or rate),
    # not those beyond what the round asked for.
    pick.held = (
        "((SELECT COUNT(*) FROM key_ranked) - (SELECT COUNT(*) FROM key_ok) "
        "+ (SELECT COUNT(*) FROM queue_ranked WHERE queue_rank > limits_room))"
    )
    return pick


def _running_keys(engine: Engine) -> str:
    """The CTEs ``running_keys`` and ``key_ok``: the window's jobs whose key has room.

    Where the planner's estimates may pick the wrong plan (PostgreSQL: a
    running job is rare in the statistics, so a join of the running jobs with
    the window may compare every pair), the running keys are counted once, in
    one pass over the running jobs, into an object looked up by key. Elsewhere
    (SQLite) each key of the window is one probe of jobqueue_key_running_idx.
    """
    jobs = live_jobs(engine)
    room = (
        "key_ranked.concurrency_key IS NULL "
        "OR key_rank + COALESCE({running}, 0) <= COALESCE(concurrency_limit, 1)"
    )
    if engine.supports_json_object_agg:
        counts = (
            f"SELECT concurrency_key, COUNT(*) AS running FROM {jobs} WHERE status = 'running' "
            f"AND concurrency_key IS NOT NULL AND locked_until > {engine.now} GROUP BY concurrency_key"
        )
        return (
            "running_keys AS (SELECT COALESCE(jsonb_object_agg(concurrency_key, running), "
            "CAST('{}' AS jsonb)) AS counts "
            f"FROM ({counts}) AS running_counts), "
            "key_ok AS (SELECT key_ranked.* FROM key_ranked CROSS JOIN running_keys WHERE "
            + room.format(running="CAST(counts ->> key_ranked.concurrency_key AS integer)")
            + ")"
        )
    return (
        "running_keys AS (SELECT window_keys.concurrency_key, "
        f"(SELECT COUNT(*) FROM {jobs} WHERE {engine.keyed_status} = 'running' "
        "AND concurrency_key = window_keys.concurrency_key "
        f"AND locked_until > {engine.now}) AS running "
        "FROM (SELECT DISTINCT concurrency_key FROM keyed) AS window_keys), "
        "key_ok AS (SELECT key_ranked.* FROM key_ranked LEFT JOIN running_keys "
        "ON running_keys.concurrency_key = key_ranked.concurrency_key WHERE "
        + room.format(running="running")
        + ")"
    )


def _queue_scope(queue_limits: Sequence[tuple[str, int]] | None) -> tuple[str, list[Any]]:
    """SQL true for a job of a queue the claimer serves that is not paused."""
    if queue_limits is None:
        return NOT_PAUSED_ROW, []
    queues = [queue for queue, _share in queue_limits]
    marks = ", ".join(["%s"] * len(queues))
    return f"queue IN ({marks}) AND {NOT_PAUSED_ROW}", queues


def _keyed_candidates(
    pick: LimitedPick,
    engine: Engine,
    queue_limits: Sequence[tuple[str, int]] | None,
    limit: int,
    flow: FlowState,
) -> None:
    """The CTE ``keyed``: the window of due keyed jobs, or the heads of the keys a walk visits."""
    jobs = live_jobs(engine)
    due = f"{engine.keyed_status} = 'ready' AND concurrency_key IS NOT NULL AND run_at <= {engine.now}"
    scope, scope_params = _queue_scope(queue_limits)
    size = window_size(limit)
    if not flow.walk_next:
        # The claim index of keyed jobs, read in its order to the window's end (MySQL's
        # jq_claim_any_idx with jq_ready_keyed = 1; a partial index elsewhere).
        window = f"{engine.keyed} AND run_at <= {engine.now}"
        pick.ctes.append(
            f"keyed AS (SELECT {_CANDIDATE} FROM {jobs} WHERE {window} AND {scope} "
            f"ORDER BY {engine.claim_order} LIMIT {int(size)})"
        )
        pick.params += scope_params
        return
    # Keys in key order after the last one visited: one probe of jobqueue_key_ready_idx each.
    next_key = (
        f"(SELECT concurrency_key FROM {jobs} WHERE {engine.keyed_status} = 'ready' "
        "AND concurrency_key IS NOT NULL "
        "AND concurrency_key > {after} ORDER BY concurrency_key LIMIT 1)"
    )
    head = (
        f"(SELECT id FROM {jobs} WHERE {due} AND concurrency_key = walk.walked AND {scope} "
        f"ORDER BY {engine.claim_order} LIMIT 1)"
    )
    pick.recursive = True
    pick.ctes.append(
        # "walked", not "key": a word MySQL keeps for itself.
        f"walk(walked, visited) AS (SELECT {next_key.format(after='%s')}, 1 "
        f"UNION ALL SELECT {next_key.format(after='walk.walked')}, visited + 1 FROM walk "
        f"WHERE walk.walked IS NOT NULL AND visited < {int(size)}), "
        f"heads AS (SELECT {head} AS id FROM walk WHERE walk.walked IS NOT NULL), "
        f"keyed AS (SELECT {_CANDIDATE} FROM {jobs} WHERE id IN (SELECT id FROM heads) AND {due})"
    )
    pick.params += [flow.walk_after, *scope_params]
    # NULL once the walk ran off the last key: the next walk starts from the first.
    pick.walked = "(SELECT walked FROM walk ORDER BY visited DESC LIMIT 1)"


def _unkeyed_candidates(
    pick: LimitedPick,
    engine: Engine,
    queue_limits: Sequence[tuple[str, int]] | None,
    limit: int,
    limits: Mapping[str, QueueLimits],
) -> None:
    """The CTE ``unkeyed``: the next due jobs without a key of each limited queue served."""
    jobs = live_jobs(engine)
    shares = dict(queue_limits) if queue_limits is not None else {}
    branches = []
    for queue in limited_queues(queue_limits, limits):
        branches.append(
            f"SELECT * FROM (SELECT {_CANDIDATE} FROM {jobs} WHERE status = 'ready' "
            f"AND concurrency_key IS NULL AND run_at <= {engine.now} AND queue = %s "
            f"AND {not_paused('%s')} ORDER BY {_ORDER} LIMIT {int(min(shares.get(queue, limit), limit))}) "
            "AS branch"
        )
        pick.params += [queue, queue]
    if not branches:
        # No limited queue: an empty set of the candidates' shape, reading no table.
        branches.append("SELECT * FROM keyed WHERE 1 = 0")
    pick.ctes.append("unkeyed AS (" + " UNION ALL ".join(branches) + ")")


def _share_room(queue_limits: Sequence[tuple[str, int]] | None, limit: int) -> str:
    """SQL of how many jobs of the candidate row's queue the round asked for (whole numbers only)."""
    if queue_limits is None:
        return str(limit)
    quoted = ((queue.replace("'", "''"), share) for queue, share in queue_limits)
    whens = " ".join(f"WHEN '{queue}' THEN {min(share, limit)}" for queue, share in quoted)
    return f"(CASE queue {whens} ELSE 0 END)"


def _limits_room(engine: Engine, limits: Mapping[str, QueueLimits]) -> tuple[str, list[Any]]:
    """SQL of how many jobs of the candidate row's queue its cap and rate let start now."""
    jobs = live_jobs(engine)
    whens: list[str] = []
    params: list[Any] = []
    for queue, queue_limit in limits.items():
        terms, term_params = [], []
        if queue_limit.concurrency is not None:
            terms.append(
                f"{queue_limit.concurrency} - (SELECT COUNT(*) FROM {jobs} WHERE status = 'running' "
                f"AND queue = %s AND locked_until > {engine.now})"
            )
            term_params.append(queue)
        if queue_limit.rate is not None:
            cutoff = engine.clock_minus(str(queue_limit.rate.window))
            terms.append(
                f"{queue_limit.rate.count} - (SELECT COUNT(*) FROM {STARTS} "
                f"WHERE queue = %s AND started_at > {cutoff})"
            )
            term_params.append(queue)
        room = terms[0] if len(terms) == 1 else f"{engine.least}({', '.join(terms)})"
        whens.append(f"WHEN %s THEN {room}")
        params += [queue, *term_params]
    if not whens:
        return str(MAX_ROOM), []
    return f"(CASE queue {' '.join(whens)} ELSE {MAX_ROOM} END)", params


# Room where no limit applies: more than any round claims.
MAX_ROOM = 1_000_000


def rated_queues(queues: Sequence[str], limits: Mapping[str, QueueLimits]) -> list[tuple[str, int]]:
    """``(queue, window seconds)`` of each of ``queues`` with a rate limit."""
    return [
        (queue, rate.window) for queue in queues if (rate := limits[queue].rate if queue in limits else None)
    ]


def ledger_statements(engine: Engine, rated: Sequence[tuple[str, int]]) -> tuple[str, str]:
    """The ledger's insert (from a ``claimed`` row set) and prune, for the rated queues."""
    marks = ", ".join(["%s"] * len(rated))
    insert = (
        f"INSERT INTO {STARTS} (queue, started_at) "
        f"SELECT queue, {engine.clock} FROM claimed WHERE queue IN ({marks})"
    )
    prune = " OR ".join(
        f"(queue = %s AND started_at <= {engine.clock_minus(str(window))})" for _q, window in rated
    )
    return insert, f"DELETE FROM {STARTS} WHERE {prune}"
