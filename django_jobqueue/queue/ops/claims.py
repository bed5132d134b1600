"""Claims: ready -> running, and a claim's end (done, retried, dead, handed back) or extension.

Every write after the claim is fenced (``tables.Fence``): it names the owner
and, where known, the claim token it expects, and changes nothing once the
claim is no longer current.
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
from .dead_letters import move_to_dead_letters
from .limited import (
    NOT_PAUSED_ROW,
    STARTS,
    FlowState,
    ledger_statements,
    limited_pick,
    limited_queues,
    not_paused,
    rated_queues,
    window_size,
)
from .tables import CLAIM_ORDER, HELD_BY, JOB, ROWS_PER_STATEMENT, Fence, batched, cursor_and_engine, marks


def claim(
    using: str,
    worker_id: str,
    queue_limits: Sequence[tuple[str, int]] | None,
    limit: int | None,
    visibility_timeout: float | None,
    flow: FlowState | None = None,
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
    return claim_round(using, worker_id, [], True, queue_limits, limit, visibility_timeout, flow)[1]


def claim_round(
    using: str,
    worker_id: str,
    completions: Sequence[tuple[int, int, str | None]],
    keep: bool,
    queue_limits: Sequence[tuple[str, int]] | None,
    limit: int | None,
    visibility_timeout: float | None,
    flow: FlowState | None = None,
) -> tuple[set[tuple[int, int]], list[Job]]:
    """``complete_many(completions)`` then ``claim(...)`` (skipped when ``limit`` is 0), atomically.

    A worker's round: its finished jobs and the claims of the slots they free
    in one commit. On PostgreSQL that is one statement, and so one round trip
    and no ``BEGIN`` / ``COMMIT`` of its own (a round that may claim limited
    jobs pipelines its lock, acks, claim and commit: one round trip too); on
    SQLite, one transaction. ``flow`` carries what the claimer learnt of
    limited jobs from one round to the next.
    """
    engine = engine_for(connections[using])
    flow = flow if flow is not None else FlowState()
    if limit is None:
        limit = sum(share for _queue, share in queue_limits or [])
    if limit == 0:
        return complete_many(using, worker_id, completions, keep), []
    limits = configured_limits()
    round_ = Round(worker_id, queue_limits, limit, visibility_timeout, limits, flow)
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


def _plain_round(
    using: str, engine: Engine, round_: Round, completions: Sequence[tuple[int, int, str | None]], keep: bool
) -> tuple[set[tuple[int, int]], list[Job]]:
    """A round that takes no limited job, and asks whether keyed jobs wait (then the next one may)."""
    picked, params = _plain_picked(engine, round_.queue_limits, round_.limit, round_.limits)
    update, update_params = _claim_update(engine, round_, f"SELECT id FROM ({picked}) AS plain")
    params = update_params + params
    probe, probe_params = _keyed_probe(engine, round_.queue_limits)
    # The one-statement round writes its acks as arrays (``_complete_arrays_statement``).
    if not (engine.supports_data_modifying_cte and engine.supports_array_params):
        with transaction.atomic(using=using) if completions else nullcontext():
            done = complete_many(using, round_.worker_id, completions, keep)
            cursor = connections[using].cursor()
            cursor.execute(update, params)
            claimed = jobs_from_rows(using, cursor.fetchall())
        cursor.execute(f"SELECT {probe}", probe_params)
        round_.flow.keyed_waiting = bool(cursor.fetchone()[0])
        return done, sorted(claimed, key=claim_order)
    sql = (
        f"WITH claimed AS ({update}) SELECT {JOB_COLUMNS_SQL} FROM claimed "
        f"UNION ALL SELECT {_flow_marker(keyed_seen='1')} WHERE {probe}"
    )
    params += probe_params
    if completions:
        # One statement for both, one result set: the claimed rows, then a row per ack marked by its status.
        ack_sql, ack_params = _complete_arrays_statement(round_.worker_id, completions, keep)
        sql = f"WITH acked AS ({ack_sql}), {sql[5:]} UNION ALL SELECT {_ACKED_COLUMNS_SQL} FROM acked"
        params = ack_params + params
    rows = run_bound(using, sql, params)
    acked = {(row[0], row[_TOKEN_INDEX]) for row in rows if row[_STATUS_INDEX] == "acked"}
    round_.flow.keyed_waiting = any(row[_STATUS_INDEX] == "flow" for row in rows)
    claimed = jobs_from_native_rows(using, [row for row in rows if row[_STATUS_INDEX] not in _MARKERS])
    return acked, sorted(claimed, key=claim_order)


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
    plain, plain_params = _plain_picked(engine, round_.queue_limits, round_.limit, round_.limits)
    ctes = [*pick.ctes, f"plain AS ({plain})"]
    params = [*pick.params, *plain_params]
    ctes.append(
        "picked AS MATERIALIZED (SELECT id FROM (SELECT id, priority, run_at FROM admitted UNION ALL "
        f"SELECT id, priority, run_at FROM plain) AS eligible ORDER BY {CLAIM_ORDER} LIMIT %s)"
    )
    params.append(round_.limit)
    with_ = "WITH RECURSIVE " if pick.recursive else "WITH "
    marker_sql = _flow_marker(keyed_seen=pick.keyed_seen, held=pick.held, walked=pick.walked)
    served = limited_queues(round_.queue_limits, round_.limits)
    rated = rated_queues(served, round_.limits)
    update, update_params = _claim_update(engine, round_, "SELECT id FROM picked")
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
        if completions:
            statements.append(_complete_arrays_statement(round_.worker_id, completions, keep))
        statements.append((sql, sql_params))
        results = run_in_transaction(using, statements)
        acked = {(row[0], row[1]) for row in results[1]} if completions else set()
        rows = results[-1]
        marker = next(row for row in rows if row[_STATUS_INDEX] == "flow")
        claimed = jobs_from_native_rows(using, [row for row in rows if row[_STATUS_INDEX] != "flow"])
    else:
        with transaction.atomic(using=using):
            cursor = connections[using].cursor()
            cursor.execute(engine.flow_lock)
            acked = complete_many(using, round_.worker_id, completions, keep)
            cursor.execute(
                with_ + ", ".join(ctes) + f" SELECT 'job', id, NULL, NULL FROM picked "
                f"UNION ALL SELECT 'flow', {pick.keyed_seen}, {pick.held}, {pick.walked}",
                params,
            )
            picks = cursor.fetchall()
            ids = [row[1] for row in picks if row[0] == "job"]
            flow_row = next(row for row in picks if row[0] == "flow")
            claimed = _claim_ids(using, engine, round_, ids)
            if rated and claimed:
                _write_ledger(cursor, engine, rated, claimed)
        marker = [None] * len(JOB_COLUMNS)
        marker[_ATTEMPTS_INDEX], marker[_MAX_ATTEMPTS_INDEX], marker[_KEY_INDEX] = flow_row[1:]
    _learn(flow, marker, round_.limit, len(claimed))
    return acked, sorted(claimed, key=claim_order)


def _learn(flow: FlowState, marker: Sequence[Any], limit: int, claimed: int) -> None:
    """Keep what a limited round's marker row says for the next round."""
    keyed_seen, held, walked = marker[_ATTEMPTS_INDEX], marker[_MAX_ATTEMPTS_INDEX], marker[_KEY_INDEX]
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
    """Claim the jobs ``ids`` that are still ready (SQLite's second step of a limited round)."""
    if not ids:
        return []
    update, params = _claim_update(engine, round_, ", ".join(["%s"] * len(ids)), subquery=False)
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
_MARKERS = frozenset({"acked", "flow"})


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


def _keyed_probe(engine: Engine, queue_limits: Sequence[tuple[str, int]] | None) -> tuple[str, list[Any]]:
    """SQL true while a due job with a key waits in the claimer's queues (one index probe)."""
    due = f"status = 'ready' AND concurrency_key IS NOT NULL AND run_at <= {engine.now}"
    if queue_limits is None:
        return f"EXISTS (SELECT 1 FROM {JOB} WHERE {due})", []
    queues = [queue for queue, _share in queue_limits]
    return f"EXISTS (SELECT 1 FROM {JOB} WHERE {due} AND queue IN ({marks(queues)}))", queues


def _plain_picked(
    engine: Engine,
    queue_limits: Sequence[tuple[str, int]] | None,
    limit: int,
    limits: Mapping[str, QueueLimits],
) -> tuple[str, list[Any]]:
    """A SELECT of ``id, priority, run_at`` of the jobs no limit applies to that a round may claim."""
    due = f"status = 'ready' AND concurrency_key IS NULL AND run_at <= {engine.now}"
    params: list[Any] = []
    if queue_limits is None:
        # Queues with limits are the limited claim's, and paused ones nobody's.
        others = f"AND queue NOT IN ({marks(list(limits))}) " if limits else ""
        params += list(limits)
        sql = (
            f"SELECT id, priority, run_at FROM {JOB} WHERE {due} {others}AND {NOT_PAUSED_ROW} "
            f"ORDER BY {CLAIM_ORDER} LIMIT %s {engine.skip_locked}"
        )
        return sql, [*params, limit]
    branches = []
    for queue, queue_limit in queue_limits:
        if queue in limits:
            continue
        branches.append(
            f"SELECT * FROM (SELECT id, priority, run_at FROM {JOB} WHERE {due} AND queue = %s "
            f"AND {not_paused('%s')} ORDER BY {CLAIM_ORDER} LIMIT %s {engine.skip_locked}) AS branch"
        )
        params += [queue, queue, queue_limit]
    if not branches:
        return f"SELECT id, priority, run_at FROM {JOB} WHERE 1 = 0", []
    sql = "SELECT * FROM (" + " UNION ALL ".join(branches) + f") AS picked ORDER BY {CLAIM_ORDER} LIMIT %s"
    return sql, [*params, limit]


def _claim_update(
    engine: Engine, round_: Round, ids_sql: str, *, subquery: bool = True
) -> tuple[str, list[Any]]:
    """The claim's ``UPDATE … RETURNING`` every column, of the ready jobs among ``ids_sql``.

    ``ids_sql`` is a subquery, or (``subquery=False``) a list of parameters.
    """
    # The SET clause's: owner, deadline, and the owner again for a Task job's worker_ids.
    params: list[Any] = [round_.worker_id, round_.visibility_timeout, round_.worker_id]
    deadline = engine.now_plus(f"COALESCE({engine.nullable_float}, visibility_timeout)")
    # A Task job keeps its worker per attempt (TaskResult.worker_ids); a @job job does not pay for it.
    worker_ids = (
        f"CASE WHEN task_backend = '' THEN worker_ids ELSE {engine.json_push('worker_ids', '%s')} END"
    )
    # On PostgreSQL the picked ids are read once, into an array: as ``id IN (subquery)``
    # the planner may run a LIMIT … SKIP LOCKED subquery again per row, and claim more.
    picked = (
        f"id = ANY(ARRAY({ids_sql}))" if subquery and engine.supports_array_params else f"id IN ({ids_sql})"
    )
    # status = 'ready' again: a job picked in the subquery and changed since (a
    # cancel) is re-checked here, on the row as it is now.
    sql = (
        f"UPDATE {JOB} SET status = 'running', attempts = attempts + 1, "
        f"claim_token = claim_token + 1, locked_by = %s, locked_until = {deadline}, "
        f"started_at = COALESCE(started_at, {engine.now}), last_attempted_at = {engine.now}, "
        f"worker_ids = {worker_ids} WHERE {picked} AND status = 'ready' RETURNING {JOB_COLUMNS_SQL}"
    )
    return sql, params


# -- completions ---------------------------------------------------------------


def complete(using: str, fence: Fence, result_json: str | None, keep: bool) -> bool:
    """running -> done (kept for pruning) or deleted; False if this claim is no longer current."""
    cursor, engine = cursor_and_engine(using)
    where, params = fence.where()
    if keep:
        cursor.execute(
            f"UPDATE {JOB} SET status = 'done', finished_at = {engine.now}, "
            f"locked_until = NULL, result = %s WHERE {where}",
            [result_json, *params],
        )
    else:
        cursor.execute(f"DELETE FROM {JOB} WHERE {where}", params)
    return cursor.rowcount == 1


def complete_many(
    using: str, worker_id: str, completions: Sequence[tuple[int, int, str | None]], keep: bool
) -> set[tuple[int, int]]:
    """running -> done (or deleted) for each ``(job_id, claim_token, result_json)`` of ``worker_id``,
    one statement per batch; return the ``(job_id, claim_token)`` of the claims completed.

    Each row is fenced as ``complete`` fences it, by its owner and its own claim
    token: a claim that expired and was re-claimed, or whose job was cancelled,
    is left alone and not returned.
    """
    if not completions:
        return set()
    if engine_for(connections[using]).supports_array_params:
        sql, params = _complete_arrays_statement(worker_id, completions, keep)
        return {(row[0], row[1]) for row in run_bound(using, sql, params)}
    cursor, engine = cursor_and_engine(using)
    done: set[tuple[int, int]] = set()
    for chunk in batched(completions, ROWS_PER_STATEMENT):
        pairs = ", ".join(["(%s, %s)"] * len(chunk))
        fence_params: list[Any] = [worker_id]
        fence_params += [value for job_id, token, _ in chunk for value in (job_id, token)]
        fence = f"{HELD_BY} AND (id, claim_token) IN (VALUES {pairs})"
        if keep:
            results = [completion for completion in chunk if completion[2] is not None]
            result_sql, result_params = "NULL", []
            if results:
                # By claim, not by id: a stale ack of the same job in this batch must not lend its result.
                whens = " ".join("WHEN id = %s AND claim_token = %s THEN %s" for _ in results)
                result_sql = f"CASE {whens} END"
                result_params = [value for completion in results for value in completion]
            cursor.execute(
                f"UPDATE {JOB} SET status = 'done', finished_at = {engine.now}, locked_until = NULL, "
                f"result = {result_sql} WHERE {fence} RETURNING id, claim_token",
                [*result_params, *fence_params],
            )
        else:
            cursor.execute(f"DELETE FROM {JOB} WHERE {fence} RETURNING id, claim_token", fence_params)
        done.update((row[0], row[1]) for row in cursor.fetchall())
    return done


def _complete_arrays_statement(
    worker_id: str, completions: Sequence[tuple[int, int, str | None]], keep: bool
) -> tuple[str, list[Any]]:
    """``complete_many``'s statement where the engine takes arrays: the batch as three, however long it is."""
    ids = [job_id for job_id, _token, _result in completions]
    tokens = [token for _job_id, token, _result in completions]
    # Unqualified: the acks' columns are id, claim_token and result alone.
    fence = HELD_BY
    if keep:
        # Joined on the claim, not the id: a stale ack of the same job must not lend its result.
        sql = (
            f"UPDATE {JOB} SET status = 'done', finished_at = now(), locked_until = NULL, "
            "result = acks.result FROM unnest(%s::bigint[], %s::bigint[], %s::jsonb[]) "
            f"AS acks(id, claim_token, result) WHERE {JOB}.id = acks.id "
            f"AND {JOB}.claim_token = acks.claim_token AND {fence} RETURNING {JOB}.id, {JOB}.claim_token"
        )
        return sql, [ids, tokens, [result for _job_id, _token, result in completions], worker_id]
    sql = (
        f"DELETE FROM {JOB} USING unnest(%s::bigint[], %s::bigint[]) AS acks(id, claim_token) "
        f"WHERE {JOB}.id = acks.id "
        f"AND {JOB}.claim_token = acks.claim_token AND {fence} RETURNING {JOB}.id, {JOB}.claim_token"
    )
    return sql, [ids, tokens, worker_id]


def retry_later(using: str, fence: Fence, delay: float, error: str, traceback: str) -> bool:
    """running -> ready after ``delay`` seconds; False if this claim is no longer current."""
    cursor, engine = cursor_and_engine(using)
    where, params = fence.where()
    cursor.execute(
        f"UPDATE {JOB} SET status = 'ready', run_at = {engine.now_plus('%s')}, "
        f"locked_by = NULL, locked_until = NULL, last_error = %s, last_traceback = %s "
        f"WHERE {where}",
        [delay, error, traceback, *params],
    )
    return cursor.rowcount == 1


def attempts_of(using: str, fence: Fence) -> tuple[int, int] | None:
    """Return ``(attempts, max_attempts)`` of the claimed job, or None if the claim is gone."""
    cursor, _ = cursor_and_engine(using)
    where, params = fence.where()
    cursor.execute(f"SELECT attempts, max_attempts FROM {JOB} WHERE {where}", params)
    row = cursor.fetchone()
    return (row[0], row[1]) if row else None


def bury(using: str, fence: Fence, error: str, traceback: str) -> bool:
    """running -> dead letter; False if this claim is no longer current."""
    where, params = fence.where()
    # FOR UPDATE waits for a concurrent completion of the same job, then
    # re-checks the fence, so a job is never both acked and dead-lettered.
    lock = engine_for(connections[using]).for_update
    return move_to_dead_letters(using, "%s", "%s", where, lock, [error, traceback, *params]) == 1


def extend(using: str, fence: Fence, seconds: float) -> bool:
    """Set a running job's deadline to now + ``seconds``; False if the claim is no longer current."""
    cursor, engine = cursor_and_engine(using)
    where, params = fence.where()
    cursor.execute(
        f"UPDATE {JOB} SET locked_until = {engine.now_plus('%s')} "
        f"WHERE {where} AND {_not_expired_if_keyed(engine)}",
        [seconds, *params],
    )
    return cursor.rowcount == 1


def release(using: str, fence: Fence) -> bool:
    """running -> ready now, the attempt not counted (a worker handing back work it never ran)."""
    cursor, engine = cursor_and_engine(using)
    where, params = fence.where()
    # The attempt handed back leaves a Task job's worker_ids too, which stay one per attempt.
    worker_ids = f"CASE WHEN task_backend = '' THEN worker_ids ELSE {engine.json_pop('worker_ids')} END"
    cursor.execute(
        f"UPDATE {JOB} SET status = 'ready', attempts = attempts - 1, locked_by = NULL, "
        f"locked_until = NULL, worker_ids = {worker_ids} WHERE {where}",
        params,
    )
    return cursor.rowcount == 1


# A keyed job's expired claim is not renewed: its slot counted as free once it
# expired and may have gone to another job of the key (queue/ops/limited.py).
def _not_expired_if_keyed(engine: Engine) -> str:
    return f"(concurrency_key IS NULL OR locked_until > {engine.now})"


def extend_claims(
    using: str, worker_id: str, claims: Sequence[tuple[int, int]], visibility_timeout: float | None
) -> list[int]:
    """Push the deadline of each claim ``(job_id, claim_token)`` of ``worker_id`` to at least
    now + ``visibility_timeout`` (or the job's own timeout), one statement per batch.

    A deadline already further away (``extend_visibility`` from the job itself)
    is kept. Return the ids of the claims still held; a claim that expired and
    was re-claimed, or whose job was cancelled, is not extended.
    """
    cursor, engine = cursor_and_engine(using)
    deadline = engine.now_plus("COALESCE(%s, visibility_timeout)")
    held: list[int] = []
    for chunk in batched(claims, ROWS_PER_STATEMENT):
        pairs = ", ".join(["(%s, %s)"] * len(chunk))
        cursor.execute(
            f"UPDATE {JOB} SET locked_until = CASE WHEN locked_until > {deadline} THEN locked_until "
            f"ELSE {deadline} END WHERE {HELD_BY} AND {_not_expired_if_keyed(engine)} "
            f"AND (id, claim_token) IN (VALUES {pairs}) RETURNING id",
            [visibility_timeout, visibility_timeout, worker_id, *(value for pair in chunk for value in pair)],
        )
        held.extend(row[0] for row in cursor.fetchall())
    return held


def ended_claims(using: str, claims: Sequence[tuple[int, int]]) -> dict[int, str]:
    """Which claims ``(job_id, claim_token)`` are no longer current, and why; reads only.

    Return each ended claim's job id mapped to ``"cancelled"`` if its job is
    cancelled, else ``"lost"``: the job is no longer running, runs under
    another claim (it expired and was claimed again), or is gone. A claim still
    current is left out. One ``SELECT`` by primary key per batch of claims,
    locking nothing: a worker's cancel watch asks it often, and a claim that
    ends just after the read is seen at the next ask.
    """
    if not claims:
        return {}
    cursor, _ = cursor_and_engine(using)
    rows: dict[int, tuple[str, int]] = {}
    for chunk in batched(list(dict.fromkeys(job_id for job_id, _token in claims)), ROWS_PER_STATEMENT):
        cursor.execute(f"SELECT id, status, claim_token FROM {JOB} WHERE id IN ({marks(chunk)})", chunk)
        rows.update((job_id, (status, token)) for job_id, status, token in cursor.fetchall())
    ended: dict[int, str] = {}
    for job_id, token in claims:
        status, current_token = rows.get(job_id, ("", None))
        if status == "cancelled":
            ended[job_id] = "cancelled"
        elif status != "running" or current_token != token:
            ended[job_id] = "lost"
    return ended
