"""The distinct values of a column, found through its index: the choices of the admin's filters.

``SELECT DISTINCT`` over a million jobs scans them all; a skip scan probes the
index once per value found, so the cost follows the number of values.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from django.db import connections, models

from .models import FINISHED_STATUSES, Job, JobStatus
from .queue import engine_for

# A filter's choices stop here: a list longer than this is no use to a person.
MAX_DISTINCT_VALUES = 200


def distinct_values(
    model: type[models.Model], field_name: str, using: str, limit: int = MAX_DISTINCT_VALUES
) -> list[str]:
    """Return up to ``limit`` distinct values of a column, in order.

    A skip scan: one index probe per value found (``MIN(col) WHERE col > previous``),
    instead of the full scan that ``SELECT DISTINCT`` makes over a million rows.
    The column needs an index that starts with it. Where the engine keeps
    finished jobs apart, ``Job``'s indexes on queue and name are the finished
    jobs' alone, and the live jobs are read as ``_live_values`` says.
    """
    connection = connections[using]
    quote = connection.ops.quote_name
    field = model._meta.get_field(field_name)
    if not isinstance(field, models.Field):
        raise TypeError(f"{field_name} is not a column of {model.__name__}")
    table = quote(model._meta.db_table)
    column = quote(str(field.column))
    if not (model is Job and engine_for(connection).finished_jobs_apart):
        return _skip_scan(connection, table, column, "TRUE", limit)
    finished = f"status IN ({_literals(FINISHED_STATUSES)})"
    values = _skip_scan(connection, table, column, finished, limit)
    values += _live_values(connection, table, column, field_name == "queue", limit)
    return sorted(set(values))[:limit]


def _skip_scan(connection: Any, table: str, column: str, where: str, limit: int) -> list[str]:
    """The distinct values of ``column`` among the rows ``where`` picks, one index probe each."""
    if not engine_for(connection).skip_scan_in_one_statement:
        return _skip_scan_probe_by_probe(connection, table, column, where, limit)
    sql = (
        "WITH RECURSIVE found(value, n) AS ("
        f"SELECT MIN({column}), 1 FROM {table} WHERE {where} "
        "UNION ALL "
        f"SELECT (SELECT MIN({column}) FROM {table} WHERE {column} > found.value AND {where}), found.n + 1 "
        "FROM found WHERE found.value IS NOT NULL AND found.n < %s"
        ") SELECT value FROM found WHERE value IS NOT NULL"
    )
    with connection.cursor() as cursor:
        cursor.execute(sql, [limit])
        return [row[0] for row in cursor.fetchall()]


def _skip_scan_probe_by_probe(connection: Any, table: str, column: str, where: str, limit: int) -> list[str]:
    """``_skip_scan`` as one statement per value found (``Engine.skip_scan_in_one_statement``)."""
    values: list[str] = []
    with connection.cursor() as cursor:
        cursor.execute(f"SELECT MIN({column}) FROM {table} WHERE {where}")
        value = cursor.fetchone()[0]
        while value is not None and len(values) < limit:
            values.append(value)
            cursor.execute(f"SELECT MIN({column}) FROM {table} WHERE {column} > %s AND {where}", [value])
            value = cursor.fetchone()[0]
    return values


# The ready jobs whose names a filter offers where no index holds the live jobs' names: the newest.
NEWEST_READY = 2_000


def _live_values(connection: Any, table: str, column: str, is_queue: bool, limit: int) -> list[str]:
    """The values of ``column`` among live jobs, where no index of theirs starts with it.

    An index of the live jobs on queue or name would cost every enqueue and
    every claim an entry. Running and waiting jobs are read through their
    partial indexes. Ready jobs' queues come by a skip scan of the claim's
    indexes, which start with the queue; their names from the newest
    ``NEWEST_READY`` of them alone, read backwards by id: a name whose jobs sit
    deeper in a backlog, and none of which has run yet, is not offered
    (a filter by it, or a search for it, still finds them).
    """
    values = []
    if is_queue:
        for key in ("IS NULL", "IS NOT NULL"):
            ready = f"status = 'ready' AND concurrency_key {key}"
            values += _skip_scan(connection, table, column, ready, limit)
        newest = ""
    else:
        newest = (
            f"UNION SELECT {column} FROM (SELECT {column} FROM {table} WHERE status = 'ready' "
            f"ORDER BY id DESC LIMIT {NEWEST_READY}) AS newest"
        )
    # One SELECT per status: each reads its own partial index.
    busy = " UNION ".join(
        f"SELECT {column} FROM {table} WHERE status = '{status}'"
        for status in (JobStatus.RUNNING, JobStatus.WAITING)
    )
    with connection.cursor() as cursor:
        cursor.execute(f"{busy} {newest}")
        values += [row[0] for row in cursor.fetchall()]
    return values


def _literals(values: Iterable[str]) -> str:
    return ", ".join(f"'{value}'" for value in values)
