"""Claims: ready -> running, and a claim's end (done, retried, dead, handed back) or extension.

Every write after the claim is fenced (``tables.Fence``): it names the owner
and, where known, the claim token it expects, and changes nothing once the
claim is no longer current.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from django.db import connections, transaction

from ...models import Job
from ..engines import Engine, engine_for
from ..native import run_bound
from ..rows import JOB_COLUMNS, JOB_COLUMNS_SQL, claim_order, jobs_from_native_rows, jobs_from_rows
from .dead_letters import move_to_dead_letters
from .tables import CLAIM_ORDER, HELD_BY, JOB, ROWS_PER_STATEMENT, Fence, batched, cursor_and_engine, marks


def claim(
    using: str,
    worker_id: str,
    queue_limits: Sequence[tuple[str, int]] | None,
    limit: int | None,
    visibility_timeout: float | None,
) -> list[Job]:
    """ready -> running for up to ``limit`` due jobs; return them in claim order.

    ``queue_limits`` takes at most that many jobs from each named queue (one
    index scan each); ``None`` takes from every queue. ``limit`` caps the total.
    Each claimed job gets a new claim token, one more attempt, this owner and a
    deadline of now + ``visibility_timeout`` (or the job's own timeout); its
    ``started_at`` (first claim only) and ``last_attempted_at`` become now.
    """
    return claim_round(using, worker_id, [], True, queue_limits, limit, visibility_timeout)[1]


def claim_round(
    using: str,
    worker_id: str,
    completions: Sequence[tuple[int, int, str | None]],
    keep: bool,
    queue_limits: Sequence[tuple[str, int]] | None,
    limit: int | None,
    visibility_timeout: float | None,
) -> tuple[set[tuple[int, int]], list[Job]]:
    """``complete_many(completions)`` then ``claim(...)`` (skipped when ``limit`` is 0), atomically.

    A worker's round: its finished jobs and the claims of the slots they free
    in one commit. On PostgreSQL that is one statement, and so one round trip
    and no ``BEGIN`` / ``COMMIT`` of its own; on SQLite, one transaction.
    """
    engine = engine_for(connections[using])
    claim_args = (worker_id, queue_limits, limit, visibility_timeout)
    # The one-statement round writes its acks as arrays (``_complete_arrays_statement``).
    if not (engine.supports_data_modifying_cte and engine.supports_array_params):
        if not completions:
            return set(), _claim_by_itself(using, *claim_args) if limit != 0 else []
        with transaction.atomic(using=using):
            done = complete_many(using, worker_id, completions, keep)
            claimed = _claim_by_itself(using, *claim_args) if limit != 0 else []
        return done, claimed
    if limit == 0:
        return complete_many(using, worker_id, completions, keep), []
    sql, params = _claim_statement(engine, *claim_args)
    if completions:
        # One statement for both, one result set: the claimed rows, then a row per ack marked by its status.
        ack_sql, ack_params = _complete_arrays_statement(worker_id, completions, keep)
        sql = (
            f"WITH acked AS ({ack_sql}), claimed AS ({sql}) "
            f"SELECT {JOB_COLUMNS_SQL} FROM claimed UNION ALL SELECT {_ACKED_COLUMNS_SQL} FROM acked"
        )
        params = ack_params + params
    rows = run_bound(using, sql, params)
    acked = {(row[0], row[_TOKEN_INDEX]) for row in rows if row[_STATUS_INDEX] == "acked"}
    claimed = jobs_from_native_rows(using, [row for row in rows if row[_STATUS_INDEX] != "acked"])
    return acked, sorted(claimed, key=claim_order)


# An ack's row in the claim round's result: its id and claim token, 'acked' as its status.
_STATUS_INDEX, _TOKEN_INDEX = JOB_COLUMNS.index("status"), JOB_COLUMNS.index("claim_token")
_ACKED_COLUMNS_SQL = ", ".join(
    {"id": "id", "claim_token": "claim_token", "status": "'acked'"}.get(column, "NULL")
    for column in JOB_COLUMNS
)


def _claim_by_itself(
    using: str,
    worker_id: str,
    queue_limits: Sequence[tuple[str, int]] | None,
    limit: int | None,
    visibility_timeout: float | None,
) -> list[Job]:
    """``claim`` on Django's cursor: the statement alone, its own transaction unless in the caller's."""
    cursor, engine = cursor_and_engine(using)
    sql, params = _claim_statement(engine, worker_id, queue_limits, limit, visibility_timeout)
    cursor.execute(sql, params)
    return sorted(jobs_from_rows(using, cursor.fetchall()), key=claim_order)


def _claim_statement(
    engine: Engine,
    worker_id: str,
    queue_limits: Sequence[tuple[str, int]] | None,
    limit: int | None,
    visibility_timeout: float | None,
) -> tuple[str, list[Any]]:
    """The claim's ``UPDATE … RETURNING`` every column (see ``claim``)."""
    # The SET clause's: owner, deadline, and the owner again for a Task job's worker_ids.
    params: list[Any] = [worker_id, visibility_timeout, worker_id]
    due = f"status = 'ready' AND concurrency_key IS NULL AND run_at <= {engine.now}"
    if queue_limits is None:
        picked = f"SELECT id FROM {JOB} WHERE {due} ORDER BY {CLAIM_ORDER} LIMIT %s {engine.skip_locked}"
        params.append(limit)
    else:
        branches = []
        for queue, queue_limit in queue_limits:
            branches.append(
                f"SELECT * FROM (SELECT id, priority, run_at FROM {JOB} WHERE {due} AND queue = %s "
                f"ORDER BY {CLAIM_ORDER} LIMIT %s {engine.skip_locked}) AS branch"
            )
            params += [queue, queue_limit]
        picked = "SELECT id FROM (" + " UNION ALL ".join(branches) + ") AS picked"
        if limit is not None:
            picked += f" ORDER BY {CLAIM_ORDER} LIMIT %s"
            params.append(limit)
    deadline = engine.now_plus(f"COALESCE({engine.nullable_float}, visibility_timeout)")
    # A Task job keeps its worker per attempt (TaskResult.worker_ids); a @job job does not pay for it.
    worker_ids = (
        f"CASE WHEN task_backend = '' THEN worker_ids ELSE {engine.json_push('worker_ids', '%s')} END"
    )
    sql = (
        f"UPDATE {JOB} SET status = 'running', attempts = attempts + 1, "
        f"claim_token = claim_token + 1, locked_by = %s, locked_until = {deadline}, "
        f"started_at = COALESCE(started_at, {engine.now}), last_attempted_at = {engine.now}, "
        f"worker_ids = {worker_ids} WHERE id IN ({picked}) RETURNING {JOB_COLUMNS_SQL}"
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
        f"UPDATE {JOB} SET locked_until = {engine.now_plus('%s')} WHERE {where}",
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
            f"ELSE {deadline} END WHERE {HELD_BY} "
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
