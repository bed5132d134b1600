"""Changes that return their rows, where the database has no ``RETURNING`` (MySQL, MariaDB's UPDATE).

Each is three statements in one transaction (the caller's, or one of its
own): a locking read of the ids of the rows the change picks, in id order,
so that two such changes lock what they share in the same order; the change
by those ids, which the locks keep as they were read; and a read of what it
returns. Passing over locked rows (``SKIP LOCKED``) or waiting on them is the
caller's ``lock``, as it would be in a subquery of the one statement.

InnoDB locks every index record a locking read scans, and keeps the locks of
rows a sort read before its LIMIT: the read names the index it must use
(``index``, the primary key unless the caller says otherwise), so that a
change of a few ids never scans, and locks, a range of a secondary index.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from django.db import transaction

from .tables import ROWS_PER_STATEMENT, batched, cursor_and_engine, marks, written_ids

# The index a locking read of rows by their ids reads.
BY_ID = "PRIMARY"


def locked_ids(
    using: str,
    table: str,
    where: str,
    params: Sequence[Any],
    lock: str,
    order: str | None = "id",
    limit: int | None = None,
    index: str | None = BY_ID,
) -> list[int]:
    """The ids of the rows of ``table`` that ``where`` picks, locked with ``lock``, in ``order``.

    ``index``: the index the read must use (None: the optimizer's choice);
    ``order`` None reads in that index's order, so that a LIMIT stops the scan.
    """
    cursor, engine = cursor_and_engine(using)
    hint = engine.force_index(index) if index else ""
    ordered = f" ORDER BY {order}" if order else ""
    limited = f" LIMIT {int(limit)}" if limit is not None else ""
    cursor.execute(f"SELECT id FROM {table} {hint} WHERE {where}{ordered}{limited} {lock}", list(params))
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
    index: str | None = BY_ID,
    order: str | None = "id",
) -> list[Any]:
    """``UPDATE table SET sets WHERE where RETURNING returning``, as three statements; its rows.

    ``sets`` may read the row's columns as they were; ``returning`` reads
    them as the change left them, in id order. ``index``, ``order``: as for ``locked_ids``.
    """
    with transaction.atomic(using=using):
        ids = locked_ids(using, table, where, where_params, lock, order, limit, index)
        return update_ids_returning(using, table, sets, set_params, ids, returning)


def update_ids_returning(
    using: str, table: str, sets: str, set_params: Sequence[Any], ids: Sequence[int], returning: str
) -> list[Any]:
    """``sets`` on the rows ``ids`` (which this transaction has locked), then their ``returning``."""
    if not ids:
        return []
    update_ids(using, table, sets, set_params, ids)
    return rows_of(using, table, ids, returning)


def update_ids(using: str, table: str, sets: str, set_params: Sequence[Any], ids: Sequence[int]) -> None:
    """``sets`` on the rows ``ids``, which this transaction has locked."""
    cursor, engine = cursor_and_engine(using)
    for chunk in batched(ids, ROWS_PER_STATEMENT):
        ids_sql = written_ids(chunk)
        cursor.execute(f"UPDATE {engine.by_id(table)} SET {sets} WHERE id IN ({ids_sql})", set_params)


def delete_ids(using: str, table: str, ids: Sequence[int]) -> None:
    """Delete the rows ``ids``, which this transaction has locked."""
    cursor, engine = cursor_and_engine(using)
    for chunk in batched(ids, ROWS_PER_STATEMENT):
        cursor.execute(f"{engine.delete_by_id(table)} WHERE id IN ({written_ids(chunk)})")


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
    index: str | None = BY_ID,
    order: str | None = "id",
) -> list[Any]:
    """``DELETE FROM table WHERE where RETURNING returning``, the rows locked first (at most
    ``limit``; ``index``, ``order`` as for ``locked_ids``), as ``delete_locked_returning`` does."""
    with transaction.atomic(using=using):
        return delete_locked_returning(
            using, table, locked_ids(using, table, where, params, lock, order, limit, index), returning
        )


def delete_locked_returning(using: str, table: str, ids: Sequence[int], returning: str) -> list[Any]:
    """Delete the rows ``ids`` (locked by this transaction); their ``returning``: from the delete
    where the engine has ``DELETE … RETURNING``, else read before it.

    MariaDB's is left unused (``supports_delete_returning``): its single-table
    DELETE takes no index hint, and a list of ids must read the primary key
    (``Engine.delete_by_id``).
    """
    cursor, engine = cursor_and_engine(using)
    if engine.supports_delete_returning:
        rows: list[Any] = []
        for chunk in batched(sorted(ids), ROWS_PER_STATEMENT):
            cursor.execute(f"DELETE FROM {table} WHERE id IN ({marks(chunk)}) RETURNING {returning}", chunk)
            rows += cursor.fetchall()
        return rows
    rows = rows_of(using, table, ids, returning)
    delete_ids(using, table, ids)
    return rows
