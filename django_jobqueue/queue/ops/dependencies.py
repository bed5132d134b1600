"""Dependencies (``depends_on``): waiting jobs, their edges, and the release at the last ack.

An edge (``Dependency``) is one outstanding dependency: it exists from the
dependent's enqueue until the dependency is acked (the edge is deleted and the
dependent released, ``waiting`` -> ``ready``, when it was its last) or cancelled
(the dependent is cancelled, and its own dependents after it). A dependency in
the dead letters keeps its edges, under the job id the dead letter keeps; a
retry points them to the new job.

What serialises the statements that meet on one row (docs/workflows.md):

- an enqueue naming job A and A's ack, cancel or burial. On PostgreSQL the
  enqueue reads A ``FOR KEY SHARE``: every way out of the live jobs deletes
  A's row there, and so waits until the enqueue commits (a worker's batch of
  acks passes over A and tries it again), while A's claim, heartbeat, retry
  and progress, which change it in place, go on. The enqueue's commit marks A
  ``has_dependents`` (migration 0012's deferred trigger), holding A's lock
  for the commit alone; the ack that comes after finds the mark, and takes the
  releasing ack. On SQLite the enqueue writes the mark itself, under the
  write lock it holds anyway. Either way an ack committing first is seen as
  ``done``;
- an enqueue naming a dead letter and its retry or deletion: the enqueue reads
  the dead letter ``FOR SHARE``, so the retry re-points (or the deletion
  cancels) after the edge is committed, or the enqueue finds it gone;
- the last two dependencies of one job acked at once: each release locks the
  dependents before it counts their edges, in a statement of its own, so the
  second to get the lock sees the first's deleted edge (READ COMMITTED takes a
  snapshot per statement) and releases the job; ``status = 'waiting'`` keeps
  a release from happening twice. An ack waits on an edge or a dependent a
  moment at most: one that an operator's open transaction holds is passed
  over, and the tick's ``repair_waiting`` mends what that leaves.
"""

from __future__ import annotations

from collections.abc import Sequence

from django.db import transaction

from ...exceptions import DependencyError
from ...models import Dependency, Job
from ..engines import Engine
from .enqueue import insert_jobs
from .moves import Change, run_transition
from .returning import delete_returning, update_ids, update_returning
from .tables import (
    DEAD,
    JOB,
    ROWS_PER_STATEMENT,
    UNFINISHED,
    NewJob,
    batched,
    cursor_and_engine,
    insert_rows,
    marks,
    notify_queues,
    waiting_briefly,
)

EDGE = Dependency._meta.db_table
# The edges' index by dependency (MySQL's locking read of a dependency's edges names it).
EDGE_INDEX = "jobqueue_dep_dependency_idx"
# Repairs per statement of the tick's backstop.
REPAIR_BATCH = 500


def insert_waiting_jobs(
    using: str, new_jobs: Sequence[NewJob], trace_context: dict[str, str] | None = None
) -> list[Job]:
    """Insert ``new_jobs`` and their edges, in one transaction; return the jobs, in order.

    A job left with an outstanding dependency is ``waiting``; one whose every
    dependency is done already is ``ready``. Raise ``DependencyError``, with
    nothing inserted, for a dependency that is cancelled or not in the queue
    (unknown, or finished and pruned: its outcome is not known).
    """
    with transaction.atomic(using=using):
        outstanding = lock_dependencies(using, sorted({d for new in new_jobs for d in new.depends_on}))
        jobs = insert_jobs(using, new_jobs, trace_context)
        # In dependency order: the commit marks the dependencies in the order of the edges
        # (migration 0012), so two enqueues' commits mark them as they locked them, in id order.
        edges = sorted(
            (
                (job.pk, dependency)
                for job, new in zip(jobs, new_jobs, strict=True)
                for dependency in new.depends_on
                if dependency in outstanding
            ),
            key=lambda edge: (edge[1], edge[0]),
        )
        waiting = sorted({dependent for dependent, _ in edges})
        insert_rows(using, EDGE, ("dependent_id", "dependency_id"), edges)
        update_ids(using, JOB, "status = 'waiting'", [], waiting)
    held = set(waiting)
    for job in jobs:
        if job.pk in held:
            job.status = "waiting"
    return jobs


def lock_dependencies(using: str, job_ids: Sequence[int]) -> set[int]:
    """Lock each of ``job_ids`` as a dependency; return those not done yet.

    A live job is kept from finishing until this transaction commits, and
    marked ``has_dependents`` (so that its ack releases): by the commit on
    PostgreSQL, here elsewhere. A dead letter is read ``FOR SHARE`` (so that
    its retry or deletion waits for this transaction). A done job is no edge.
    Raise ``DependencyError`` for a cancelled job and for an id neither in the
    jobs nor in the dead letters.
    """
    cursor, engine = cursor_and_engine(using)
    outstanding: set[int] = set()
    for chunk in batched(job_ids, ROWS_PER_STATEMENT):
        if engine.for_key_share or engine.supports_update_returning:
            cursor.execute(_outstanding_sql(engine, chunk), list(chunk))
            rows = cursor.fetchall()
        else:
            # MySQL: no lock of a row's key alone; the row is locked and marked, as on SQLite.
            live = f"id IN ({marks(chunk)}) AND status IN {UNFINISHED}"
            rows = update_returning(
                using, JOB, "has_dependents = TRUE", [], live, list(chunk), "id", engine.for_update
            )
        outstanding.update(row[0] for row in rows)
    rest = [job_id for job_id in job_ids if job_id not in outstanding]
    for chunk in batched(rest, ROWS_PER_STATEMENT):
        # Statements of their own: a job buried while the update above waited is a dead letter by now.
        cursor.execute(f"SELECT id, status FROM {JOB} WHERE id IN ({marks(chunk)})", list(chunk))
        statuses = dict(cursor.fetchall())
        cancelled = sorted(job_id for job_id, status in statuses.items() if status == "cancelled")
        if cancelled:
            raise DependencyError(f"depends_on names cancelled job(s) {_listed(cancelled)}: they never run")
        missing = [job_id for job_id in chunk if job_id not in statuses]
        if not missing:
            continue
        cursor.execute(
            f"SELECT job_id FROM {DEAD} WHERE job_id IN ({marks(missing)}) {engine.for_share}", missing
        )
        dead = {row[0] for row in cursor.fetchall()}
        unknown = [job_id for job_id in missing if job_id not in dead]
        if unknown:
            raise DependencyError(
                f"depends_on names job(s) {_listed(unknown)} that are not in the queue: unknown, "
                "or finished and pruned (their outcome is not known)"
            )
        outstanding.update(dead)
    return outstanding


def _outstanding_sql(engine: Engine, chunk: Sequence[int]) -> str:
    """The statement that locks the dependencies ``chunk``, live ones in id order, and returns those live.

    In id order, as every enqueue locks them: two enqueues never wait on each other in a circle.
    """
    live = f"id IN ({marks(chunk)}) AND status IN {UNFINISHED}"
    if engine.for_key_share:
        # Read, not written: the row's lock is a key share, which a claim, a heartbeat or a
        # retry (each an UPDATE that leaves its keys alone) does not wait on (module docstring).
        return f"SELECT id FROM {JOB} WHERE {live} ORDER BY id {engine.for_key_share}"
    return (
        f"UPDATE {JOB} SET has_dependents = TRUE WHERE id IN (SELECT id FROM {JOB} WHERE {live} "
        f"ORDER BY id {engine.for_update}) AND status IN {UNFINISHED} RETURNING id"
    )


def _listed(job_ids: Sequence[int]) -> str:
    shown = ", ".join(f"#{job_id}" for job_id in job_ids[:10])
    return shown + (f" and {len(job_ids) - 10} more" if len(job_ids) > 10 else "")


def release_dependents(using: str, job_ids: Sequence[int]) -> int:
    """Drop the edges of ``job_ids``, just acked in this transaction; waiting -> ready for
    each dependent left without one. Return how many were released.

    Run in the ack's transaction: the ack and the release commit together.
    An edge or a dependent that another transaction holds for longer than a
    moment (an operator's cancel of the dependent, still open) is passed over
    rather than waited on with the rest of the ack (``tables.waiting_briefly``):
    should that transaction roll back, the tick's ``repair_waiting`` drops the
    edge to the done job and releases the dependent.
    """
    cursor, _ = cursor_and_engine(using)
    # The lock first, and the edges counted by the next statement's own snapshot:
    # a concurrent ack of the same job's other dependency has then either
    # committed its delete, or waits for this transaction.
    held = waiting_briefly(using, lambda pass_over: _lock_dependents(using, job_ids, pass_over))
    released = 0
    queues: list[str] = []
    for chunk in batched(held, ROWS_PER_STATEMENT):
        rows = run_transition(
            using,
            Change({"status": "'ready'"}),
            f"id IN ({marks(chunk)}) AND status = 'waiting' "
            f"AND NOT EXISTS (SELECT 1 FROM {EDGE} WHERE {EDGE}.dependent_id = {JOB}.id)",
            list(chunk),
            "queue",
            in_place_only=True,
        )
        released += len(rows)
        queues += [row[0] for row in rows]
    notify_queues(using, queues)
    return released


def _lock_dependents(using: str, job_ids: Sequence[int], pass_over: bool) -> list[int]:
    """Delete the edges of ``job_ids`` and lock the dependents still waiting; return their ids.

    ``pass_over``: leave the edges and dependents that another transaction holds.
    """
    cursor, engine = cursor_and_engine(using)
    dependents: set[int] = set()
    for chunk in batched(job_ids, ROWS_PER_STATEMENT):
        edges = f"dependency_id IN ({marks(chunk)})"
        if not engine.supports_update_returning:
            lock = engine.skip_locked if pass_over else engine.for_update
            rows = delete_returning(using, EDGE, edges, list(chunk), "dependent_id", lock, index=EDGE_INDEX)
            dependents.update(row[0] for row in rows)
            continue
        if pass_over:
            edges = f"id IN (SELECT id FROM {EDGE} WHERE {edges} ORDER BY id {engine.skip_locked})"
        cursor.execute(f"DELETE FROM {EDGE} WHERE {edges} RETURNING dependent_id", list(chunk))
        dependents.update(row[0] for row in cursor.fetchall())
    lock = engine.skip_locked if pass_over else engine.for_update
    held: list[int] = []
    for chunk in batched(sorted(dependents), ROWS_PER_STATEMENT):
        cursor.execute(
            f"SELECT id FROM {JOB} WHERE id IN ({marks(chunk)}) AND status = 'waiting' ORDER BY id {lock}",
            list(chunk),
        )
        held += [row[0] for row in cursor.fetchall()]
    return held


def cancel_dependents(using: str, job_ids: Sequence[int]) -> list[tuple[int, str, str, int | None]]:
    """waiting -> cancelled for every job that waits on ``job_ids``, and theirs, transitively.

    Run in the transaction that cancels ``job_ids`` (or deletes their dead
    letters). Return ``(id, name, queue, batch_id)`` of each job cancelled here:
    the caller counts them in their batches.
    """
    cursor, engine = cursor_and_engine(using)
    cancelled: list[tuple[int, str, str, int | None]] = []
    frontier = sorted(set(job_ids))
    while frontier:
        dependents: set[int] = set()
        for chunk in batched(frontier, ROWS_PER_STATEMENT):
            edges = f"dependency_id IN ({marks(chunk)})"
            if engine.supports_delete_returning:
                cursor.execute(f"DELETE FROM {EDGE} WHERE {edges} RETURNING dependent_id", list(chunk))
                rows = cursor.fetchall()
            else:
                rows = delete_returning(
                    using, EDGE, edges, list(chunk), "dependent_id", engine.for_update, index=EDGE_INDEX
                )
            dependents.update(row[0] for row in rows)
        frontier = []
        for chunk in batched(sorted(dependents), ROWS_PER_STATEMENT):
            cancel = Change({"status": "'cancelled'", "finished_at": engine.now})
            where = f"id IN ({marks(chunk)}) AND status = 'waiting'"
            rows = run_transition(using, cancel, where, list(chunk), "id, name, queue, batch_id")
            cancelled += [(row[0], row[1], row[2], row[3]) for row in rows]
            frontier += [row[0] for row in rows]
        forget_waits_of(using, frontier)
    return sorted(cancelled)


def forget_waits_of(using: str, job_ids: Sequence[int]) -> None:
    """Delete the edges on which ``job_ids`` (cancelled in this transaction) waited."""
    cursor, _ = cursor_and_engine(using)
    for chunk in batched(job_ids, ROWS_PER_STATEMENT):
        cursor.execute(f"DELETE FROM {EDGE} WHERE dependent_id IN ({marks(chunk)})", list(chunk))


def repoint_dependencies(using: str, moves: Sequence[tuple[int, int]]) -> set[int]:
    """Point the edges of each ``(old_job_id, new_job_id)`` (a dead letter retried) to the new job;
    return the new jobs that dependents wait on (each now marked ``has_dependents``).

    Run in the retry's transaction, after the dead letter's row is locked or
    deleted: an enqueue that read it ``FOR SHARE`` has committed its edges by then.
    """
    cursor, _ = cursor_and_engine(using)
    awaited: set[int] = set()
    for old, new in moves:
        cursor.execute(f"UPDATE {EDGE} SET dependency_id = %s WHERE dependency_id = %s", [new, old])
        if cursor.rowcount:
            cursor.execute(f"UPDATE {JOB} SET has_dependents = TRUE WHERE id = %s", [new])
            awaited.add(new)
    return awaited


def repair_waiting(using: str) -> int:
    """Drop edges to jobs that are done (or gone, not as dead letters), and release waiting jobs
    that no edge holds; return how many were released.

    The tick's backstop. Every ack, cancel and retry keeps the edges in step in
    its own transaction, but an ack passes over an edge or a dependent that an
    operator's open transaction holds (``release_dependents``): should that
    transaction roll back, this finishes the release. Rows other transactions
    hold are passed over here too, and met again at the next tick.
    """
    cursor, engine = cursor_and_engine(using)
    # Gone and no dead letter: deleted at its ack (KEEP_COMPLETED = 0) or pruned once done;
    # a cancelled job's dependents are cancelled with it, and a dead letter keeps its job's id.
    settled = (
        f"(EXISTS (SELECT 1 FROM {JOB} WHERE {JOB}.id = {EDGE}.dependency_id AND {JOB}.status = 'done') "
        f"OR NOT EXISTS (SELECT 1 FROM {JOB} WHERE {JOB}.id = {EDGE}.dependency_id) "
        f"AND NOT EXISTS (SELECT 1 FROM {DEAD} WHERE {DEAD}.job_id = {EDGE}.dependency_id))"
    )
    free = f"status = 'waiting' AND NOT EXISTS (SELECT 1 FROM {EDGE} WHERE {EDGE}.dependent_id = {JOB}.id)"
    if not engine.supports_update_returning:
        # MySQL: no subquery of the table a DELETE or UPDATE changes; the rows are locked first.
        delete_returning(using, EDGE, settled, [], "id", engine.skip_locked, index=None, order=None)
    else:
        cursor.execute(
            f"DELETE FROM {EDGE} WHERE id IN (SELECT id FROM {EDGE} WHERE {settled} {engine.skip_locked}) "
            f"AND {settled}"
        )
    released = 0
    while True:
        with transaction.atomic(using=using):
            if not engine.supports_update_returning:
                rows = update_returning(
                    using,
                    JOB,
                    "status = 'ready'",
                    [],
                    free,
                    [],
                    "queue",
                    engine.skip_locked,
                    REPAIR_BATCH,
                    index=engine.expiry_index,
                    order=None,
                )
            else:
                cursor.execute(
                    f"UPDATE {JOB} SET status = 'ready' WHERE id IN (SELECT id FROM {JOB} WHERE {free} "
                    f"LIMIT {REPAIR_BATCH} {engine.skip_locked_in_place}) AND {free} RETURNING queue"
                )
                rows = cursor.fetchall()
            notify_queues(using, [row[0] for row in rows])
        released += len(rows)
        if len(rows) < REPAIR_BATCH:
            return released


def flag_dependencies_now(using: str) -> None:
    """Mark now the dependencies this transaction named, which its commit would otherwise mark.

    On PostgreSQL the mark is a deferred trigger (migration 0012); a test's
    transaction never commits, so the testing kit fires it before it claims.
    The trigger is deferred again after, as the rest of the transaction expects.
    """
    cursor, engine = cursor_and_engine(using)
    for statement in engine.fire_deferred:
        cursor.execute(statement)
