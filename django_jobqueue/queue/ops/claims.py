"""A claim's end (done, retried, dead, handed back) or extension; claims themselves are ``rounds.py``'s.

Every write after the claim is fenced (``tables.Fence``): it names the owner
and, where known, the claim token it expects, and changes nothing once the
claim is no longer current.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from django.db import connections, transaction

from ..engines import Engine, engine_for
from ..native import run_bound
from . import history
from .batches import Counts, record_outcomes
from .dead_letters import move_to_dead_letters
from .dependencies import release_dependents
from .moves import Change, transition, transition_cte
from .tables import HELD_BY, JOB, ROWS_PER_STATEMENT, Fence, batched, cursor_and_engine, marks

# -- completions ---------------------------------------------------------------

# The plain ack's one extra condition: a job that dependents wait on is left to
# ``complete_releasing``, which releases them in the ack's own transaction.
NO_DEPENDENTS = "NOT has_dependents"


def complete(using: str, fence: Fence, result_json: str | None, keep: bool) -> bool:
    """running -> done (kept for pruning) or deleted; False if this claim is no longer current.

    A job that others depend on releases them in the same transaction (``complete_releasing``).
    """
    cursor, engine = cursor_and_engine(using)
    where, params = fence.where()
    cursor.execute(*_done(engine, f"{where} AND {NO_DEPENDENTS}", params, result_json, keep, "id"))
    if cursor.fetchall():
        return True
    return bool(complete_releasing(using, [(fence, result_json)], keep))


def _done(
    engine: Engine, where: str, params: list[Any], result_json: str | None, keep: bool, returning: str
) -> tuple[str, list[Any]]:
    """The ack's statement for the claims ``where`` names: done and kept with ``result_json``,
    or deleted with ``KEEP_COMPLETED = 0``; each row acked returns ``returning``."""
    if not keep:
        return f"DELETE FROM {JOB} WHERE {where} RETURNING {returning}", params
    done = Change({**_done_columns(engine), "result": engine.json_param}, {"result": [result_json]})
    return transition(engine, done, where, params, returning)


def _done_columns(engine: Engine) -> dict[str, str]:
    """A job's columns once acked and kept, but its result, which comes with each ack."""
    return {"status": "'done'", "finished_at": engine.now, "locked_until": "NULL"}


def complete_releasing(
    using: str, acks: Sequence[tuple[Fence, str | None]], keep: bool
) -> set[tuple[int, int]]:
    """running -> done (or deleted) for each ``(fence, result_json)``, releasing the dependents
    of the jobs acked, in one transaction; return the ``(job_id, claim_token)`` acked.

    The ack of a job with dependents, and the retry of an ack the plain
    statement left out (a claim no longer current changes nothing here either).
    """
    cursor, engine = cursor_and_engine(using)
    done: set[tuple[int, int]] = set()
    with transaction.atomic(using=using):
        releasing: list[int] = []
        for fence, result_json in acks:
            where, params = fence.where()
            cursor.execute(
                *_done(engine, where, params, result_json, keep, "id, claim_token, has_dependents")
            )
            row = cursor.fetchone()
            if row is not None:
                done.add((row[0], row[1]))
                if row[2]:
                    releasing.append(row[0])
        release_dependents(using, releasing)
    return done


def complete_held_back(
    using: str,
    worker_id: str,
    completions: Sequence[tuple[int, int, str | None]],
    done: set[tuple[int, int]],
    keep: bool,
) -> set[tuple[int, int]]:
    """``complete_releasing`` for the completions a plain ack statement did not return (``done``)."""
    rest = [completion for completion in completions if (completion[0], completion[1]) not in done]
    if not rest:
        return set()
    cursor, engine = cursor_and_engine(using)
    acked: set[tuple[int, int]] = set()
    with transaction.atomic(using=using):
        releasing: list[int] = []
        for chunk in batched(rest, ROWS_PER_STATEMENT):
            if engine.supports_array_params:
                cte = complete_arrays_cte(engine, worker_id, chunk, keep, plain=False)
                rows = run_bound(using, *acked_statement(cte))
            else:
                rows = _ack_values(cursor, engine, worker_id, chunk, keep, plain=False)
            for job_id, token, has_dependents in rows:
                acked.add((job_id, token))
                if has_dependents:
                    releasing.append(job_id)
        release_dependents(using, releasing)
    return acked


def complete_counted(using: str, fence: Fence, result_json: str | None, keep: bool) -> bool:
    """``complete`` for a job that may belong to a batch; the batch counts it in the same transaction.

    The ack of a job known to be of no batch is ``complete``'s one statement;
    this one returns the job's batch and so runs in a transaction of its own,
    which also releases the job's dependents (``depends_on``) if it has any.
    """
    cursor, engine = cursor_and_engine(using)
    where, params = fence.where()
    with transaction.atomic(using=using):
        cursor.execute(*_done(engine, where, params, result_json, keep, "id, batch_id, has_dependents"))
        row = cursor.fetchone()
        if row is None:
            return False
        job_id, batch_id, has_dependents = row
        if has_dependents:
            release_dependents(using, [job_id])
        if batch_id is not None:
            record_outcomes(using, {batch_id: Counts(done=1)})
    return True


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
    engine = engine_for(connections[using])
    if engine.supports_array_params:
        sql, params = acked_statement(complete_arrays_cte(engine, worker_id, completions, keep))
        acked = {(row[0], row[1]) for row in run_bound(using, sql, params)}
        return acked | complete_held_back(using, worker_id, completions, acked, keep)
    cursor, engine = cursor_and_engine(using)
    done: set[tuple[int, int]] = set()
    for chunk in batched(completions, ROWS_PER_STATEMENT):
        done.update(
            (row[0], row[1]) for row in _ack_values(cursor, engine, worker_id, chunk, keep, plain=True)
        )
    return done | complete_held_back(using, worker_id, completions, done, keep)


def _ack_values(
    cursor: Any,
    engine: Engine,
    worker_id: str,
    chunk: Sequence[tuple[int, int, str | None]],
    keep: bool,
    plain: bool,
) -> list[Any]:
    """One ``(id, claim_token) IN (VALUES …)`` ack of ``chunk``; its rows.

    ``plain``: the plain ack, which leaves jobs with dependents out and returns
    ``id, claim_token``; else every claim still held is acked and each row
    also says whether the job ``has_dependents``.
    """
    pairs = ", ".join(["(%s, %s)"] * len(chunk))
    fence_params: list[Any] = [worker_id]
    fence_params += [value for job_id, token, _ in chunk for value in (job_id, token)]
    held = f"{HELD_BY} AND {NO_DEPENDENTS}" if plain else HELD_BY
    fence = f"{held} AND (id, claim_token) IN (VALUES {pairs})"
    returning = "id, claim_token" if plain else "id, claim_token, has_dependents"
    if keep:
        results = [completion for completion in chunk if completion[2] is not None]
        result_sql, result_params = "NULL", []
        if results:
            # By claim, not by id: a stale ack of the same job in this batch must not lend its result.
            whens = " ".join("WHEN id = %s AND claim_token = %s THEN %s" for _ in results)
            result_sql = f"CASE {whens} END"
            result_params = [value for completion in results for value in completion]
        done = Change({**_done_columns(engine), "result": result_sql}, {"result": result_params})
        cursor.execute(*transition(engine, done, fence, fence_params, returning))
    else:
        cursor.execute(f"DELETE FROM {JOB} WHERE {fence} RETURNING {returning}", fence_params)
    return list(cursor.fetchall())


def acked_statement(cte: tuple[str, list[Any]]) -> tuple[str, list[Any]]:
    """``complete_arrays_cte``'s items as one statement of their own, its rows those of ``acked``."""
    sql, params = cte
    return f"WITH {sql} SELECT * FROM acked", params


def complete_arrays_cte(
    engine: Engine,
    worker_id: str,
    completions: Sequence[tuple[int, int, str | None]],
    keep: bool,
    plain: bool = True,
) -> tuple[str, list[Any]]:
    """``complete_many``'s statement where the engine takes arrays, the batch as three however long
    it is: ``WITH`` items ending in ``acked``, one row per claim acked, its ``id, claim_token``
    (and, unless ``plain``, ``has_dependents``).

    ``plain`` as for ``_ack_values``: the plain ack's statement, or the one of
    ``complete_held_back`` that acks jobs with dependents too and says which.
    A worker's round puts them before its claim, in one statement; elsewhere
    they are a statement of their own (``acked_statement``).
    """
    ids = [job_id for job_id, _token, _result in completions]
    tokens = [token for _job_id, token, _result in completions]
    # Unqualified: the acks' columns are id, claim_token and result alone.
    # The caller hands what it leaves out to ``complete_held_back``.
    fence = f"{HELD_BY} AND {NO_DEPENDENTS}" if plain else HELD_BY
    where = f"{JOB}.id = acks.id AND {JOB}.claim_token = acks.claim_token AND {fence}"
    returning = f"{JOB}.id, {JOB}.claim_token" + ("" if plain else f", {JOB}.has_dependents")
    if not keep:
        sql = (
            f"acked AS (DELETE FROM {JOB} USING unnest(%s::bigint[], %s::bigint[]) AS acks(id, claim_token) "
            f"WHERE {where} RETURNING {returning})"
        )
        return sql, [ids, tokens, worker_id]
    # Joined on the claim, not the id: a stale ack of the same job must not lend its result.
    results = [result for _job_id, _token, result in completions]
    joined = "unnest(%s::bigint[], %s::bigint[], %s::jsonb[]) AS acks(id, claim_token, result)"
    moved = engine.finished_jobs_apart
    done = Change(
        {**_done_columns(engine), "result": "ack_result" if moved else "acks.result"},
        joined=joined,
        joined_params=[ids, tokens, results],
        carried="acks.result AS ack_result" if moved else "",
    )
    return transition_cte(engine, "acked", done, where, [worker_id], returning)


def retry_later(
    using: str, fence: Fence, delay: float, error: str, traceback: str, outcome: str = history.RETRY
) -> bool:
    """running -> ready after ``delay`` seconds, the attempt's ``outcome`` added to the job's history;
    False, changing nothing, if this claim is no longer current."""
    cursor, engine = cursor_and_engine(using)
    where, params = fence.where()
    cursor.execute(
        f"UPDATE {JOB} SET status = 'ready', run_at = {engine.now_plus('%s')}, "
        f"locked_by = NULL, locked_until = NULL, last_error = %s, last_traceback = %s, "
        f"attempt_history = {history.pushed_entry(engine, outcome, '%s')} WHERE {where}",
        [delay, error, traceback, error, *params],
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
            sql, params = _progress_arrays_statement(worker_id, chunk)
        else:
            sql, params = _progress_values_statement(worker_id, chunk)
        cursor.execute(sql, params)
        written.update((row[0], row[1]) for row in cursor.fetchall())
    return written


def _progress_arrays_statement(
    worker_id: str, chunk: Sequence[tuple[int, int, str]]
) -> tuple[str, list[Any]]:
    sql = (
        f"UPDATE {JOB} SET progress = reports.progress "
        "FROM unnest(%s::bigint[], %s::bigint[], %s::jsonb[]) AS reports(id, claim_token, progress) "
        f"WHERE {JOB}.id = reports.id AND {JOB}.claim_token = reports.claim_token "
        f"AND {HELD_BY} RETURNING {JOB}.id, {JOB}.claim_token"
    )
    ids, tokens, values = (list(column) for column in zip(*chunk, strict=True))
    return sql, [ids, tokens, values, worker_id]


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
