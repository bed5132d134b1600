"""Claims: ready -> running, a worker's round at a time (its acks, then the jobs its free slots take).

A round takes jobs no limit applies to with one statement that locks nothing
but the rows it takes (``SKIP LOCKED``); one that may take limited jobs (a
concurrency key, a queue's cap or rate) goes through ``limited.py``'s pick
under the flow lock. Each claimed job gets a new claim token, which every
later write of the claim names (``claims.py``).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from contextlib import nullcontext
from dataclasses import dataclass, replace
from typing import Any

from django.db import connections, transaction

from ...models import Job
from ..engines import Engine, engine_for
from ..flow import QueueLimits, configured_limits
from ..native import run_bound, run_in_transaction
from ..rows import JOB_COLUMNS, JOB_COLUMNS_SQL, claim_order, jobs_from_native_rows, jobs_from_rows
from . import picks
from .acks import (
    IN_TRANSACTION,
    PASS_OVER,
    WAIT_BRIEFLY,
    AckWait,
    acked_statement,
    complete_arrays_cte,
    complete_held_back,
    complete_many,
)
from .limited import (
    KEYED_SEEN,
    STARTS,
    FlowState,
    ledger_statements,
    limited_pick,
    limited_queues,
    rated_queues,
    window_size,
)
from .returning import locked_ids
from .tables import BRIEF_LOCK_WAIT, CLAIM_ORDER, JOB, ROWS_PER_STATEMENT, batched, live_jobs, marks


def claim(
    using: str,
    worker_id: str,
    queue_limits: Sequence[tuple[str, int]] | None,
    limit: int | None,
    visibility_timeout: float | None,
    flow: FlowState | None = None,
    synchronous_commit: str | None = None,
) -> list[Job]:
    """ready -> running for up to ``limit`` due jobs; return them in claim order.

    ``queue_limits`` takes at most that many jobs from each named queue (one
    index scan each); ``None`` takes from every queue. ``limit`` caps the total.
    Each claimed job gets a new claim token, one more attempt, this owner and a
    deadline of now + ``visibility_timeout`` (or the job's own timeout); its
    ``started_at`` (first claim only) and ``last_attempted_at`` become now.
    Paused queues are passed over, and a limited job is taken only while its
    key, its queue's cap and its queue's rate have room (``limited.py``).
    """
    return claim_round(
        using, worker_id, [], True, queue_limits, limit, visibility_timeout, flow, synchronous_commit
    )[1]


def claim_round(
    using: str,
    worker_id: str,
    completions: Sequence[tuple[int, int, str | None]],
    keep: bool,
    queue_limits: Sequence[tuple[str, int]] | None,
    limit: int | None,
    visibility_timeout: float | None,
    flow: FlowState | None = None,
    synchronous_commit: str | None = None,
    ack_wait: AckWait = PASS_OVER,
) -> tuple[set[tuple[int, int]], list[Job]]:
    """``complete_many(completions)`` then ``claim(...)`` (skipped when ``limit`` is 0), atomically.

    A worker's round: its finished jobs and the claims of the slots they free
    in one commit. On PostgreSQL that is one statement, and so one round trip
    and no ``BEGIN`` / ``COMMIT`` of its own (a round that may claim limited
    jobs pipelines its lock, acks, claim and commit: one round trip too); on
    SQLite, one transaction. ``flow`` carries what the claimer learnt of
    limited jobs from one round to the next. ``synchronous_commit`` is the
    round's commit on PostgreSQL (``JOBQUEUE["WORKER_SYNCHRONOUS_COMMIT"]``,
    docs/guarantees.md); None leaves the database's own. ``ack_wait``: how
    the acks meet a row another transaction holds (``acks.AckWait``).
    """
    engine = engine_for(connections[using])
    flow = flow if flow is not None else FlowState()
    if limit is None:
        limit = sum(share for _queue, share in queue_limits or [])
    if limit == 0:
        return complete_many(using, worker_id, completions, keep, ack_wait), []
    limits = configured_limits()
    commit = synchronous_commit if engine.commit_mode_sql is not None else None
    round_ = Round(worker_id, queue_limits, limit, visibility_timeout, limits, flow, commit, ack_wait)
    if limited_queues(queue_limits, limits) or flow.keyed_waiting:
        return _limited_round(using, engine, round_, completions, keep)
    acked, claimed = _plain_round(using, engine, round_, completions, keep)
    if flow.keyed_waiting and len(claimed) < limit:
        # Keyed jobs were found waiting: the slots left go to them now, not a round later.
        rest = replace(round_, limit=limit - len(claimed), queue_limits=_less(queue_limits, claimed))
        claimed = sorted([*claimed, *_limited_round(using, engine, rest, [], keep)[1]], key=claim_order)
    return acked, claimed


def _less(
    queue_limits: Sequence[tuple[str, int]] | None, claimed: Sequence[Job]
) -> list[tuple[str, int]] | None:
    """``queue_limits`` less what ``claimed`` took of each queue (queues left with nothing kept at 1)."""
    if queue_limits is None:
        return None
    taken = Counter(job.queue for job in claimed)
    return [(queue, max(share - taken[queue], 1)) for queue, share in queue_limits]


@dataclass(frozen=True)
class Round:
    """What one claiming round asks for."""

    worker_id: str
    queue_limits: Sequence[tuple[str, int]] | None
    limit: int
    visibility_timeout: float | None
    limits: Mapping[str, QueueLimits]
    flow: FlowState
    synchronous_commit: str | None = None  # the round's commit (PostgreSQL); None: the database's
    ack_wait: AckWait = PASS_OVER  # how its acks meet a row another transaction holds


def _plain_round(
    using: str, engine: Engine, round_: Round, completions: Sequence[tuple[int, int, str | None]], keep: bool
) -> tuple[set[tuple[int, int]], list[Job]]:
    """A round that takes no limited job; now and then it also asks whether keyed jobs wait.

    Its claim is the statement of a queue without flow control, less paused
    queues: the same plan, on the same index.
    """
    flow = round_.flow
    if not engine.supports_update_returning:
        return _plain_round_by_id(using, engine, round_, completions, keep)
    picked, params = picks.plain_picked(engine, round_.queue_limits, round_.limit, round_.limits, "id")
    update, update_params = _claim_update(engine, round_, picked)
    params = update_params + params
    probe, probe_params = picks.keyed_probe(engine, round_.queue_limits) if flow.probe_due() else ("", [])
    # The one-statement round writes its acks as arrays (``complete_arrays_cte``).
    if not (engine.supports_data_modifying_cte and engine.supports_array_params):
        with transaction.atomic(using=using) if completions else nullcontext():
            done = complete_many(using, round_.worker_id, completions, keep)
            cursor = connections[using].cursor()
            cursor.execute(update, params)
            claimed = jobs_from_rows(using, cursor.fetchall())
        if probe:
            cursor.execute(f"SELECT {probe}", probe_params)
            flow.probed(bool(cursor.fetchone()[0]))
        flow.short = len(claimed) < round_.limit
        return done, sorted(claimed, key=claim_order)
    sql = update
    if probe or completions or round_.synchronous_commit is not None:
        sql = f"WITH claimed AS ({update}) SELECT {JOB_COLUMNS_SQL} FROM claimed"
    if probe:
        sql += f" UNION ALL SELECT {_flow_marker(keyed_seen='1')} WHERE {probe}"
        params += probe_params
    if completions:
        # One statement for both, one result set: the claimed rows, then a row per ack marked by its status.
        ack_sql, ack_params = complete_arrays_cte(
            engine, round_.worker_id, completions, keep, wait=round_.ack_wait
        )
        sql = f"WITH {ack_sql}, {sql[5:]} UNION ALL SELECT {_ACKED_COLUMNS_SQL} FROM acked"
        params = ack_params + params
    if round_.synchronous_commit is not None:
        # A branch of the same statement, so that the round stays one round trip:
        # the setting holds for the statement's own transaction, and so its commit.
        sql += f" UNION ALL SELECT {_COMMIT_MARKER_SQL} FROM ({engine.commit_mode_sql}) AS commit_mode"
        params = [*params, round_.synchronous_commit]
    rows = run_bound(using, sql, params)
    acked = {(row[0], row[_TOKEN_INDEX]) for row in rows if row[_STATUS_INDEX] == "acked"}
    if completions:
        acked |= complete_held_back(using, round_.worker_id, completions, acked, keep)
    if probe:
        flow.probed(any(row[_STATUS_INDEX] == "flow" for row in rows))
    claimed = jobs_from_native_rows(using, [row for row in rows if row[_STATUS_INDEX] not in _MARKERS])
    flow.short = len(claimed) < round_.limit
    return acked, sorted(claimed, key=claim_order)


def _plain_round_by_id(
    using: str, engine: Engine, round_: Round, completions: Sequence[tuple[int, int, str | None]], keep: bool
) -> tuple[set[tuple[int, int]], list[Job]]:
    """``_plain_round`` where the claim cannot return its rows: acks, locking read, claim by id."""
    flow = round_.flow
    with transaction.atomic(using=using):
        done = complete_many(using, round_.worker_id, completions, keep)
        picked = picks.picked_rows(
            using, round_.queue_limits, round_.limit, round_.limits, round_.visibility_timeout
        )
        sets, params = _claim_sets(engine, round_, picks.moment_of(picked))
        claimed = picks.claim_picked(using, sets, params, picked, round_.worker_id)
    if flow.probe_due():
        probe, probe_params = picks.keyed_probe(engine, round_.queue_limits)
        cursor = connections[using].cursor()
        cursor.execute(f"SELECT {probe}", probe_params)
        flow.probed(bool(cursor.fetchone()[0]))
    flow.short = len(claimed) < round_.limit
    return done, sorted(claimed, key=claim_order)


def _limited_round(
    using: str, engine: Engine, round_: Round, completions: Sequence[tuple[int, int, str | None]], keep: bool
) -> tuple[set[tuple[int, int]], list[Job]]:
    """A round that may claim limited jobs: under the flow lock, the acks written first.

    The acks go first, in the same transaction, so that the slots they free
    count as free; the claim comes after the lock, so that it sees every
    limited claim committed before.
    """
    flow = round_.flow
    pick = limited_pick(engine, round_.queue_limits, round_.limit, round_.limits, flow)
    plain, plain_params = picks.plain_picked(
        engine, round_.queue_limits, round_.limit, round_.limits, lock=engine.supports_update_returning
    )
    ctes = [*pick.ctes, f"plain AS ({plain})"]
    params = [*pick.params, *plain_params]
    ctes.append(
        f"picked AS {engine.materialized}(SELECT id FROM (SELECT id, priority, run_at FROM admitted "
        f"UNION ALL SELECT id, priority, run_at FROM plain) AS eligible ORDER BY {CLAIM_ORDER} "
        f"LIMIT {int(round_.limit)})"
    )
    with_ = "WITH RECURSIVE " if pick.recursive else "WITH "
    marker_sql = _flow_marker(keyed_seen=KEYED_SEEN, held=pick.held, walked=pick.walked)
    served = limited_queues(round_.queue_limits, round_.limits)
    rated = rated_queues(served, round_.limits)
    # The picks locked as the plain claim locks its own: a job another transaction holds
    # (an operator's cancel of it, still open) is passed over, not waited on under the flow lock.
    locked = (
        f"SELECT id FROM {live_jobs(engine)} WHERE id IN (SELECT id FROM picked) AND status = 'ready' "
        f"{engine.skip_locked_in_place}"
    )
    update, update_params = _claim_update(engine, round_, locked)
    if engine.supports_pipeline:
        sql = with_ + ", ".join(ctes) + f", claimed AS ({update})"
        sql_params = [*params, *update_params]
        if rated:
            insert, prune = ledger_statements(engine, rated)
            sql += f", started AS ({insert}), pruned AS ({prune})"
            sql_params += [queue for queue, _window in rated]
            sql_params += [queue for queue, _window in rated]
        sql += f" SELECT {JOB_COLUMNS_SQL} FROM claimed UNION ALL SELECT {marker_sql}"
        statements: list[tuple[str, Sequence[Any]]] = [(engine.flow_lock, [])]
        if round_.synchronous_commit is not None and engine.commit_mode_sql is not None:
            statements.append((engine.commit_mode_sql, [round_.synchronous_commit]))
        wait = round_.ack_wait
        if completions and wait is WAIT_BRIEFLY and engine.lock_timeout_sql is not None:
            # After the flow lock, which is waited for as long as it takes: the acks wait briefly.
            statements.append((engine.lock_timeout_sql, [BRIEF_LOCK_WAIT]))
            wait = IN_TRANSACTION
        acks_at = len(statements)
        if completions:
            statements.append(
                acked_statement(complete_arrays_cte(engine, round_.worker_id, completions, keep, wait=wait))
            )
        statements.append((sql, sql_params))
        results = run_in_transaction(using, statements)
        acked = {(row[0], row[1]) for row in results[acks_at]} if completions else set()
        if completions:
            acked |= complete_held_back(using, round_.worker_id, completions, acked, keep)
        rows = results[-1]
        marker = next(row for row in rows if row[_STATUS_INDEX] == "flow")
        learnt = (marker[_ATTEMPTS_INDEX], marker[_MAX_ATTEMPTS_INDEX], marker[_KEY_INDEX])
        claimed = jobs_from_native_rows(using, [row for row in rows if row[_STATUS_INDEX] != "flow"])
    else:
        with transaction.atomic(using=using):
            cursor = connections[using].cursor()
            cursor.execute(engine.flow_lock)
            acked = complete_many(using, round_.worker_id, completions, keep)
            cursor.execute(
                with_ + ", ".join(ctes) + f" SELECT 'job', id, NULL, NULL FROM picked "
                f"UNION ALL SELECT 'flow', {KEYED_SEEN}, {pick.held}, {pick.walked}",
                params,
            )
            chosen = cursor.fetchall()
            ids = [row[1] for row in chosen if row[0] == "job"]
            flow_row = next(row for row in chosen if row[0] == "flow")
            claimed = _claim_ids(using, engine, round_, ids)
            if rated and claimed:
                _write_ledger(cursor, engine, rated, claimed)
        learnt = tuple(flow_row[1:])
    _learn(flow, *learnt, limit=round_.limit, claimed=len(claimed))
    return acked, sorted(claimed, key=claim_order)


def _learn(
    flow: FlowState, keyed_seen: int, held: int | None, walked: str | None, *, limit: int, claimed: int
) -> None:
    """Keep what a limited round's flow row says (keyed candidates seen, held, last key walked)."""
    flow.held = int(held or 0)
    if flow.walk_next:
        flow.walk_next = False
        flow.walk_after = walked or ""
    elif int(keyed_seen) >= window_size(limit) and claimed < limit and flow.held:
        # The window was full, the round could not fill its slots from it, and
        # limits held part of it: the jobs behind may be other keys' with room.
        flow.walk_next = True
    flow.keyed_waiting = bool(keyed_seen) or flow.walk_next


def _claim_ids(using: str, engine: Engine, round_: Round, ids: Sequence[int]) -> list[Job]:
    """Claim the jobs ``ids`` that are still ready (the second step of a limited round but PostgreSQL's).

    Where the claim cannot return its rows, those still ready are locked first,
    passing over any another transaction holds (an operator's cancel, still open).
    """
    if not ids:
        return []
    if not engine.supports_update_returning:
        still_ready = f"id IN ({marks(ids)}) AND status = 'ready'"
        locked = locked_ids(using, JOB, still_ready, ids, engine.skip_locked_in_place)
        sets, set_params = _claim_sets(engine, round_)
        return picks.claim_ids(using, sets, set_params, locked)
    update, params = _claim_update(engine, round_, ", ".join(["%s"] * len(ids)))
    cursor = connections[using].cursor()
    cursor.execute(update, [*params, *ids])
    return jobs_from_rows(using, cursor.fetchall())


def _write_ledger(
    cursor: Any, engine: Engine, rated: Sequence[tuple[str, int]], claimed: Sequence[Job]
) -> None:
    """One ledger row per claimed job of a rated queue, and the rows out of every window deleted."""
    windows = dict(rated)
    starts = [job.queue for job in claimed if job.queue in windows]
    for chunk in batched(starts, ROWS_PER_STATEMENT):
        values = ", ".join([f"(%s, {engine.clock})"] * len(chunk))
        cursor.execute(f"INSERT INTO {STARTS} (queue, started_at) VALUES {values}", list(chunk))
    _insert, prune = ledger_statements(engine, rated)
    cursor.execute(prune, [queue for queue, _window in rated])


# An ack's row in the claim round's result: its id and claim token, 'acked' as its status.
_STATUS_INDEX, _TOKEN_INDEX = JOB_COLUMNS.index("status"), JOB_COLUMNS.index("claim_token")
_ATTEMPTS_INDEX, _MAX_ATTEMPTS_INDEX = JOB_COLUMNS.index("attempts"), JOB_COLUMNS.index("max_attempts")
_KEY_INDEX = JOB_COLUMNS.index("concurrency_key")
_ACKED_COLUMNS_SQL = ", ".join(
    {"id": "id", "claim_token": "claim_token", "status": "'acked'"}.get(column, "NULL")
    for column in JOB_COLUMNS
)
# Rows of a round's result that are not claimed jobs.
_MARKERS = frozenset({"acked", "flow", "commit"})
# The row of the branch that sets the round's synchronous_commit.
_COMMIT_MARKER_SQL = ", ".join("'commit'" if column == "status" else "NULL" for column in JOB_COLUMNS)


def _flow_marker(keyed_seen: str, held: str = "0", walked: str = "NULL") -> str:
    """The columns of a round's flow row: keyed candidates seen, limited jobs held, the last key walked."""
    values = {
        "id": "0",
        "status": "'flow'",
        "attempts": f"CAST({keyed_seen} AS integer)",
        "max_attempts": f"CAST({held} AS integer)",
        "concurrency_key": walked,
    }
    return ", ".join(values.get(column, "NULL") for column in JOB_COLUMNS)


def _claim_sets(engine: Engine, round_: Round, moment: Any = None) -> tuple[str, list[Any]]:
    """The claim's SET clause, and its parameters: owner, deadline, a Task job's worker.

    ``moment``: the claim's now as its pick read it (``picks.picked_rows``),
    for the claim to write what the pick computed; None: the database's now.
    """
    seconds = picks.claim_seconds(engine)
    now, deadline, at = engine.now, engine.now_plus(seconds), []
    if moment is not None:
        now, at = engine.moment_param, [moment]
        deadline = engine.moment_plus(now, seconds)
    # The SET clause's: owner, deadline, and the owner again for a Task job's worker_ids.
    params: list[Any] = [round_.worker_id, *at, round_.visibility_timeout, *at, *at, round_.worker_id]
    # A Task job keeps its worker per attempt (TaskResult.worker_ids); a @job job does not pay for it.
    worker_ids = (
        f"CASE WHEN task_backend = '' THEN worker_ids ELSE {engine.json_push('worker_ids', '%s')} END"
    )
    sets = (
        "status = 'running', attempts = attempts + 1, "
        f"claim_token = claim_token + 1, locked_by = %s, locked_until = {deadline}, "
        f"started_at = COALESCE(started_at, {now}), last_attempted_at = {now}, "
        f"worker_ids = {worker_ids}"
    )
    return sets, params


def _claim_update(engine: Engine, round_: Round, ids_sql: str) -> tuple[str, list[Any]]:
    """The claim's ``UPDATE … RETURNING`` every column, of the ready jobs among ``ids_sql``.

    ``ids_sql`` is a subquery, or a list of parameters.
    """
    jobs = live_jobs(engine)
    sets, params = _claim_sets(engine, round_)
    # A subquery's ids are read once where the engine can (``Engine.in_rows``): run again per
    # row, the LIMIT … SKIP LOCKED subquery would claim more than asked.
    picked = engine.in_rows("id", f"({ids_sql})") if ids_sql.startswith("SELECT") else f"id IN ({ids_sql})"
    # status = 'ready' again: a job picked in the subquery and changed since (a
    # cancel) is re-checked here, on the row as it is now.
    sql = f"UPDATE {jobs} SET {sets} WHERE {picked} AND status = 'ready' RETURNING {JOB_COLUMNS_SQL}"
    return sql, params
