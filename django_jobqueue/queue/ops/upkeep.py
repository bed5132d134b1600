"""Upkeep: expired claims handed back or buried, finished jobs pruned.

Run on a timer by every worker (``worker/services/ticker.py``); each statement passes
over rows another transaction holds, so tickers never wait on each other.
"""

from __future__ import annotations

from django.db import connections, transaction

from ..conflicts import run_retrying
from ..engines import Engine, engine_for
from ..flow import RATE_UNITS
from . import history
from .dead_letters import move_to_dead_letters
from .limited import STARTS
from .returning import delete_returning, update_ids
from .tables import JOB, TICK_BATCH, WORKER, cursor_and_engine, keys_not_held, marks


def _expired_error_sql(engine: Engine) -> str:
    """SQL text for an expired claim's error, built from the row itself.

    The owner is blamed for stopping only if its worker row is gone or fell
    silent before the claim's deadline. A row that beat after the deadline is a
    worker that outlived the claim: a dead worker's last beat always comes
    before the deadline, which every beat pushes past it.
    """
    alive = (
        f"EXISTS (SELECT 1 FROM {WORKER} WHERE {WORKER}.worker_id = {JOB}.locked_by "
        f"AND {WORKER}.last_heartbeat > {JOB}.locked_until)"
    )
    attempt = ("' attempt '", f"{JOB}.attempts")
    outlived = engine.concat(
        "'claim expired: worker '",
        f"{JOB}.locked_by",
        "' outlived its claim on'",
        *attempt,
        "' without finishing it (it could not renew the claim or record the outcome)'",
    )
    stopped = engine.concat(
        "'claim expired: worker '",
        f"COALESCE({JOB}.locked_by, '?')",
        "' stopped without finishing'",
        *attempt,
        "' (killed, hung or cut off from the database)'",
    )
    return f"CASE WHEN {alive} THEN {outlived} ELSE {stopped} END"


def tick_timeouts(using: str) -> int:
    """Handle every expired claim: running -> ready, or -> dead letter if its attempts are spent.

    Return how many claims were handled. Safe to run from many workers at once:
    each expired row is handled by exactly one of them.
    """
    handled = 0
    if not engine_for(connections[using]).supports_update_returning:
        while True:
            some = run_retrying(using, lambda: _expire_by_id(using))
            handled += some
            if some < TICK_BATCH:
                return handled
    while True:
        moved = run_retrying(using, lambda: _bury_expired(using))
        rescued = run_retrying(using, lambda: _rescue_expired(using))
        handled += moved + rescued
        if moved < TICK_BATCH and rescued < TICK_BATCH:
            return handled


def _expire_by_id(using: str) -> int:
    """A batch of expired claims, buried or handed back, where a change cannot return its rows (MySQL).

    One locking read takes both kinds, passing over rows others hold; they are
    then buried or handed back by id, in the same transaction. InnoDB locks a
    row its read scans before the rest of the WHERE is checked: a read of one
    kind alone would hold, for that moment, rows of the other that a
    concurrent tick's read of that kind then passes over, and leaves.
    """
    cursor, engine = cursor_and_engine(using)
    with transaction.atomic(using=using):
        cursor.execute(
            f"SELECT id, attempts >= max_attempts, {engine.live_key} FROM {JOB} "
            f"{engine.force_index(engine.expiry_index)} "
            f"WHERE {_expired(engine)} ORDER BY locked_until, id LIMIT {TICK_BATCH} {engine.skip_locked}"
        )
        rows = cursor.fetchall()
        # A burial takes the job's unique key out of the live ones: one a producer holds is passed over.
        spent = keys_not_held(cursor, engine, {job_id: key for job_id, dead, key in rows if dead})
        again = [job_id for job_id, dead, _key in rows if not dead]
        if spent:
            _bury_ids(using, engine, spent)
        if again:
            update_ids(using, JOB, _rescue_sets(engine), [], again)
    return len(spent) + len(again)


def _bury_ids(using: str, engine: Engine, ids: list[int]) -> None:
    """Bury the expired claims ``ids``, which this transaction holds."""
    move_to_dead_letters(
        using,
        _expired_error_sql(engine),
        f"CASE WHEN last_traceback = '' THEN '' ELSE {_earlier_traceback(engine)} END",
        history.pushed_entry(engine, history.LOST, _expired_error_sql(engine)),
        f"id IN ({marks(ids)})",
        engine.for_update,
        list(ids),
    )


def _rescue_sets(engine: Engine) -> str:
    return (
        f"attempt_history = {history.pushed_entry(engine, history.LOST, _expired_error_sql(engine))}, "
        f"status = 'ready', last_error = {_expired_error_sql(engine)}, locked_by = NULL, locked_until = NULL"
    )


def _expired(engine: Engine) -> str:
    return f"status = 'running' AND locked_until < {engine.now} AND NOT {_held_up(engine)}"


def _held_up(engine: Engine) -> str:
    """SQL true for a claim its owner still keeps though it could not renew it.

    The owner's heartbeat passed over the row, which another transaction held
    (an operator's cancel, still open), and named it on the owner's row
    (``workers.beat_worker``). While that row beats, within the job's
    visibility timeout, the worker is alive and running the job: handing it
    back would run it twice. Once the other transaction ends, the next beat
    renews the claim (or finds it cancelled).
    """
    fresh = engine.now_minus(f"{JOB}.visibility_timeout")
    return (
        f"EXISTS (SELECT 1 FROM {WORKER} WHERE {WORKER}.worker_id = {JOB}.locked_by "
        f"AND {WORKER}.held_claims IS NOT NULL AND {WORKER}.last_heartbeat > {fresh} "
        f"AND {engine.json_array_has(f'{WORKER}.held_claims', f'{JOB}.id')})"
    )


# In both statements below, SKIP LOCKED is the guard: the subquery locks each
# row it picks after re-checking ``where`` on the row's newest version, so the
# outer statement acts on rows nobody can change meanwhile, and a row that
# another transaction holds (an ack committing) is passed over, not waited on.
# The outer WHERE repeats ``where`` all the same: should a plan run the subquery
# again per row, a row it picks is still acted on only while it is expired.


def _bury_expired(using: str) -> int:
    engine = engine_for(connections[using])
    where = f"{_expired(engine)} AND attempts >= max_attempts"
    return move_to_dead_letters(
        using,
        _expired_error_sql(engine),
        # The expiry itself has no traceback; an earlier attempt's is worth keeping, labelled.
        f"CASE WHEN last_traceback = '' THEN '' ELSE {_earlier_traceback(engine)} END",
        history.pushed_entry(engine, history.LOST, _expired_error_sql(engine)),
        where,
        "",
        [],
        limit=TICK_BATCH,
    )


def _earlier_traceback(engine: Engine) -> str:
    return engine.concat("'Traceback of an earlier attempt ('", "last_error", "'):\n'", "last_traceback")


def _rescue_expired(using: str) -> int:
    cursor, engine = cursor_and_engine(using)
    where = f"{_expired(engine)} AND attempts < max_attempts"
    cursor.execute(
        f"UPDATE {JOB} SET status = 'ready', last_error = {_expired_error_sql(engine)}, "
        f"attempt_history = {history.pushed_entry(engine, history.LOST, _expired_error_sql(engine))}, "
        "locked_by = NULL, locked_until = NULL "
        f"WHERE id IN (SELECT id FROM {JOB} WHERE {where} LIMIT {TICK_BATCH} {engine.skip_locked_in_place}) "
        f"AND {where}",
        [],
    )
    return cursor.rowcount


def prune(using: str, older_than: float, batch: int = 5000) -> int:
    """Delete done and cancelled jobs finished more than ``older_than`` seconds ago.

    A job that another transaction is changing (an operator's *retry now*
    making it live again) is left alone, without waiting for it; if it is
    still finished, a later prune deletes it.
    """
    cursor, engine = cursor_and_engine(using)
    finished = f"status IN ('done', 'cancelled') AND {engine.finished_at} < {engine.now_minus('%s')}"
    # PostgreSQL re-checks a row changed meanwhile against the outer WHERE
    # only, never the subquery's: SKIP LOCKED passes over a row that another
    # transaction holds, and the guard repeated outside keeps a row made live
    # from being deleted. SKIP LOCKED also keeps tickers from waiting on each other.
    sql = (
        f"DELETE FROM {JOB} WHERE id IN (SELECT id FROM {JOB} WHERE {finished} "
        f"LIMIT %s {engine.skip_locked}) AND {finished}"
    )

    def delete_some() -> int:
        if not engine.supports_update_returning:
            # MySQL: no LIMIT in an IN subquery; the rows are locked by a read of their own.
            deleted = delete_returning(
                using,
                JOB,
                finished,
                [older_than],
                "id",
                engine.skip_locked,
                batch,
                index=engine.finished_index,
                order=None,
            )
            return len(deleted)
        cursor.execute(sql, [older_than, batch, older_than])
        return int(cursor.rowcount)

    deleted = 0
    while True:
        count = run_retrying(using, delete_some)
        deleted += count
        if count < batch:
            _prune_ledger(using)
            return deleted


def _prune_ledger(using: str) -> None:
    """Delete rate limit starts older than the longest window (a claim prunes only its own queues')."""
    cursor, engine = cursor_and_engine(using)
    longest = max(RATE_UNITS.values())
    cursor.execute(f"DELETE FROM {STARTS} WHERE started_at < {engine.now_minus('%s')}", [longest])
