"""psycopg's own cursor on Django's PostgreSQL connection, for the statements that run per job.

Django's PostgreSQL cursor binds parameters on the client (each value quoted
into the SQL text in Python), reads every timestamp through a loader written
in Python, and prepares nothing. On the statements an enqueue or a worker's
round runs, that costs more than the database does. ``bound_cursor`` is
psycopg's plain cursor instead: the server binds the parameters, results come
in binary (read by psycopg's C loaders), and, unless
``JOBQUEUE["PREPARED_STATEMENTS"]`` is False, each statement is prepared once
per connection. It is the same connection and the same transaction, inside
Django's cursor wrapper: execute wrappers, the query log, the broken-transaction
check and Django's exceptions apply to it as to any query.

psycopg is imported on first use: a project on SQLite alone need not install it.
"""

from __future__ import annotations

import functools
import weakref
from collections.abc import Sequence
from typing import Any

from django.db import connections
from django.db.backends.base.base import BaseDatabaseWrapper
from django.db.backends.utils import CursorWrapper

from ..conf import jobqueue_settings
from .internals import binary_cursor, driver_connection, driver_cursor, wrap_driver_cursor

# The psycopg cursor of each Django connection (one per thread), kept for its
# next statement: a new cursor looks up its dumpers and loaders again, a fair
# part of what one enqueue costs. It goes with the Django connection, and is
# replaced when Django opens a new database connection.
_bound_cursors: weakref.WeakKeyDictionary[BaseDatabaseWrapper, Any] = weakref.WeakKeyDictionary()

# Django turns preparing off for the whole connection (prepare_threshold None);
# this turns it on for the statements of ``bound_cursor`` alone, which ask for
# it: a statement psycopg would run this many times before preparing it of its
# own accord.
PREPARE_ONLY_WHEN_ASKED = 2**62


def bound_cursor(connection: BaseDatabaseWrapper) -> CursorWrapper:
    """A Django cursor on the PostgreSQL ``connection`` whose parameters the server binds.

    Timestamps come back aware, as psycopg reads them (``rows.datetime_as_read``
    turns them into the ORM's). Do not close it.
    """
    driver = driver_connection(connection)
    cursor = _bound_cursors.get(connection)
    if cursor is None or cursor.closed or cursor.connection is not driver:
        with connection.wrap_database_errors:
            cursor = binary_cursor(_cursor_class(), driver)
        _bound_cursors[connection] = cursor
    if cursor.connection.prepare_threshold is None:
        cursor.connection.prepare_threshold = PREPARE_ONLY_WHEN_ASKED
    return wrap_driver_cursor(connection, cursor)


def fetch_rows(connection: BaseDatabaseWrapper, cursor: CursorWrapper) -> list[Any]:
    """The rows of the statement just run on ``cursor``.

    ``cursor.fetchall()``, without the wrapper function Django's cursor builds for each call.
    """
    with connection.wrap_database_errors:
        rows: list[Any] = driver_cursor(cursor).fetchall()
    return rows


def run_bound(using: str, sql: str, params: Sequence[Any]) -> list[Any]:
    """Run one statement on the ``bound_cursor`` of ``using`` and return its rows."""
    connection = connections[using]
    cursor = bound_cursor(connection)
    cursor.execute(sql, params)
    return fetch_rows(connection, cursor)


@functools.cache
def _cursor_class() -> type[Any]:
    import psycopg  # here: a project on SQLite alone need not install it

    class PreparingCursor(psycopg.Cursor[Any]):
        """psycopg's cursor, preparing each statement unless ``PREPARED_STATEMENTS`` is False.

        A pooler in transaction mode that does not track prepared statements
        (PgBouncer before 1.21, or with ``max_prepared_statements = 0``) hands
        each transaction to any server connection, where the statement may not
        exist: the setting is for such a deployment.
        """

        def execute(
            self, query: Any, params: Any = None, *, prepare: bool | None = None, **options: Any
        ) -> Any:
            if prepare is None:
                prepare = jobqueue_settings.PREPARED_STATEMENTS is not False
            return super().execute(query, params, prepare=prepare, **options)

    return PreparingCursor
