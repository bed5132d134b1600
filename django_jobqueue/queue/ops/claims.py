"""A claim's other ends (retried, dead, handed back), its renewals, and its progress.

Every write after the claim is fenced (``tables.Fence``): it names the owner
and, where known, the claim token it expects, and changes nothing once the
claim is no longer current. Claims are ``rounds.py``'s, acks ``acks.py``'s.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from django.db import connections, transaction

from ..engines import Engine, engine_for
from ..native import run_bound
from . import history
from .dead_letters import move_to_dead_letters
from .returning import locked_ids, update_ids, update_returning
from .tables import (
    HELD_BY,
    JOB,
    ROWS_PER_STATEMENT,
    Fence,
    RowsLocked,
    batched,
    cursor_and_engine,
    live_jobs,
    marks,
)


def retry_later(
    using: str, fence: Fence, delay: float, error: str, traceback: str, outcome: str = history.RETRY
) -> bool:
    """running -> ready after ``delay`` seconds, the attempt's ``outcome`` added to the job's history;
    False, changing nothing, if this claim is no longer current."""
    cursor, engine = cursor_and_engine(using)
    where, params = fence.where()
    # The history first: MySQL assigns left to right, and the entry reads the owner.
    cursor.execute(
        f"UPDATE {JOB} SET attempt_history = {history.pushed_entry(engine, outcome, '%s')}, "
        f"status = 'ready', run_at = {engine.now_plus('%s')}, "
        f"locked_by = NULL, locked_until = NULL, last_error = %s, last_traceback = %s WHERE {where}",
        [error, delay, error, traceback, *params],
    )
    return cursor.rowcount == 1


def attempts_of(using: str, fence: Fence) -> tuple[int, int] | None:
    """Return ``(attempts, max_attempts)`` of the claimed job, or None if the claim is gone."""
    cursor, _ = cursor_and_engine(using)
    where, params = fence.where()
    cursor.execute(f"SELECT attempts, max_attempts FROM {JOB} WHERE {where}", params)
    row = cursor.fetchone()
    return (row[0], row[1]) if row else None


def bury(using: str, fence: Fence, error: str, traceback: str, outcome: str = history.DEAD) -> bool:
    """running -> dead letter, the attempt's ``outcome`` added to the history it takes along;
    False, changing nothing, if this claim is no longer current."""
    where, params = fence.where()
    # FOR UPDATE waits for a concurrent completion of the same job, then
    # re-checks the fence, so a job is never both acked and dead-lettered.
    engine = engine_for(connections[using])
    entry = history.pushed_entry(engine, outcome, "%s")
    moved = move_to_dead_letters(
        using, "%s", "%s", entry, where, engine.for_update, [error, traceback, error, *params]
    )
    return moved == 1


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
) -> tuple[list[int], list[int]]:
    """Push the deadline of each claim ``(job_id, claim_token)`` of ``worker_id`` to at least
    now + ``visibility_timeout`` (or the job's own timeout), one statement per batch.

    A deadline already further away (``extend_visibility`` from the job itself)
    is kept. Return ``(renewed, held_up)``: the ids of the claims extended, and
    of those still this worker's whose rows another transaction holds (an
    operator's cancel, still open), passed over rather than waited on. A claim
    that expired and was re-claimed, or whose job was cancelled, is in neither.
    """
    cursor, engine = cursor_and_engine(using)
    deadline = engine.now_plus("COALESCE(%s, visibility_timeout)")
    renew = f"locked_until = CASE WHEN locked_until > {deadline} THEN locked_until ELSE {deadline} END"
    renewed: list[int] = []
    held_up: list[int] = []
    for chunk in batched(claims, ROWS_PER_STATEMENT):
        if engine.skip_locked_in_place and engine.supports_array_params:
            rows = run_bound(using, *_renew_passing_over(engine, renew, worker_id, chunk, visibility_timeout))
            renewed += [job_id for job_id, was_renewed in rows if was_renewed]
            held_up += [job_id for job_id, was_renewed in rows if not was_renewed]
            continue
        if not engine.supports_update_returning:
            chunk_renewed, chunk_held_up = _renew_by_id(
                using, engine, renew, worker_id, chunk, visibility_timeout
            )
            renewed += chunk_renewed
            held_up += chunk_held_up
            continue
        pairs = ", ".join(["(%s, %s)"] * len(chunk))
        cursor.execute(
            f"UPDATE {JOB} SET {renew} WHERE {HELD_BY} AND {_not_expired_if_keyed(engine)} "
            f"AND (id, claim_token) IN (VALUES {pairs}) RETURNING id",
            [visibility_timeout, visibility_timeout, worker_id, *(value for pair in chunk for value in pair)],
        )
        renewed.extend(row[0] for row in cursor.fetchall())
    return renewed, held_up


def _renew_passing_over(
    engine: Engine,
    renew: str,
    worker_id: str,
    chunk: Sequence[tuple[int, int]],
    visibility_timeout: float | None,
) -> tuple[str, list[Any]]:
    """``extend_claims``' statement where rows are locked one by one: each row ``(id, renewed)``.

    The claims still this worker's (``mine``, read as they were committed) are
    locked, passing over those that another transaction holds, and those
    locked are renewed. A claim of ``mine`` that could not be locked comes back
    with ``renewed`` false: held up, not lost. Waiting on it would hold up the
    renewal of every other claim for as long as that transaction stays open.
    """
    jobs = live_jobs(engine)
    ids = [job_id for job_id, _token in chunk]
    tokens = [token for _job_id, token in chunk]
    sql = (
        "WITH claims AS (SELECT * FROM unnest(%s::bigint[], %s::bigint[]) AS claims(id, claim_token)), "
        f"mine AS MATERIALIZED (SELECT {JOB}.id FROM {jobs} JOIN claims ON {JOB}.id = claims.id "
        f"AND {JOB}.claim_token = claims.claim_token WHERE {HELD_BY}), "
        f"locked AS MATERIALIZED (SELECT id FROM {jobs} WHERE id IN (SELECT id FROM mine) AND {HELD_BY} "
        f"ORDER BY id {engine.skip_locked_in_place}), "
        f"renewed AS (UPDATE {jobs} SET {renew} WHERE id IN (SELECT id FROM locked) AND {HELD_BY} "
        f"AND (id, claim_token) IN (SELECT id, claim_token FROM claims) AND {_not_expired_if_keyed(engine)} "
        "RETURNING id) SELECT id, TRUE FROM renewed "
        "UNION ALL SELECT id, FALSE FROM mine WHERE id NOT IN (SELECT id FROM locked)"
    )
    return sql, [ids, tokens, worker_id, worker_id, visibility_timeout, visibility_timeout, worker_id]


def _renew_by_id(
    using: str,
    engine: Engine,
    renew: str,
    worker_id: str,
    chunk: Sequence[tuple[int, int]],
    visibility_timeout: float | None,
) -> tuple[list[int], list[int]]:
    """``_renew_passing_over`` where the renewal cannot return its rows (MySQL): the claims still
    this worker's read, those not held by another transaction locked, and those renewed by id."""
    cursor, _ = cursor_and_engine(using)
    mine_where = f"{HELD_BY} AND (id, claim_token) IN {engine.pairs(len(chunk))}"
    mine_params: list[Any] = [worker_id, *(value for pair in chunk for value in pair)]
    with transaction.atomic(using=using):
        cursor.execute(f"SELECT id FROM {JOB} WHERE {mine_where}", mine_params)
        mine = {row[0] for row in cursor.fetchall()}
        locked = locked_ids(using, JOB, mine_where, mine_params, engine.skip_locked)
        renewed: list[int] = []
        if locked:
            # A keyed job's expired claim is locked but not renewed: it is neither renewed nor held up.
            live = f"id IN ({marks(locked)}) AND {_not_expired_if_keyed(engine)}"
            cursor.execute(f"SELECT id FROM {JOB} WHERE {live}", locked)
            renewed = sorted(row[0] for row in cursor.fetchall())
        if renewed:
            update_ids(using, JOB, renew, [visibility_timeout, visibility_timeout], renewed)
    return renewed, sorted(mine - set(locked))


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


def record_progress(
    using: str, worker_id: str, reports: Sequence[tuple[int, int, str]]
) -> set[tuple[int, int]]:
    """Set ``progress`` of each running claim ``(job_id, claim_token, progress_json)`` of ``worker_id``,
    one statement per batch; return the ``(job_id, claim_token)`` of the claims written.

    Fenced as a completion is, by owner, claim token and ``running``: a stale
    worker's report never lands on the next attempt's row, nor on a finished job.
    """
    if not reports:
        return set()
    cursor, engine = cursor_and_engine(using)
    written: set[tuple[int, int]] = set()
    for chunk in batched(reports, ROWS_PER_STATEMENT):
        if engine.supports_array_params:
            sql, params = _progress_arrays_statement(engine, worker_id, chunk)
        elif not engine.supports_update_returning:
            written.update(_progress_by_id(using, engine, worker_id, chunk))
            continue
        else:
            sql, params = _progress_values_statement(worker_id, chunk)
        cursor.execute(sql, params)
        written.update((row[0], row[1]) for row in cursor.fetchall())
    return written


def _progress_arrays_statement(
    engine: Engine, worker_id: str, chunk: Sequence[tuple[int, int, str]]
) -> tuple[str, list[Any]]:
    ids, tokens, values = (list(column) for column in zip(*chunk, strict=True))
    # A report whose row another transaction holds (an operator's cancel, still open) is
    # written at the next pass, or not at all, rather than hold up every other job's.
    lock = RowsLocked(engine, "reported", ids, worker_id, HELD_BY, engine.skip_locked_in_place)
    return lock.statement(
        f"UPDATE {JOB} SET progress = reports.progress "
        "FROM unnest(%s::bigint[], %s::bigint[], %s::jsonb[]) AS reports(id, claim_token, progress) "
        f"WHERE {JOB}.id = reports.id AND {JOB}.claim_token = reports.claim_token "
        f"AND {HELD_BY}{lock.where} RETURNING {JOB}.id, {JOB}.claim_token",
        [ids, tokens, values, worker_id],
    )


def _progress_by_id(
    using: str, engine: Engine, worker_id: str, chunk: Sequence[tuple[int, int, str]]
) -> set[tuple[int, int]]:
    """``record_progress``'s batch where the write cannot return its rows (MySQL): the claims
    locked first, passing over those another transaction holds, then written by id."""
    whens = " ".join("WHEN id = %s AND claim_token = %s THEN %s" for _ in chunk)
    values: list[Any] = [value for report in chunk for value in report]
    where = f"{HELD_BY} AND (id, claim_token) IN {engine.pairs(len(chunk))}"
    where_params = [worker_id, *(value for job_id, token, _ in chunk for value in (job_id, token))]
    rows = update_returning(
        using,
        JOB,
        f"progress = CASE {whens} END",
        values,
        where,
        where_params,
        "id, claim_token",
        engine.skip_locked,
    )
    return {(row[0], row[1]) for row in rows}


def _progress_values_statement(
    worker_id: str, chunk: Sequence[tuple[int, int, str]]
) -> tuple[str, list[Any]]:
    # By claim, not by id: a stale report of the same job in this batch must not lend its value.
    whens = " ".join("WHEN id = %s AND claim_token = %s THEN %s" for _ in chunk)
    pairs = ", ".join(["(%s, %s)"] * len(chunk))
    sql = (
        f"UPDATE {JOB} SET progress = CASE {whens} END WHERE {HELD_BY} "
        f"AND (id, claim_token) IN (VALUES {pairs}) RETURNING id, claim_token"
    )
    params: list[Any] = [value for report in chunk for value in report]
    params += [worker_id, *(value for job_id, token, _ in chunk for value in (job_id, token))]
    return sql, params
