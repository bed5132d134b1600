"""Enqueue: new jobs inserted as ready, one statement per chunk of rows.

A job whose ``unique_key`` a live job holds is not inserted; that job stands
in for it. A large batch without unique keys goes by COPY instead (``copy.py``).

Every row of one call stores the same ``trace_context`` (``queue/tracing.py``),
or NULL: an untraced insert leaves the column out, so its statement and
parameters are those of a release without traces.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from django.db import IntegrityError, connections, transaction
from django.db.backends.base.base import BaseDatabaseWrapper
from django.db.backends.utils import CursorWrapper

from ...models import Job
from ..conflicts import is_duplicate_key
from ..engines import Engine, engine_for
from ..native import bound_cursor, fetch_rows
from ..rows import (
    JOB_COLUMNS_SQL,
    datetime_as_read,
    job_from_row,
    jobs_from_rows,
    jobs_from_values,
    to_datetime,
)
from .new_jobs import inserted_values, with_trace_context
from .tables import (
    INSERT_COLUMNS,
    JOB,
    LIVE,
    NOTIFY_RETURNING,
    ON_LIVE_KEY_CONFLICT,
    ROWS_PER_STATEMENT,
    TRACE_COLUMN,
    NewJob,
    batched,
    cursor_and_engine,
    marks,
    new_jobs_table,
)


def insert_jobs(
    using: str, new_jobs: Sequence[NewJob], trace_context: Mapping[str, str] | None = None
) -> list[Job]:
    """Insert ``new_jobs`` as ready jobs and return them, in the order given.

    Each row stores ``trace_context`` (NULL for None).

    A job whose ``unique_key`` is held by a live (ready or running) job is not
    inserted; that live job is returned in its place. Concurrent producers of
    one key are safe: the unique index decides, and the loser returns the
    winner's job.
    """
    if not new_jobs:
        return []
    connection = connections[using]
    if len(new_jobs) <= ROWS_PER_STATEMENT:
        return _insert_chunk(connection, new_jobs, trace_context)  # one statement: atomic by itself
    result: list[Job] = []
    with transaction.atomic(using=using):
        for chunk in batched(new_jobs, ROWS_PER_STATEMENT):
            result.extend(_insert_chunk(connection, chunk, trace_context))
    return result


def _insert_chunk(
    connection: BaseDatabaseWrapper, chunk: Sequence[NewJob], trace_context: Mapping[str, str] | None
) -> list[Job]:
    engine = engine_for(connection)
    if not engine.supports_on_conflict and any(new.unique_key is not None for new in chunk):
        return _insert_past_holders(connection, engine, chunk, trace_context)
    if engine.supports_bound_cursor:
        cursor = bound_cursor(connection)
        if len(chunk) > 1 and engine.supports_array_params:
            return _insert_arrays(connection, cursor, chunk, trace_context)
        return _insert_values(connection, engine, cursor, chunk, trace_context)
    return _insert_values(connection, engine, connection.cursor(), chunk, trace_context)


def _insert_values(
    connection: BaseDatabaseWrapper,
    engine: Engine,
    cursor: CursorWrapper,
    chunk: Sequence[NewJob],
    trace_context: Mapping[str, str] | None,
) -> list[Job]:
    """Insert ``chunk`` with one ``INSERT … VALUES`` of a row of parameters per job."""
    run_ats: list[str] = []
    rows: list[list[Any]] = []
    trace_json = None if trace_context is None else json.dumps(trace_context)
    for new in chunk:
        if new.run_at is not None:
            run_at_sql = "%s"
            params_run_at: list[Any] = [connection.ops.adapt_datetimefield_value(new.run_at)]
        elif new.delay:
            run_at_sql, params_run_at = engine.now_plus("%s"), [new.delay]
        else:
            run_at_sql, params_run_at = engine.now, []
        run_ats.append(run_at_sql)
        row = [new.name, new.queue, new.payload_json, new.priority, new.max_attempts]
        row += [new.visibility_timeout, new.timeout, new.concurrency_key, new.concurrency_limit]
        row += [*params_run_at, new.unique_key, new.task_backend]
        if trace_json is not None:
            row.append(trace_json)
        rows.append(row)
    keyed = any(new.unique_key is not None for new in chunk)
    traced = trace_json is not None
    if not engine.supports_insert_returning:
        returned = _insert_row_by_row(connection, engine, cursor, run_ats, rows, keyed, traced)
        return _inserted_jobs(connection, chunk, returned, keyed, trace_context)
    params = [value for row in rows for value in row]
    cursor.execute(_insert_values_sql(engine, tuple(run_ats), keyed, traced), params)
    return _inserted_jobs(connection, chunk, fetch_rows(connection, cursor), keyed, trace_context)


def _insert_row_by_row(
    connection: BaseDatabaseWrapper,
    engine: Engine,
    cursor: CursorWrapper,
    run_ats: Sequence[str],
    rows: Sequence[Sequence[Any]],
    keyed: bool,
    traced: bool,
) -> list[Any]:
    """``_insert_values`` where an insert cannot return its rows (MySQL): one row a statement, each
    id the driver's last, in one transaction; then what RETURNING would have given, read back.

    MySQL does not promise one statement's rows consecutive ids (innodb_autoinc_lock_mode 2,
    its default), so a multi-row insert's ids could not be told from its first.
    """
    ids: list[int] = []
    with transaction.atomic(using=connection.alias):
        for run_at_sql, row in zip(run_ats, rows, strict=True):
            cursor.execute(_insert_values_sql(engine, (run_at_sql,), keyed, traced, returning=False), row)
            ids.append(int(cursor.lastrowid))
        cursor.execute(f"SELECT {_INSERTED_RETURNING} FROM {JOB} WHERE id IN ({marks(ids)}) ORDER BY id", ids)
        return list(cursor.fetchall())


@functools.lru_cache(maxsize=64)
def _insert_values_sql(
    engine: Engine, run_ats: tuple[str, ...], keyed: bool, traced: bool, returning: bool = True
) -> str:
    """``_insert_values``'s statement for rows whose ``run_at`` are these SQL expressions."""
    columns, trace_sql = (INSERT_COLUMNS + TRACE_COLUMN, ", %s") if traced else (INSERT_COLUMNS, "")
    rows_sql = ", ".join(
        f"(%s, %s, %s, %s, 'ready', 0, %s, %s, %s, %s, %s, {run_at_sql}, 0, %s, '', '', {engine.now}, %s"
        f"{trace_sql})"
        for run_at_sql in run_ats
    )
    on_conflict = ON_LIVE_KEY_CONFLICT if keyed and engine.supports_on_conflict else ""
    notify = NOTIFY_RETURNING if engine.supports_listen_notify else ""
    returned = f"RETURNING {_INSERTED_RETURNING}{notify}" if returning else ""
    return f"INSERT INTO {new_jobs_table(engine)} ({columns}) VALUES {rows_sql} {on_conflict} {returned}"


def _insert_past_holders(
    connection: BaseDatabaseWrapper,
    engine: Engine,
    chunk: Sequence[NewJob],
    trace_context: Mapping[str, str] | None,
) -> list[Job]:
    """Insert ``chunk`` where there is no ``ON CONFLICT`` (MySQL): the live holders of its keys are
    read first, and the rest inserted; a key taken meanwhile fails the insert, which is tried again.

    The unique index of live jobs' keys (migration 0018) decides, as it does
    elsewhere: of two producers of one key, one inserts and the other's insert
    waits for it, fails if it committed, and reads the winner's job. The read
    of the holders locks nothing, so a producer's open transaction holds no
    live job's row.
    """
    using = connection.alias
    keys = sorted({new.unique_key for new in chunk if new.unique_key is not None})
    for _attempt in range(10):
        held = _live_jobs_of_keys(using, keys)
        fresh, taken = [], set(held)
        for new in chunk:
            if new.unique_key is None or new.unique_key not in taken:
                fresh.append(new)
                if new.unique_key is not None:
                    taken.add(new.unique_key)
        try:
            # A savepoint: a refused insert leaves the caller's transaction usable.
            with transaction.atomic(using=using):
                cursor = connection.cursor()
                inserted = _insert_values(connection, engine, cursor, fresh, trace_context) if fresh else []
        except IntegrityError as error:
            if not is_duplicate_key(using, error):
                raise
            continue
        by_key = {**held, **{job.unique_key: job for job in inserted if job.unique_key is not None}}
        unkeyed = iter(job for job in inserted if job.unique_key is None)
        return [next(unkeyed) if new.unique_key is None else by_key[new.unique_key] for new in chunk]
    raise RuntimeError(f"unique keys {keys[:5]!r} kept changing hands; enqueue again")


def _live_jobs_of_keys(using: str, keys: Sequence[str]) -> dict[str, Job]:
    """The live job holding each of ``keys`` that one does, by key."""
    cursor, _ = cursor_and_engine(using)
    held: dict[str, Job] = {}
    for chunk in batched(keys, ROWS_PER_STATEMENT):
        cursor.execute(
            f"SELECT {JOB_COLUMNS_SQL} FROM {JOB} WHERE unique_key IN ({marks(chunk)}) AND status IN {LIVE}",
            list(chunk),
        )
        held.update(
            (job.unique_key, job) for job in jobs_from_rows(using, cursor.fetchall()) if job.unique_key
        )
    return held


# The columns an insert returns: what the database chose. The rest of each Job
# comes from what was inserted (``rows.jobs_from_values``), which spares reading
# every column of every row back and converting it.
_INSERTED_RETURNING = "id, run_at, created_at, unique_key"


def _insert_arrays(
    connection: BaseDatabaseWrapper,
    cursor: CursorWrapper,
    chunk: Sequence[NewJob],
    trace_context: Mapping[str, str] | None,
) -> list[Job]:
    """Insert ``chunk`` with one statement whose parameters are one array per column.

    A handful of parameters however many rows, bound by the server
    (``native.bound_cursor``): no long SQL text to build or parse. The path of a
    batch that holds unique keys, which ``ON CONFLICT`` arbitrates.
    """
    keyed = any(new.unique_key is not None for new in chunk)
    on_conflict = ON_LIVE_KEY_CONFLICT if keyed else ""
    # A traced chunk's trace context is one parameter: every row stores the same.
    traced = trace_context is not None
    trace_params = [json.dumps(trace_context)] if traced else []
    table = new_jobs_table(engine_for(connection))
    cursor.execute(
        f"INSERT INTO {table} ({INSERT_COLUMNS}{TRACE_COLUMN if traced else ''}) "
        "SELECT u.name, u.queue, u.payload, u.priority, 'ready', 0, u.max_attempts, u.visibility_timeout, "
        "u.timeout, u.concurrency_key, u.concurrency_limit, "
        "COALESCE(u.run_at, now() + u.delay * interval '1 second'), 0, u.unique_key, '', '', "
        f"now(), u.task_backend{', %s::text::jsonb' if traced else ''} "
        # run_at travels as text: a naive datetime (USE_TZ off) then means the
        # session's time zone, as a naive parameter always has.
        "FROM unnest(%s::text[], %s::text[], %s::text[]::jsonb[], %s::smallint[], %s::integer[], "
        "%s::double precision[], %s::double precision[], %s::text[], %s::integer[], "
        "%s::text[]::timestamptz[], %s::double precision[], %s::text[], %s::text[]) "
        "WITH ORDINALITY AS u(name, queue, payload, priority, max_attempts, visibility_timeout, timeout, "
        "concurrency_key, concurrency_limit, run_at, delay, unique_key, task_backend, position) "
        # Ids are drawn in this order: sorting the returned rows by id restores the chunk's.
        f"ORDER BY u.position {on_conflict} RETURNING {_INSERTED_RETURNING}{NOTIFY_RETURNING}",
        [
            *trace_params,  # the SELECT list's, before the arrays
            [new.name for new in chunk],
            [new.queue for new in chunk],
            [new.payload_json for new in chunk],
            [new.priority for new in chunk],
            [new.max_attempts for new in chunk],
            [new.visibility_timeout for new in chunk],
            [new.timeout for new in chunk],
            [new.concurrency_key for new in chunk],
            [new.concurrency_limit for new in chunk],
            [None if new.run_at is None else new.run_at.isoformat() for new in chunk],
            [new.delay for new in chunk],
            [new.unique_key for new in chunk],
            [new.task_backend for new in chunk],
        ],
    )
    return _inserted_jobs(connection, chunk, fetch_rows(connection, cursor), keyed, trace_context)


def _inserted_jobs(
    connection: BaseDatabaseWrapper,
    chunk: Sequence[NewJob],
    returned: list[Any],
    keyed: bool,
    trace_context: Mapping[str, str] | None,
) -> list[Job]:
    """The jobs of ``chunk``, in its order, from the rows its insert returned (``_INSERTED_RETURNING``)."""
    # Ids grow in the order the rows were inserted; sorting restores that order.
    rows = sorted(returned)
    if len(rows) == len(chunk):
        sources: Sequence[NewJob] = chunk
    else:
        # A taken unique_key kept some rows out: pair each row with the first new job of its key.
        unkeyed = iter(new for new in chunk if new.unique_key is None)
        first_of_key: dict[str, NewJob] = {}
        for new in chunk:
            if new.unique_key is not None:
                first_of_key.setdefault(new.unique_key, new)
        sources = [next(unkeyed) if row[3] is None else first_of_key[row[3]] for row in rows]
    # PostgreSQL's rows come from native.bound_cursor: aware datetimes, as psycopg reads them.
    as_read = _datetime_reader(connection)
    values = (
        {
            **inserted_values(new, row[0], as_read(row[1])),
            "unique_key": row[3],
            "created_at": as_read(row[2]),
        }
        for new, row in zip(sources, rows, strict=True)
    )
    inserted = jobs_from_values(
        connection.alias, with_trace_context(values, trace_context), {"status": "ready"}
    )
    if not keyed:
        return inserted
    return _match_inserted(connection, chunk, inserted, trace_context)


def _datetime_reader(connection: BaseDatabaseWrapper) -> Callable[[Any], Any]:
    """How a datetime of ``_INSERTED_RETURNING`` becomes the ORM's on ``connection``."""
    if engine_for(connection).supports_bound_cursor:
        return functools.partial(datetime_as_read, connection)
    return to_datetime


def _match_inserted(
    connection: BaseDatabaseWrapper,
    chunk: Sequence[NewJob],
    inserted: list[Job],
    trace_context: Mapping[str, str] | None,
) -> list[Job]:
    by_key = {job.unique_key: job for job in inserted if job.unique_key is not None}
    unkeyed = iter(job for job in inserted if job.unique_key is None)
    matched: list[Job] = []
    for new in chunk:
        if new.unique_key is None:
            matched.append(next(unkeyed))
        else:
            if new.unique_key not in by_key:
                by_key[new.unique_key] = _live_job_for_key(connection, new, trace_context)
            matched.append(by_key[new.unique_key])
    return matched


def _live_job_for_key(
    connection: BaseDatabaseWrapper, new: NewJob, trace_context: Mapping[str, str] | None
) -> Job:
    """Return the live job holding ``new.unique_key``, inserting ``new`` if it has gone."""
    using = connection.alias
    cursor, _ = cursor_and_engine(using)
    for _attempt in range(10):
        cursor.execute(
            f"SELECT {JOB_COLUMNS_SQL} FROM {JOB} WHERE unique_key = %s AND status IN {LIVE}",
            [new.unique_key],
        )
        row = cursor.fetchone()
        if row is not None:
            return job_from_row(using, row)
        # The holder finished between our insert and this read: try the insert again.
        with transaction.atomic(using=using):
            again = _insert_chunk(connection, [new], trace_context)
        if again:
            return again[0]
    raise RuntimeError(f"unique_key {new.unique_key!r} kept changing hands; enqueue again")
