"""Pauses: an operator's word that no worker claims from a queue, kept as a ``QueueState`` row.

A pause is a row, not a worker's flag: every claiming round reads the paused
rows, so a pause reaches the whole fleet at its next round and survives
restarts. Enqueue is untouched by it, and so are jobs already running. These
statements only store the state; the claim is what honours it.
"""

from __future__ import annotations

from contextlib import nullcontext

from django.db import IntegrityError, transaction

from ...models import QueueState
from .tables import cursor_and_engine, notify_queues

STATE = QueueState._meta.db_table


def pause_queue(using: str, queue: str) -> bool:
    """Mark ``queue`` paused; False, changing nothing, if it already was.

    One upsert: of two callers at once exactly one inserts or flips the row
    and gets True. On PostgreSQL the loser waits on the unique index and then
    finds the row paused; on SQLite the single writer orders them.
    """
    cursor, engine = cursor_and_engine(using)
    if not engine.supports_on_conflict:
        # The insert, or else the flip, each of which one caller of two wins.
        try:
            with transaction.atomic(using=using):
                cursor.execute(
                    f"INSERT INTO {STATE} (queue, paused, updated_at) VALUES (%s, TRUE, {engine.now})",
                    [queue],
                )
                return True
        except IntegrityError:
            pass
        cursor.execute(
            f"UPDATE {STATE} SET paused = TRUE, updated_at = {engine.now} WHERE queue = %s AND NOT paused",
            [queue],
        )
        return cursor.rowcount == 1
    cursor.execute(
        f"INSERT INTO {STATE} (queue, paused, updated_at) VALUES (%s, TRUE, {engine.now}) "
        "ON CONFLICT (queue) DO UPDATE SET paused = TRUE, updated_at = excluded.updated_at "
        f"WHERE NOT {STATE}.paused",
        [queue],
    )
    return cursor.rowcount == 1


def resume_queue(using: str, queue: str) -> bool:
    """Mark paused ``queue`` running again; False, changing nothing, if it was not paused.

    A queue with no row was never paused and gets none. On PostgreSQL the
    queue's channel is notified in the same transaction, so that idle workers
    claim at once on commit instead of at their next poll; a resume that
    changed nothing notifies nobody.
    """
    cursor, engine = cursor_and_engine(using)
    # The notification must commit with the resume, or neither does.
    with transaction.atomic(using=using) if engine.supports_listen_notify else nullcontext():
        # Under READ COMMITTED a second resume waits on the row, then re-reads
        # ``paused`` and finds it false: one caller of two gets True.
        cursor.execute(
            f"UPDATE {STATE} SET paused = FALSE, updated_at = {engine.now} WHERE queue = %s AND paused",
            [queue],
        )
        resumed = cursor.rowcount == 1
        if resumed:
            notify_queues(using, [queue])
    return resumed


def paused_queues(using: str) -> list[str]:
    """The names of the paused queues, in order."""
    cursor, _ = cursor_and_engine(using)
    cursor.execute(f"SELECT queue FROM {STATE} WHERE paused ORDER BY queue", [])
    return [row[0] for row in cursor.fetchall()]
