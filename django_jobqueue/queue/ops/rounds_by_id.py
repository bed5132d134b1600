"""A plain claim where the database has no ``UPDATE … RETURNING`` (MySQL, MariaDB).

The due jobs are read and locked first, ``SKIP LOCKED``, each queue's from
its own range of the claim index (migration 0018: InnoDB locks every record
a locking read scans, so the read names the index's leading columns with
equalities and its ranks with ``IN``); then they are claimed by id, and read
back. One transaction, with the round's acks before them.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from ...models import Job
from ..engines import Engine
from ..flow import QueueLimits
from ..rows import JOB_COLUMNS_SQL, jobs_from_rows
from .limited import NOT_PAUSED_ROW, not_paused
from .returning import update_ids_returning
from .tables import JOB, cursor_and_engine, marks


def unkeyed_due(engine: Engine) -> str:
    """SQL true for a due job without a concurrency key, as the claim index reads it."""
    ranks = f" AND {engine.claim_ranks}" if engine.claim_ranks else ""
    return f"status = 'ready' AND {engine.unkeyed}{ranks} AND run_at <= {engine.now}"


def picked_ids(
    using: str,
    queue_limits: Sequence[tuple[str, int]] | None,
    limit: int,
    limits: Mapping[str, QueueLimits],
) -> list[int]:
    """Lock and return the ids of the due plain jobs a round may take, passing over locked ones."""
    cursor, engine = cursor_and_engine(using)
    lock = f"ORDER BY {engine.claim_order} LIMIT %s {engine.skip_locked_in_place}"
    due = unkeyed_due(engine)
    if queue_limits is None:
        others = f"AND queue NOT IN ({marks(list(limits))}) " if limits else ""
        cursor.execute(
            f"SELECT id FROM {JOB} WHERE {due} {others}AND {NOT_PAUSED_ROW} {lock}", [*limits, limit]
        )
        return [row[0] for row in cursor.fetchall()]
    branches: list[str] = []
    params: list[Any] = []
    for queue, share in queue_limits:
        if queue in limits:
            continue
        branches.append(
            f"(SELECT id, {engine.claim_order} FROM {JOB} WHERE {due} AND queue = %s "
            f"AND {not_paused('%s')} {lock})"
        )
        params += [queue, queue, min(share, limit)]
    if not branches:
        return []
    if len(branches) == 1:
        cursor.execute(branches[0][1:-1], params)
    else:
        cursor.execute(f"{' UNION ALL '.join(branches)} ORDER BY 2, 3, 1 LIMIT %s", [*params, limit])
    return [row[0] for row in cursor.fetchall()]


def claim_ids(using: str, sets: str, set_params: Sequence[Any], ids: Sequence[int]) -> list[Job]:
    """Claim the jobs ``ids``, which this transaction has locked, with ``sets``; return them."""
    return jobs_from_rows(using, update_ids_returning(using, JOB, sets, set_params, ids, JOB_COLUMNS_SQL))
