"""Changes that return their rows, where the database has no ``RETURNING`` (MySQL, MariaDB's UPDATE).

Each is three statements in one transaction (the caller's, or one of its
own): a locking read of the ids of the rows the change picks, in id order,
so that two such changes lock what they share in the same order; the change
by those ids, which the locks keep as they were read; and a read of what it
returns. Passing over locked rows (``SKIP LOCKED``) or waiting on them is the
caller's ``lock``, as it would be in a subquery of the one statement.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from django.db import transaction

from .tables import ROWS_PER_STATEMENT, batched, cursor_and_engine, marks


def locked_ids(
    using: str,
    table: str,
    where: str,
    params: Sequence[Any],
    lock: str,
    order: str = "id",
    limit: int | None = None,
) -> list[int]:
    """The ids of the rows of ``table`` that ``where`` picks, locked with ``lock``, in ``order``."""
    cursor, _ = cursor_and_engine(using)
    limited = f" LIMIT {int(limit)}" if limit is not None else ""
    cursor.execute(f"SELECT id FROM {table} WHERE {where} ORDER BY {order}{limited} {lock}", list(params))
    return [row[0] for row in cursor.fetchall()]


def update_returning(
    using: str,
    table: str,
    sets: str,
    set_params: Sequence[Any],
    where: str,
    where_params: Sequence[Any],
    returning: str,
    lock: str,
    limit: int | None = None,
) -> list[Any]:
    """``UPDATE table SET sets WHERE where RETURNING returning``, as three statements; its rows.

    ``sets`` may read the row's columns as they were; ``returning`` reads
    them as the change left them, in id order.
    """
    with transaction.atomic(using=using):
        ids = locked_ids(using, table, where, where_params, lock, limit=limit)
        return update_ids_returning(using, table, sets, set_params, ids, returning)


def update_ids_returning(
    using: str, table: str, sets: str, set_params: Sequence[Any], ids: Sequence[int], returning: str
) -> list[Any]:
    """``sets`` on the rows ``ids`` (which this transaction has locked), then their ``returning``."""
    if not ids:
        return []
    cursor, _ = cursor_and_engine(using)
    for chunk in batched(ids, ROWS_PER_STATEMENT):
        cursor.execute(f"UPDATE {table} SET {sets} WHERE id IN ({marks(chunk)})", [*set_params, *chunk])
    return rows_of(using, table, ids, returning)


def rows_of(using: str, table: str, ids: Sequence[int], returning: str) -> list[Any]:
    """``returning`` of the rows ``ids`` of ``table``, in id order."""
    cursor, _ = cursor_and_engine(using)
    rows: list[Any] = []
    for chunk in batched(sorted(ids), ROWS_PER_STATEMENT):
        cursor.execute(f"SELECT {returning} FROM {table} WHERE id IN ({marks(chunk)}) ORDER BY id", chunk)
        rows += cursor.fetchall()
    return rows


def delete_returning(
    using: str,
    table: str,
    where: str,
    params: Sequence[Any],
    returning: str,
    lock: str,
    limit: int | None = None,
) -> list[Any]:
    """``DELETE FROM table WHERE where RETURNING returning``, the rows locked first in id order
    (at most ``limit``): with MariaDB's ``DELETE … RETURNING``, else a read before the delete."""
    cursor, engine = cursor_and_engine(using)
    with transaction.atomic(using=using):
        ids = locked_ids(using, table, where, params, lock, limit=limit)
        if engine.supports_delete_returning:
            return delete_ids_returning(using, table, ids, returning)
        rows = rows_of(using, table, ids, returning)
        for chunk in batched(ids, ROWS_PER_STATEMENT):
            cursor.execute(f"DELETE FROM {table} WHERE id IN ({marks(chunk)})", chunk)
        return rows


def delete_ids_returning(using: str, table: str, ids: Sequence[int], returning: str) -> list[Any]:
    """Delete the rows ``ids`` (locked by this transaction) with MariaDB's ``DELETE … RETURNING``."""
    cursor, _ = cursor_and_engine(using)
    rows: list[Any] = []
    for chunk in batched(sorted(ids), ROWS_PER_STATEMENT):
        cursor.execute(f"DELETE FROM {table} WHERE id IN ({marks(chunk)}) RETURNING {returning}", chunk)
        rows += cursor.fetchall()
    return rows
