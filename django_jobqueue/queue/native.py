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
import logging
import re
import weakref
from collections.abc import Sequence
from typing import Any

from django.db import connections, transaction
from django.db.backends.base.base import BaseDatabaseWrapper
from django.db.backends.utils import CursorWrapper

from ..conf import jobqueue_settings
from .internals import binary_cursor, driver_connection, driver_cursor, wrap_driver_cursor

logger = logging.getLogger(__name__)

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


def run_in_transaction(using: str, statements: Sequence[tuple[str, Sequence[Any]]]) -> list[list[Any]]:
    """Run ``statements`` in one transaction on the bound cursor of ``using``; return each one's rows.

    Outside ``atomic()`` the ``BEGIN``, the statements and the ``COMMIT`` go out
    in one pipeline, one round trip; if one fails, the transaction is rolled
    back and the error raised as Django raises it. Inside ``atomic()`` they run
    in the caller's transaction, one after the other.
    """
    connection = connections[using]
    if connection.in_atomic_block or connection.queries_logged:
        # In the caller's transaction, or in a transaction of their own where
        # Django logs queries (DEBUG, a test capturing them): one by one, logged.
        with transaction.atomic(using=using):
            cursor = bound_cursor(connection)
            results = []
            for sql, params in statements:
                cursor.execute(sql, params)
                results.append(fetch_rows(connection, cursor) if cursor.description is not None else [])
            return results
    driver = driver_connection(connection)
    cursors = _pipeline_cursors(connection, driver, len(statements))
    with connection.wrap_database_errors:
        try:
            with driver.pipeline():
                driver.execute("BEGIN")
                for raw, (sql, params) in zip(cursors, statements, strict=False):
                    raw.execute(sql, params)
                driver.execute("COMMIT")
            return [raw.fetchall() if raw.description is not None else [] for raw in cursors]
        except BaseException as error:
            _roll_back(driver)
            explained = pooler_error(error) if jobqueue_settings.PREPARED_STATEMENTS is not False else None
            if explained is not None:
                raise explained from error
            raise


def _roll_back(driver: Any) -> None:
    """End a pipelined transaction that failed midway (its COMMIT was skipped with the rest)."""
    import psycopg

    try:
        if driver.pgconn.transaction_status != psycopg.pq.TransactionStatus.IDLE:
            driver.execute("ROLLBACK")
    except psycopg.Error:
        pass  # the connection is gone: so is the transaction, and Django closes it


# The psycopg cursors of a connection's pipelined statements, one per statement
# so that each one's rows can be read after the pipeline, kept like _bound_cursors.
_extra_cursors: weakref.WeakKeyDictionary[BaseDatabaseWrapper, list[Any]] = weakref.WeakKeyDictionary()


def _pipeline_cursors(connection: BaseDatabaseWrapper, driver: Any, count: int) -> list[Any]:
    cursors = _extra_cursors.get(connection)
    if cursors is None or any(c.closed or c.connection is not driver for c in cursors):
        cursors = []
        _extra_cursors[connection] = cursors
    while len(cursors) < count:
        with connection.wrap_database_errors:
            cursors.append(binary_cursor(_cursor_class(), driver))
    if driver.prepare_threshold is None:
        driver.prepare_threshold = PREPARE_ONLY_WHEN_ASKED
    return cursors[:count]


@functools.cache
def _cursor_class() -> type[Any]:
    import psycopg  # here: a project on SQLite alone need not install it

    class PreparingCursor(psycopg.Cursor[Any]):
        """psycopg's cursor, preparing each statement unless ``PREPARED_STATEMENTS`` is False.

        A pooler in transaction mode that does not track prepared statements
        (PgBouncer before 1.21, or with ``max_prepared_statements = 0``) hands
        each transaction to any server connection, where the statement may not
        exist: the setting is for such a deployment, and the error met there
        without it names it (``pooler_error``).
        """

        def execute(
            self, query: Any, params: Any = None, *, prepare: bool | None = None, **options: Any
        ) -> Any:
            if prepare is None:
                prepare = jobqueue_settings.PREPARED_STATEMENTS is not False
            try:
                return super().execute(query, params, prepare=prepare, **options)
            except psycopg.Error as error:
                explained = pooler_error(error) if prepare else None
                if explained is not None:
                    raise explained from error
                raise

    return PreparingCursor


# What a prepared statement meets on a server connection that did not prepare it:
# "prepared statement "_pg3_0" does not exist", "... already exists" (another
# client's of the same name), "bind message supplies 3 parameters, but prepared
# statement "_pg3_0" requires 4" (another client's, of another statement).
_PREPARED_ELSEWHERE = re.compile(r'prepared statement "_pg3_|bind message supplies')
POOLER_ADVICE = (
    "the database answered as a connection pooler in transaction mode does ({error}): "
    "set JOBQUEUE['PREPARED_STATEMENTS'] = False (docs/settings.md#prepared_statements)"
)
_pooler_logged = False


def pooler_error(error: BaseException) -> BaseException | None:
    """The driver's ``error`` told again to name ``PREPARED_STATEMENTS``, if a pooler caused it; else None.

    A pooler in transaction mode that does not track prepared statements
    (PgBouncer before 1.21) runs each transaction on any server connection,
    where the statement this connection prepared is missing, or another
    client's holds its name. The error keeps the driver's class (and its
    SQLSTATE), so Django turns it into its own as before. The first one is
    also logged, once per process.
    """
    global _pooler_logged
    text = str(error)
    if not _PREPARED_ELSEWHERE.search(text) or "PREPARED_STATEMENTS" in text:
        return None
    message = POOLER_ADVICE.format(error=text.strip())
    if not _pooler_logged:
        _pooler_logged = True
        logger.error("%s", message)
    return type(error)(message)
