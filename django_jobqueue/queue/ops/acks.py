"""Acks: a claim's end as done, for one job, a batch, or a worker's round.

Every ack is fenced (``tables.Fence``): it names the owner and, where known,
the claim token it expects, and changes nothing once the claim is no longer
current. A job that others depend on (``depends_on``) releases them in its
ack's transaction; a batch of acks passes over the rows another transaction
holds (``tables.RowsLocked``). Claims themselves are ``rounds.py``'s; the other ends
of a claim (retried, dead, handed back) and its renewals are ``claims.py``'s.
"""

from __future__ import annotations

import enum
from collections.abc import Sequence
from typing import Any

from django.db import connections, transaction

from ..engines import Engine, engine_for
from ..native import run_bound
from . import returning as returning_ops
from .batches import Counts, record_outcomes
from .dependencies import release_dependents
from .moves import Change, transition, transition_cte
from .tables import (
    BRIEF_LOCK_WAIT,
    HELD_BY,
    JOB,
    ROWS_PER_STATEMENT,
    Fence,
    RowsLocked,
    batched,
    cursor_and_engine,
    keys_not_held,
    written_ids,
)

# The plain ack's one extra condition: a job that dependents wait on is left to
# ``complete_releasing``, which releases them in the ack's own transaction.
NO_DEPENDENTS = "NOT has_dependents"


class AckWait(enum.Enum):
    """How a batch of acks meets a row that another transaction holds.

    ``PASS_OVER`` locks each row first, passing over those held (``tables.RowsLocked``):
    an extra lock per ack. ``WAIT_BRIEFLY`` (a worker's round outside any
    transaction of the caller's) waits ``BRIEF_LOCK_WAIT`` at most, and the
    database then ends the statement (``conflicts.is_lock_timeout``): the
    caller writes the batch again, passing over. ``IN_TRANSACTION`` takes no
    lock of its own: an earlier statement of the transaction set its lock
    timeout (the limited round's pipeline).
    """

    PASS_OVER = "pass over"
    WAIT_BRIEFLY = "wait briefly"
    IN_TRANSACTION = "in transaction"


PASS_OVER, WAIT_BRIEFLY, IN_TRANSACTION = AckWait.PASS_OVER, AckWait.WAIT_BRIEFLY, AckWait.IN_TRANSACTION


def complete(using: str, fence: Fence, result_json: str | None, keep: bool) -> bool:
    """running -> done (kept for pruning) or deleted; False if this claim is no longer current.

    A job that others depend on releases them in the same transaction (``complete_releasing``).
    """
    where, params = fence.where()
    plain = f"{where} AND {NO_DEPENDENTS}"
    cursor, engine = cursor_and_engine(using)
    if not engine.supports_update_returning:
        # The fence names the one row: whether it matched is the statement's count, no RETURNING needed.
        if keep:
            sets = ", ".join(f"{column} = {value}" for column, value in _done_columns(engine).items())
            cursor.execute(f"UPDATE {JOB} SET {sets}, result = %s WHERE {plain}", [result_json, *params])
        else:
            cursor.execute(f"DELETE FROM {JOB} WHERE {plain}", params)
        if cursor.rowcount == 1:
            return True
    elif _run_done(using, plain, params, result_json, keep, "id"):
        return True
    return bool(complete_releasing(using, [(fence, result_json)], keep))


def _run_done(
    using: str, where: str, params: list[Any], result_json: str | None, keep: bool, returning: str
) -> list[Any]:
    """Run ``_done``'s ack of the claims ``where`` names; the rows it returns.

    Where the database cannot return an ack's rows from the ack itself, the
    rows are locked first, waiting on them as the ack itself would.
    """
    cursor, engine = cursor_and_engine(using)
    if engine.supports_update_returning:
        cursor.execute(*_done(engine, where, params, result_json, keep, returning))
        return list(cursor.fetchall())
    if not keep:
        return returning_ops.delete_returning(using, JOB, where, params, returning, engine.for_update)
    sets = ", ".join(f"{column} = {value}" for column, value in _done_columns(engine).items())
    return returning_ops.update_returning(
        using, JOB, f"{sets}, result = %s", [result_json], where, params, returning, engine.for_update
    )


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
    done: set[tuple[int, int]] = set()
    with transaction.atomic(using=using):
        releasing: list[int] = []
        for fence, result_json in acks:
            where, params = fence.where()
            for row in _run_done(using, where, params, result_json, keep, "id, claim_token, has_dependents"):
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
    where, params = fence.where()
    with transaction.atomic(using=using):
        rows = _run_done(using, where, params, result_json, keep, "id, batch_id, has_dependents")
        if not rows:
            return False
        job_id, batch_id, has_dependents = rows[0]
        if has_dependents:
            release_dependents(using, [job_id])
        if batch_id is not None:
            record_outcomes(using, {batch_id: Counts(done=1)})
    return True


def complete_many(
    using: str,
    worker_id: str,
    completions: Sequence[tuple[int, int, str | None]],
    keep: bool,
    wait: AckWait = PASS_OVER,
) -> set[tuple[int, int]]:
    """running -> done (or deleted) for each ``(job_id, claim_token, result_json)`` of ``worker_id``,
    one statement per batch; return the ``(job_id, claim_token)`` of the claims completed.

    Each row is fenced as ``complete`` fences it, by its owner and its own claim
    token: a claim that expired and was re-claimed, or whose job was cancelled,
    is left alone and not returned. ``wait``: how a row another transaction
    holds is met (``AckWait``).
    """
    if not completions:
        return set()
    engine = engine_for(connections[using])
    if engine.supports_array_params:
        sql, params = acked_statement(complete_arrays_cte(engine, worker_id, completions, keep, wait=wait))
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
    held = f"{HELD_BY} AND {NO_DEPENDENTS}" if plain else HELD_BY
    if not engine.supports_update_returning:
        return _ack_values_by_id(cursor, engine, worker_id, chunk, keep, held, plain)
    fence_params: list[Any] = [worker_id]
    fence_params += [value for job_id, token, _ in chunk for value in (job_id, token)]
    fence = f"{held} AND (id, claim_token) IN {engine.pairs(len(chunk))}"
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


def _ack_values_by_id(
    cursor: Any,
    engine: Engine,
    worker_id: str,
    chunk: Sequence[tuple[int, int, str | None]],
    keep: bool,
    still_held: str,
    plain: bool,
) -> list[Any]:
    """``_ack_values`` where the ack cannot return its rows: those held by another transaction
    (an operator's cancel, still open) are passed over, as a batch of acks does elsewhere.

    The rows' ids, claim tokens and marks are those of the locking read: no
    other transaction changes a row this one holds, so none is read again.
    Ids and claim tokens are written into the statements (``tables.written_ids``).
    """
    using = cursor.db.alias
    claims = ", ".join(f"({written_ids([job_id, token])})" for job_id, token, _ in chunk)
    fence, fence_params = f"{still_held} AND (id, claim_token) IN ({claims})", [worker_id]
    # No savepoint inside a worker's round (two statements more a round): the read passes over
    # what it cannot lock at once, and the writes touch only the rows it locked.
    with transaction.atomic(using=using, savepoint=False):
        cursor.execute(
            f"SELECT id, claim_token, has_dependents, {engine.live_key} FROM {JOB} "
            f"{engine.force_index(returning_ops.BY_ID)} WHERE {fence} ORDER BY id {engine.skip_locked}",
            fence_params,
        )
        locked = cursor.fetchall()
        ids = keys_not_held(cursor, engine, {row[0]: row[3] for row in locked})
        free = set(ids)
        acked = [row[:2] if plain else row[:3] for row in locked if row[0] in free]
        if not keep:
            returning_ops.delete_ids(using, JOB, ids)
            return acked
        # By claim: a stale ack of the same job in this batch must not lend its result.
        held = {(row[0], row[1]) for row in acked}
        results = [completion for completion in chunk if completion[:2] in held and completion[2] is not None]
        result_sql, result_params = "NULL", []
        if results:
            whens = " ".join(f"WHEN id = {int(job_id)} THEN %s" for job_id, _token, _result in results)
            result_sql = f"CASE {whens} END"
            result_params = [result for _job_id, _token, result in results]
        sets = ", ".join(f"{column} = {value}" for column, value in _done_columns(engine).items())
        returning_ops.update_ids(using, JOB, f"{sets}, result = {result_sql}", result_params, ids)
        return acked


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
    wait: AckWait = PASS_OVER,
) -> tuple[str, list[Any]]:
    """``complete_many``'s statement where the engine takes arrays, the batch as three however long
    it is: ``WITH`` items ending in ``acked``, one row per claim acked, its ``id, claim_token``
    (and, unless ``plain``, ``has_dependents``).

    ``plain`` as for ``_ack_values``: the plain ack's statement, or the one of
    ``complete_held_back`` that acks jobs with dependents too and says which.
    A worker's round puts them before its claim, in one statement; elsewhere
    they are a statement of their own (``acked_statement``). ``wait``: how a
    row another transaction holds is met (``AckWait``).
    """
    ids = [job_id for job_id, _token, _result in completions]
    tokens = [token for _job_id, token, _result in completions]
    # Unqualified: the acks' columns are id, claim_token and result alone.
    # The caller hands what it leaves out to ``complete_held_back``.
    fence = f"{HELD_BY} AND {NO_DEPENDENTS}" if plain else HELD_BY
    # A batch of acks never waits long on a row another transaction holds: an
    # operator's cancel of the job, still open, or an enqueue naming it in
    # ``depends_on`` (which holds it ``for_key_share``, so that it cannot finish
    # before that enqueue commits). Passed over (at once, or after a brief wait:
    # ``AckWait``), an ack is missing from the acked rows, as a lost claim's is,
    # and the worker tries it again (``worker/completer.py``) while its claim holds.
    lock = RowsLocked(
        engine, "acks_locked", ids, worker_id, fence, engine.skip_locked if wait is PASS_OVER else ""
    )
    where = f"{JOB}.id = acks.id AND {JOB}.claim_token = acks.claim_token AND {fence}{lock.where}"
    returning = f"{JOB}.id, {JOB}.claim_token" + ("" if plain else f", {JOB}.has_dependents")
    # The acks' ids, read before any row is locked (the unnest is, whatever the plan):
    # with WAIT_BRIEFLY they set this transaction's lock timeout first.
    ids_sql = "%s::bigint[]"
    ids_params: list[Any] = [ids]
    if wait is WAIT_BRIEFLY:
        ids_sql, ids_params = engine.with_lock_timeout(ids_sql), [ids, BRIEF_LOCK_WAIT]
    if not keep:
        sql = (
            f"acked AS (DELETE FROM {JOB} USING unnest({ids_sql}, %s::bigint[]) AS acks(id, claim_token) "
            f"WHERE {where} RETURNING {returning})"
        )
        return lock.before(sql, [*ids_params, tokens, worker_id])
    # Joined on the claim, not the id: a stale ack of the same job must not lend its result.
    results = [result for _job_id, _token, result in completions]
    joined = f"unnest({ids_sql}, %s::bigint[], %s::jsonb[]) AS acks(id, claim_token, result)"
    moved = engine.finished_jobs_apart
    done = Change(
        {**_done_columns(engine), "result": "ack_result" if moved else "acks.result"},
        joined=joined,
        joined_params=[*ids_params, tokens, results],
        carried="acks.result AS ack_result" if moved else "",
    )
    return lock.before(*transition_cte(engine, "acked", done, where, [worker_id], returning))
