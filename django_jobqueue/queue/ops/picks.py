"""What a round picks: the due plain jobs it may take, and whether keyed ones wait.

``plain_picked`` is the pick as a subquery of the claim's ``UPDATE``.
Where the database has no ``UPDATE … RETURNING`` (MySQL, MariaDB) the pick is
a statement of its own (``picked_rows``) that reads and locks the due jobs
first, ``SKIP LOCKED``, each queue's from its own range of the claim index
(migration 0018: InnoDB locks every record a locking read scans, so the read
names the index's leading columns with equalities and, with ``IN``, the
ranks that hold ready jobs, which ``ranks_of`` reads first);
``claim_picked`` then claims them by id, in the transaction of the round's
acks, without reading them back: the pick read every column, and the
claim's moment and deadlines, as the database computes them.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from ...models import Job
from ..engines import Engine
from ..flow import QueueLimits
from ..rows import JOB_COLUMNS, JOB_COLUMNS_SQL, jobs_from_rows
from .limited import NOT_PAUSED_ROW, not_paused
from .returning import update_ids, update_ids_returning
from .tables import CLAIM_ORDER, JOB, cursor_and_engine, live_jobs, marks


def unkeyed_due(engine: Engine, ranks: Sequence[int]) -> str:
    """SQL true for a due job without a concurrency key of one of ``ranks``, as the claim index reads it.

    Each rank named is a range of its own, bounded by ``run_at <= now``: the
    read stops at the first job due later in each, where a range over every
    rank would scan (and lock) each such job of a higher priority.
    """
    listed = ", ".join(str(int(rank)) for rank in ranks) or "NULL"
    in_ranks = f"{engine.claim_rank} IN ({listed})"
    return f"{engine.unkeyed} AND {in_ranks} AND run_at <= {engine.now} AND {PLAIN_READY_ROW}"


# The pick's guard as the row itself says it, beside the generated column the index reads by
# (``Engine.unkeyed``): a locking read takes the row's newest version, which a generated
# column's index entry read before the lock may no longer match (InnoDB's SKIP LOCKED
# read of a secondary index): a job claimed, or given a key, since.
PLAIN_READY_ROW = "status = 'ready' AND concurrency_key IS NULL"


# How many ranks of each queue ``ranks_of`` reads in one statement; a queue that has as many
# walks them all (``ranks_in_use``). MariaDB's recursive walk costs a temporary table: 1.9 ms,
# against 0.13 ms for two probes, on a table of 10,000 ready jobs.
RANKS_AHEAD = 2


def ranks_of(cursor: Any, engine: Engine, queues: Sequence[str | None]) -> dict[str | None, list[int]]:
    """The ranks (``-priority``) of the ready plain jobs of each of ``queues`` (None: of every queue),
    in order: the first two of every queue in one statement, all of them for a queue that has two."""
    branches, params = [], []
    for index, queue in enumerate(queues):
        hint, where, where_params = _rank_probe(engine, queue)
        rank = engine.claim_rank
        # The first rank, read in a derived table of one row, is a constant to the probe for the
        # second, which the optimizer runs as one: chained through a second derived table, a
        # third probe would be a dependent subquery that reads the whole index range.
        first = f"SELECT MIN({rank}) AS r1 FROM {JOB} {hint} WHERE {where}"
        second = f"SELECT MIN({rank}) FROM {JOB} {hint} WHERE {where} AND {rank} > first.r1"
        branches.append(f"SELECT {index}, first.r1, ({second}) FROM ({first}) AS first")
        params += [*where_params, *where_params]
    cursor.execute(" UNION ALL ".join(branches), params)
    found: dict[str | None, list[int]] = {}
    for row in cursor.fetchall():
        found[queues[row[0]]] = [int(rank) for rank in row[1:] if rank is not None]
    for queue, ranks in found.items():
        if len(ranks) == RANKS_AHEAD:
            found[queue] = ranks_in_use(cursor, engine, queue)
    return found


def ranks_in_use(cursor: Any, engine: Engine, queue: str | None) -> list[int]:
    """The ranks (``-priority``) of the ready plain jobs of ``queue`` (None: of every queue), in order.

    One probe of the claim index per rank held, and one more: a walk from each
    rank to the next. A claim that named every rank would probe each empty one
    too, and each such probe lands on the next rank's head, where the index
    entries of jobs just claimed wait, marked deleted, for InnoDB's purge: at
    a hundred empty ranks above the one being drained, 30 ms a claim.
    """
    hint, where, params = _rank_probe(engine, queue)
    rank = engine.claim_rank
    first = f"SELECT MIN({rank}) FROM {JOB} {hint} WHERE {where}"
    cursor.execute(
        f"WITH RECURSIVE ranks (rank_) AS (({first}) UNION ALL SELECT ({first} AND {rank} > ranks.rank_) "
        "FROM ranks WHERE ranks.rank_ IS NOT NULL) SELECT rank_ FROM ranks WHERE rank_ IS NOT NULL",
        [*params, *params],
    )
    return [int(row[0]) for row in cursor.fetchall()]


def _rank_probe(engine: Engine, queue: str | None) -> tuple[str, str, list[Any]]:
    """The claim index's hint, and the WHERE (with its parameters) of the ready plain jobs of ``queue``."""
    where = engine.unkeyed
    if queue is None:
        return engine.any_queue_claim_hint, where, []
    return engine.queue_claim_hint, f"{where} AND queue = %s", [queue]


def claim_seconds(engine: Engine) -> str:
    """SQL of a claim's seconds to its deadline: the round's visibility timeout (a parameter),
    else the job's own."""
    return f"COALESCE({engine.nullable_float}, visibility_timeout)"


def picked_rows(
    using: str,
    queue_limits: Sequence[tuple[str, int]] | None,
    limit: int,
    limits: Mapping[str, QueueLimits],
    visibility_timeout: float | None,
) -> list[Any]:
    """Lock and return the due plain jobs a round may take, passing over locked ones.

    Each row is the job's every column, then the claim's moment and deadline
    as the database computes them (``claim_picked``): the claim's rows are
    these, as the claim by id leaves them, and are not read again.
    """
    cursor, engine = cursor_and_engine(using)
    deadline = engine.now_plus(claim_seconds(engine))
    columns = f"{JOB_COLUMNS_SQL}, {engine.now}, {deadline}, {engine.claim_rank}"
    lock = f"ORDER BY {engine.claim_order} LIMIT %s {engine.skip_locked_in_place}"
    if queue_limits is None:
        due = unkeyed_due(engine, ranks_of(cursor, engine, [None])[None])
        others = f"AND queue NOT IN ({marks(list(limits))}) " if limits else ""
        cursor.execute(
            f"SELECT {columns} FROM {JOB} {engine.any_queue_claim_hint} "
            f"WHERE {due} {others}AND {NOT_PAUSED_ROW} {lock}",
            [visibility_timeout, *limits, limit],
        )
        return list(cursor.fetchall())
    served = [(queue, share) for queue, share in queue_limits if queue not in limits]
    if not served:
        return []
    ranks = ranks_of(cursor, engine, [queue for queue, _share in served])
    branches: list[str] = []
    params: list[Any] = []
    for queue, share in served:
        due = unkeyed_due(engine, ranks[queue])
        branches.append(
            f"(SELECT {columns} FROM {JOB} {engine.queue_claim_hint} "
            f"WHERE {due} AND queue = %s "
            f"AND {not_paused('%s')} {lock})"
        )
        params += [visibility_timeout, queue, queue, min(share, limit)]
    if len(branches) == 1:
        cursor.execute(branches[0][1:-1], params)
    else:
        union = " UNION ALL ".join(branches)
        cursor.execute(f"{union} ORDER BY {engine.claim_order} LIMIT %s", [*params, limit])
    return list(cursor.fetchall())


def moment_of(picked: Sequence[Any]) -> Any:
    """The claim's moment as ``picked_rows`` read it (None if it picked nothing)."""
    return picked[0][_MOMENT] if picked else None


def claim_picked(
    using: str, sets: str, set_params: Sequence[Any], picked: Sequence[Any], worker_id: str
) -> list[Job]:
    """Claim the rows ``picked_rows`` locked with ``sets`` (written from their moment); return them.

    Each job is its picked row as the claim changes it: the claim writes
    values the pick's statement computed (its moment, each row's deadline)
    or that follow from the row (one more attempt and claim token), so the
    rows are not read back.
    """
    update_ids(using, JOB, sets, set_params, [row[_ID] for row in picked])
    return jobs_from_rows(using, [_as_claimed(row, worker_id) for row in picked])


def _as_claimed(row: Sequence[Any], worker_id: str) -> list[Any]:
    """A picked row's job columns as ``rounds._claim_sets`` leaves them."""
    values = list(row[:_MOMENT])
    moment, deadline = row[_MOMENT], row[_MOMENT + 1]
    values[_STATUS] = "running"
    values[_ATTEMPTS] += 1
    values[_CLAIM_TOKEN] += 1
    values[_LOCKED_BY] = worker_id
    values[_LOCKED_UNTIL] = deadline
    if values[_STARTED_AT] is None:
        values[_STARTED_AT] = moment
    values[_LAST_ATTEMPTED_AT] = moment
    if values[_TASK_BACKEND] != "":
        values[_WORKER_IDS] = [*json.loads(values[_WORKER_IDS]), worker_id]
    return values


_ID, _MOMENT = JOB_COLUMNS.index("id"), len(JOB_COLUMNS)
_STATUS, _ATTEMPTS = JOB_COLUMNS.index("status"), JOB_COLUMNS.index("attempts")
_CLAIM_TOKEN, _LOCKED_BY = JOB_COLUMNS.index("claim_token"), JOB_COLUMNS.index("locked_by")
_LOCKED_UNTIL, _STARTED_AT = JOB_COLUMNS.index("locked_until"), JOB_COLUMNS.index("started_at")
_LAST_ATTEMPTED_AT = JOB_COLUMNS.index("last_attempted_at")
_TASK_BACKEND, _WORKER_IDS = JOB_COLUMNS.index("task_backend"), JOB_COLUMNS.index("worker_ids")


def keyed_probe(engine: Engine, queue_limits: Sequence[tuple[str, int]] | None) -> tuple[str, list[Any]]:
    """SQL true while a due job with a key waits in the claimer's queues (one index probe)."""
    jobs = live_jobs(engine)
    due = f"{engine.keyed_status} = 'ready' AND concurrency_key IS NOT NULL AND run_at <= {engine.now}"
    if queue_limits is None:
        return f"EXISTS (SELECT 1 FROM {jobs} WHERE {due})", []
    queues = [queue for queue, _share in queue_limits]
    return f"EXISTS (SELECT 1 FROM {jobs} WHERE {due} AND queue IN ({marks(queues)}))", queues


def plain_picked(
    engine: Engine,
    queue_limits: Sequence[tuple[str, int]] | None,
    limit: int,
    limits: Mapping[str, QueueLimits],
    columns: str = "id, priority, run_at",
    lock: bool = True,
) -> tuple[str, list[Any]]:
    """A SELECT of ``columns`` of the jobs no limit applies to that a round may claim.

    Its ``LIMIT`` counts are written into the SQL, not passed as parameters.
    PostgreSQL plans a prepared statement for its parameters at each of its
    first five runs, then keeps that plan made once for any parameters only if
    it looks no dearer; with the count unknown, it takes a tenth of every ready
    job to be read, and the round's statement was planned anew at every run:
    over a millisecond of the database's time, as much as the round itself.
    With the count written in, one statement is prepared per count a worker
    asks for (a few: its free slots), each planned once.
    """
    jobs = live_jobs(engine)
    # ``lock`` False: the pick of a limited round on MySQL, read under the flow lock as a
    # CTE (where InnoDB takes no locking clause); its jobs are locked by id after it.
    skip_locked = engine.skip_locked_in_place if lock else ""
    due = f"status = 'ready' AND concurrency_key IS NULL AND run_at <= {engine.now}"
    params: list[Any] = []
    if queue_limits is None:
        # Queues with limits are the limited claim's, and paused ones nobody's.
        others = f"AND queue NOT IN ({marks(list(limits))}) " if limits else ""
        params += list(limits)
        sql = (
            f"SELECT {columns} FROM {jobs} WHERE {due} {others}AND {NOT_PAUSED_ROW} "
            f"ORDER BY {CLAIM_ORDER} LIMIT {int(limit)} {skip_locked}"
        )
        return sql, params
    branches = []
    for queue, queue_limit in queue_limits:
        if queue in limits:
            continue
        branches.append(
            f"SELECT * FROM (SELECT id, priority, run_at FROM {jobs} WHERE {due} AND queue = %s "
            f"AND {not_paused('%s')} ORDER BY {CLAIM_ORDER} LIMIT {int(queue_limit)} "
            f"{skip_locked}) AS branch"
        )
        params += [queue, queue]
    if not branches:
        return f"SELECT {columns} FROM {jobs} WHERE 1 = 0", []
    union = " UNION ALL ".join(branches)
    sql = f"SELECT {columns} FROM ({union}) AS picked ORDER BY {CLAIM_ORDER} LIMIT {int(limit)}"
    return sql, params


def claim_ids(using: str, sets: str, set_params: Sequence[Any], ids: Sequence[int]) -> list[Job]:
    """Claim the jobs ``ids``, which this transaction has locked, with ``sets``; return them."""
    return jobs_from_rows(using, update_ids_returning(using, JOB, sets, set_params, ids, JOB_COLUMNS_SQL))
