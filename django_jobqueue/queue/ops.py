"""Every statement that changes a job or dead-letter row, and nothing else.

Each transition names the state it expects (and, for a claimed job, the claim
it expects) in its ``WHERE`` clause, and reports whether it changed a row: a
lost race is ``False``, never an exception. Every time is the database's clock.
Each function commits on its own (autocommit) unless the caller is inside
``transaction.atomic()``, in which case it joins the caller's transaction.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any, NamedTuple

from django.db import IntegrityError, connections, transaction
from django.db.backends.base.base import BaseDatabaseWrapper
from django.db.backends.utils import CursorDebugWrapper, CursorWrapper

from ..models import DeadLetter, Job, Worker
from .dialects import POSTGRESQL, Dialect, dialect_for
from .native import bound_cursor, fetch_all, fetchall
from .rows import (
    JOB_COLUMNS,
    JOB_COLUMNS_SQL,
    claim_order,
    datetime_as_read,
    datetime_from_db,
    job_from_row,
    jobs_from_native_rows,
    jobs_from_rows,
    jobs_from_values,
)

JOB = Job._meta.db_table
DEAD = DeadLetter._meta.db_table
WORKER = Worker._meta.db_table
LIVE = "('ready', 'running')"
CLAIM_ORDER = "priority DESC, run_at, id"
# Rows per INSERT: well under SQLite's limit of 32,766 bound parameters.
INSERT_CHUNK = 500
# Expired claims handled per statement by tick_timeouts.
TICK_BATCH = 500


class NewJob(NamedTuple):
    """A validated job, ready to insert (see ``QueueClient.push``).

    A named tuple: a batch makes one per job, and a tuple is made several
    times faster than a frozen dataclass.
    """

    name: str
    queue: str
    payload_json: str
    priority: int
    max_attempts: int
    visibility_timeout: float
    run_at: datetime | None  # an absolute time, or None for now + delay
    delay: float
    unique_key: str | None
    task_backend: str = ""  # the TASKS alias of a Django Tasks job; "" for a @job job
    # The payload as decoding payload_json gives it, where that is known without decoding.
    payload: dict[str, Any] | None = None


@dataclass(frozen=True)
class Fence:
    """The claim a completion expects: the job, its owner and (if known) the claim token."""

    job_id: int
    worker_id: str
    claim_token: int | None = None

    def where(self) -> tuple[str, list[Any]]:
        sql = "id = %s AND status = 'running' AND locked_by = %s"
        params: list[Any] = [self.job_id, self.worker_id]
        if self.claim_token is not None:
            sql += " AND claim_token = %s"
            params.append(self.claim_token)
        return sql, params


def batched(items: Sequence[Any], size: int) -> Iterator[Sequence[Any]]:
    for start in range(0, len(items), size):
        yield items[start : start + size]


def _cursor(using: str) -> tuple[CursorWrapper, Dialect]:
    connection = connections[using]
    return connection.cursor(), dialect_for(connection)


# -- enqueue -----------------------------------------------------------------


def insert_jobs(using: str, new_jobs: Sequence[NewJob]) -> list[Job]:
    """Insert ``new_jobs`` as ready jobs and return them, in the order given.

    A job whose ``unique_key`` is held by a live (ready or running) job is not
    inserted; that live job is returned in its place. Concurrent producers of
    one key are safe: the unique index decides, and the loser returns the
    winner's job.
    """
    if not new_jobs:
        return []
    connection = connections[using]
    if len(new_jobs) <= INSERT_CHUNK:
        return _insert_chunk(connection, new_jobs)  # one statement: atomic by itself
    result: list[Job] = []
    with transaction.atomic(using=using):
        for chunk in batched(new_jobs, INSERT_CHUNK):
            result.extend(_insert_chunk(connection, chunk))
    return result


def _insert_chunk(connection: BaseDatabaseWrapper, chunk: Sequence[NewJob]) -> list[Job]:
    dialect = dialect_for(connection)
    if dialect.vendor == "postgresql":
        cursor = bound_cursor(connection)
        if len(chunk) > 1:
            return _insert_chunk_postgresql(connection, cursor, chunk)
        return _insert_values(connection, dialect, cursor, chunk)
    return _insert_values(connection, dialect, connection.cursor(), chunk)


def _insert_values(
    connection: BaseDatabaseWrapper, dialect: Dialect, cursor: CursorWrapper, chunk: Sequence[NewJob]
) -> list[Job]:
    """Insert ``chunk`` with one ``INSERT … VALUES`` of a row of parameters per job."""
    run_ats: list[str] = []
    params: list[Any] = []
    for new in chunk:
        if new.run_at is not None:
            run_at_sql = "%s"
            params_run_at: list[Any] = [connection.ops.adapt_datetimefield_value(new.run_at)]
        elif new.delay:
            run_at_sql, params_run_at = dialect.now_plus("%s"), [new.delay]
        else:
            run_at_sql, params_run_at = dialect.now, []
        run_ats.append(run_at_sql)
        params += [new.name, new.queue, new.payload_json, new.priority, new.max_attempts]
        params += [new.visibility_timeout, *params_run_at, new.unique_key, new.task_backend]
    keyed = any(new.unique_key is not None for new in chunk)
    cursor.execute(_insert_values_sql(dialect, tuple(run_ats), keyed), params)
    return _inserted_jobs(connection, chunk, fetchall(connection, cursor), keyed)


@functools.lru_cache(maxsize=64)
def _insert_values_sql(dialect: Dialect, run_ats: tuple[str, ...], keyed: bool) -> str:
    """``_insert_values``'s statement for rows whose ``run_at`` are these SQL expressions."""
    rows_sql = ", ".join(
        f"(%s, %s, %s, %s, 'ready', 0, %s, %s, {run_at_sql}, 0, %s, '', '', {dialect.now}, %s)"
        for run_at_sql in run_ats
    )
    on_conflict = (
        f"ON CONFLICT (unique_key) WHERE status IN {LIVE} AND unique_key IS NOT NULL DO NOTHING"
        if keyed
        else ""
    )
    notify = NOTIFY_RETURNING if dialect.vendor == "postgresql" else ""
    return (
        f"INSERT INTO {JOB} (name, queue, payload, priority, status, attempts, max_attempts, "
        "visibility_timeout, run_at, claim_token, unique_key, last_error, last_traceback, "
        f"created_at, task_backend) VALUES {rows_sql} {on_conflict} "
        f"RETURNING {_INSERTED_RETURNING}{notify}"
    )


# The columns an insert returns: what the database chose. The rest of each Job
# comes from what was inserted (``rows.jobs_from_values``), which spares reading
# every column of every row back and converting it.
_INSERTED_RETURNING = "id, run_at, created_at, unique_key"


def _insert_chunk_postgresql(
    connection: BaseDatabaseWrapper, cursor: CursorWrapper, chunk: Sequence[NewJob]
) -> list[Job]:
    """Insert ``chunk`` with one statement whose parameters are one array per column.

    A handful of parameters however many rows, bound by the server
    (``native.bound_cursor``): no long SQL text to build or parse. The path of a
    batch that holds unique keys, which ``ON CONFLICT`` arbitrates.
    """
    keyed = any(new.unique_key is not None for new in chunk)
    on_conflict = (
        f"ON CONFLICT (unique_key) WHERE status IN {LIVE} AND unique_key IS NOT NULL DO NOTHING"
        if keyed
        else ""
    )
    cursor.execute(
        f"INSERT INTO {JOB} (name, queue, payload, priority, status, attempts, max_attempts, "
        "visibility_timeout, run_at, claim_token, unique_key, last_error, last_traceback, "
        "created_at, task_backend) "
        "SELECT u.name, u.queue, u.payload, u.priority, 'ready', 0, u.max_attempts, u.visibility_timeout, "
        "COALESCE(u.run_at, now() + u.delay * interval '1 second'), 0, u.unique_key, '', '', now(), "
        "u.task_backend "
        # run_at travels as text: a naive datetime (USE_TZ off) then means the
        # session's time zone, as a naive parameter always has.
        "FROM unnest(%s::text[], %s::text[], %s::text[]::jsonb[], %s::smallint[], %s::integer[], "
        "%s::double precision[], %s::text[]::timestamptz[], %s::double precision[], %s::text[], %s::text[]) "
        "WITH ORDINALITY AS u(name, queue, payload, priority, max_attempts, visibility_timeout, run_at, "
        "delay, unique_key, task_backend, position) "
        # Ids are drawn in this order: sorting the returned rows by id restores the chunk's.
        f"ORDER BY u.position {on_conflict} RETURNING {_INSERTED_RETURNING}{NOTIFY_RETURNING}",
        [
            [new.name for new in chunk],
            [new.queue for new in chunk],
            [new.payload_json for new in chunk],
            [new.priority for new in chunk],
            [new.max_attempts for new in chunk],
            [new.visibility_timeout for new in chunk],
            [None if new.run_at is None else new.run_at.isoformat() for new in chunk],
            [new.delay for new in chunk],
            [new.unique_key for new in chunk],
            [new.task_backend for new in chunk],
        ],
    )
    return _inserted_jobs(connection, chunk, fetchall(connection, cursor), keyed)


def _inserted_jobs(
    connection: BaseDatabaseWrapper, chunk: Sequence[NewJob], returned: list[Any], keyed: bool
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
    inserted = jobs_from_values(
        connection.alias,
        (
            {
                **_inserted_values(new, row[0], as_read(row[1])),
                "unique_key": row[3],
                "created_at": as_read(row[2]),
            }
            for new, row in zip(sources, rows, strict=True)
        ),
        {"status": "ready"},
    )
    if not keyed:
        return inserted
    return _match_inserted(connection, chunk, inserted)


def _datetime_reader(connection: BaseDatabaseWrapper) -> Callable[[Any], Any]:
    """How a datetime of ``_INSERTED_RETURNING`` becomes the ORM's on ``connection``."""
    if connection.vendor == "postgresql":
        return functools.partial(datetime_as_read, connection)
    return datetime_from_db


def _match_inserted(
    connection: BaseDatabaseWrapper, chunk: Sequence[NewJob], inserted: list[Job]
) -> list[Job]:
    by_key = {job.unique_key: job for job in inserted if job.unique_key is not None}
    unkeyed = iter(job for job in inserted if job.unique_key is None)
    matched: list[Job] = []
    for new in chunk:
        if new.unique_key is None:
            matched.append(next(unkeyed))
        else:
            if new.unique_key not in by_key:
                by_key[new.unique_key] = _live_job_for_key(connection, new)
            matched.append(by_key[new.unique_key])
    return matched


def _live_job_for_key(connection: BaseDatabaseWrapper, new: NewJob) -> Job:
    """Return the live job holding ``new.unique_key``, inserting ``new`` if it has gone."""
    using = connection.alias
    cursor, _ = _cursor(using)
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
            again = _insert_chunk(connection, [new])
        if again:
            return again[0]
    raise RuntimeError(f"unique_key {new.unique_key!r} kept changing hands; enqueue again")


def _inserted_values(new: NewJob, job_id: int, run_at: datetime) -> dict[str, Any]:
    """The values of the Job returned for ``new``, inserted as ``job_id``, beyond those its batch shares."""
    return {
        "id": job_id,
        "name": new.name,
        "queue": new.queue,
        # The payload as the database gives it back: a flat one's copy, or its JSON decoded.
        "payload": new.payload if new.payload is not None else json.loads(new.payload_json),
        "priority": new.priority,
        "max_attempts": new.max_attempts,
        "visibility_timeout": new.visibility_timeout,
        "run_at": run_at,
        "task_backend": new.task_backend,
    }


def copies(using: str, count: int) -> bool:
    """True where a batch of ``count`` jobs, none with a unique_key, is written by ``copy_jobs``."""
    return count >= COPY_MIN_ROWS and connections[using].vendor == "postgresql"


# The smallest batch written with COPY on PostgreSQL: below some 15 rows, its
# fixed cost (a transaction and three more round trips) outweighs one INSERT's.
COPY_MIN_ROWS = 16

# What COPY writes of each job, in binary, and each column's type. The other
# columns take their database defaults (NULL; worker_ids '[]'), as on the
# INSERT path; unique_key is NULL, a batch with keys goes the INSERT way.
_COPY_COLUMNS = (
    ("id", "int8"),
    ("name", "varchar"),
    ("queue", "varchar"),
    # jsonb's binary input is a version byte and the JSON text: sent as bytes, the text is not re-encoded.
    ("payload", "bytea"),
    ("priority", "int2"),
    ("status", "varchar"),
    ("attempts", "int4"),
    ("max_attempts", "int4"),
    ("visibility_timeout", "float8"),
    ("run_at", "timestamptz"),
    ("claim_token", "int8"),
    ("last_error", "text"),
    ("last_traceback", "text"),
    ("created_at", "timestamptz"),
    ("task_backend", "varchar"),
)
_COPY_SQL = f"COPY {JOB} ({', '.join(column for column, _ in _COPY_COLUMNS)}) FROM STDIN (FORMAT BINARY)"
_COPY_TYPES = [kind for _, kind in _COPY_COLUMNS]
_JSONB_VERSION = b"\x01"

# A batch's ids and clock in one round trip. The ids come from the id
# column's own sequence (an identity GENERATED BY DEFAULT, so explicit ids are
# accepted), as many as rows; now() is the transaction's, as on the INSERT path.
_RESERVE_IDS = (
    "SELECT now(), "
    "(SELECT array_agg(nextval((SELECT pg_get_serial_sequence(%s, %s)::regclass))) "
    "FROM generate_series(1, %s))"
)
# Each queue of a batch woken once. Like every notification, it is sent when
# the transaction commits, and dropped if it rolls back.
_NOTIFY_QUEUES = "SELECT count(pg_notify(%s, queue)) FROM unnest(%s::text[]) AS queue"


def copy_jobs(using: str, count: int, new_jobs: Iterable[NewJob]) -> list[Job]:
    """Insert the ``count`` jobs ``new_jobs`` yields with one binary COPY; return them in order.

    ``new_jobs`` may validate each job as it is asked for it: the jobs then
    stream to the server while the next ones are checked, and the two
    processes work side by side. A job that fails its check raises out of
    the COPY, which is abandoned, and the transaction (a savepoint inside the
    caller's) rolls back: the batch writes nothing, as a bad batch never does.
    None may hold a unique_key (``ON CONFLICT`` is for INSERT) or a naive
    ``run_at`` (which the INSERT path lets the session's time zone place).

    The rows are those the INSERT path writes: ids from the table's sequence,
    growing in order; ``created_at`` the transaction's now() and ``run_at``
    the job's own or that now() plus its delay, so every time is the
    database's clock. One transaction (the caller's, if there is one), so the
    jobs exist if and only if it commits; each queue is notified once, on commit.
    """
    connection = connections[using]
    with transaction.atomic(using=using):
        cursor = bound_cursor(connection)
        cursor.execute(_RESERVE_IDS, [JOB, Job._meta.pk.column, count])
        now, ids = cursor.fetchone()
        ids.sort()
        clock = _BatchClock(connection, now)
        queues: set[str] = set()
        with _logged(cursor, _COPY_SQL), connection.wrap_database_errors, cursor.copy(_COPY_SQL) as copy:
            copy.set_types(_COPY_TYPES)
            # Each Job is built as its row leaves, while the server stores the rows before it.
            jobs = jobs_from_values(
                using,
                _copied_rows(copy.write_row, clock, ids, new_jobs, queues),
                {"status": "ready", "created_at": clock.as_read(now)},
            )
        cursor.execute(_NOTIFY_QUEUES, [NOTIFY_CHANNEL, sorted(queues)])
    return jobs


def _copied_rows(
    write: Callable[[Sequence[Any]], None],
    clock: _BatchClock,
    ids: list[int],
    new_jobs: Iterable[NewJob],
    queues: set[str],
) -> Iterator[dict[str, Any]]:
    """Write each job's row to the COPY, then yield the values its Job holds beyond the shared ones."""
    as_read, now, add_queue = clock.as_read, clock.now, queues.add
    for job_id, new in zip(ids, new_jobs, strict=True):
        if new.unique_key is not None:
            raise ValueError("a job with a unique_key cannot be copied; insert it")
        run_at = clock.run_at(new)
        write(
            (
                job_id,
                new.name,
                new.queue,
                _JSONB_VERSION + new.payload_json.encode(),
                new.priority,
                "ready",
                0,
                new.max_attempts,
                new.visibility_timeout,
                run_at,
                0,
                "",
                "",
                now,
                new.task_backend,
            )
        )
        add_queue(new.queue)
        yield _inserted_values(new, job_id, as_read(run_at))


class _BatchClock:
    """A batch's times, all reckoned from one reading of the database's clock."""

    def __init__(self, connection: BaseDatabaseWrapper, now: datetime) -> None:
        self.now = now
        self._connection = connection
        # Delays are added in UTC: in a zone with daylight saving, a day is not always 24 hours.
        self._now_utc = now.astimezone(UTC)
        self._run_at_after: dict[float, datetime] = {0.0: now}
        self._read: dict[datetime, datetime] = {}

    def run_at(self, new: NewJob) -> datetime:
        """The ``run_at`` written for ``new``: its own, or now plus its delay."""
        if new.run_at is not None:
            if new.run_at.utcoffset() is None:
                raise ValueError("a naive run_at cannot be copied; insert it")
            return new.run_at
        run_at = self._run_at_after.get(new.delay)
        if run_at is None:
            run_at = self._run_at_after[new.delay] = self._now_utc + timedelta(seconds=new.delay)
        return run_at

    def as_read(self, value: datetime) -> datetime:
        """``value`` as the ORM would read it back (``rows.datetime_as_read``); a batch has few."""
        read = self._read.get(value)
        if read is None:
            read = self._read[value] = datetime_as_read(self._connection, value)
        return read


def _logged(cursor: CursorWrapper, sql: str) -> AbstractContextManager[None]:
    """Log ``sql`` with the queries (``DEBUG``, ``CaptureQueriesContext``) as Django logs its own."""
    if isinstance(cursor, CursorDebugWrapper):
        return cursor.debug_sql(sql)
    return nullcontext()


# -- claim -------------------------------------------------------------------


def claim(
    using: str,
    worker_id: str,
    queue_limits: Sequence[tuple[str, int]] | None,
    limit: int | None,
    visibility_timeout: float | None,
) -> list[Job]:
    """ready -> running for up to ``limit`` due jobs; return them in claim order.

    ``queue_limits`` takes at most that many jobs from each named queue (one
    index scan each); ``None`` takes from every queue. ``limit`` caps the total.
    Each claimed job gets a new claim token, one more attempt, this owner and a
    deadline of now + ``visibility_timeout`` (or the job's own timeout); its
    ``started_at`` (first claim only) and ``last_attempted_at`` become now.
    """
    return claim_round(using, worker_id, [], True, queue_limits, limit, visibility_timeout)[1]


def claim_round(
    using: str,
    worker_id: str,
    completions: Sequence[tuple[int, int, str | None]],
    keep: bool,
    queue_limits: Sequence[tuple[str, int]] | None,
    limit: int | None,
    visibility_timeout: float | None,
) -> tuple[set[tuple[int, int]], list[Job]]:
    """``complete_many(completions)`` then ``claim(...)`` (skipped when ``limit`` is 0), atomically.

    A worker's round: its finished jobs and the claims of the slots they free
    in one commit. On PostgreSQL that is one statement, and so one round trip
    and no ``BEGIN`` / ``COMMIT`` of its own; on SQLite, one transaction.
    """
    dialect = dialect_for(connections[using])
    claim_args = (worker_id, queue_limits, limit, visibility_timeout)
    if dialect.vendor != "postgresql":
        if not completions:
            return set(), _claim_sqlite(using, *claim_args) if limit != 0 else []
        with transaction.atomic(using=using):
            done = complete_many(using, worker_id, completions, keep)
            claimed = _claim_sqlite(using, *claim_args) if limit != 0 else []
        return done, claimed
    if limit == 0:
        return complete_many(using, worker_id, completions, keep), []
    sql, params = _claim_statement(POSTGRESQL, *claim_args)
    if completions:
        # One statement for both, one result set: the claimed rows, then a row per ack marked by its status.
        ack_sql, ack_params = _complete_statement_postgresql(worker_id, completions, keep)
        sql = (
            f"WITH acked AS ({ack_sql}), claimed AS ({sql}) "
            f"SELECT {JOB_COLUMNS_SQL} FROM claimed UNION ALL SELECT {_ACKED_COLUMNS_SQL} FROM acked"
        )
        params = ack_params + params
    rows = fetch_all(using, sql, params)
    acked = {(row[0], row[_TOKEN_INDEX]) for row in rows if row[_STATUS_INDEX] == "acked"}
    claimed = jobs_from_native_rows(using, [row for row in rows if row[_STATUS_INDEX] != "acked"])
    return acked, sorted(claimed, key=claim_order)


# An ack's row in the claim round's result: its id and claim token, 'acked' as its status.
_STATUS_INDEX, _TOKEN_INDEX = JOB_COLUMNS.index("status"), JOB_COLUMNS.index("claim_token")
_ACKED_COLUMNS_SQL = ", ".join(
    {"id": "id", "claim_token": "claim_token", "status": "'acked'"}.get(column, "NULL")
    for column in JOB_COLUMNS
)


def _claim_sqlite(
    using: str,
    worker_id: str,
    queue_limits: Sequence[tuple[str, int]] | None,
    limit: int | None,
    visibility_timeout: float | None,
) -> list[Job]:
    cursor, dialect = _cursor(using)
    sql, params = _claim_statement(dialect, worker_id, queue_limits, limit, visibility_timeout)
    cursor.execute(sql, params)
    return sorted(jobs_from_rows(using, cursor.fetchall()), key=claim_order)


def _claim_statement(
    dialect: Dialect,
    worker_id: str,
    queue_limits: Sequence[tuple[str, int]] | None,
    limit: int | None,
    visibility_timeout: float | None,
) -> tuple[str, list[Any]]:
    """The claim's ``UPDATE … RETURNING`` every column (see ``claim``)."""
    # The SET clause's: owner, deadline, and the owner again for a Task job's worker_ids.
    params: list[Any] = [worker_id, visibility_timeout, worker_id]
    due = f"status = 'ready' AND run_at <= {dialect.now}"
    if queue_limits is None:
        picked = f"SELECT id FROM {JOB} WHERE {due} ORDER BY {CLAIM_ORDER} LIMIT %s {dialect.skip_locked}"
        params.append(limit)
    else:
        branches = []
        for queue, queue_limit in queue_limits:
            branches.append(
                f"SELECT * FROM (SELECT id, priority, run_at FROM {JOB} WHERE {due} AND queue = %s "
                f"ORDER BY {CLAIM_ORDER} LIMIT %s {dialect.skip_locked}) AS branch"
            )
            params += [queue, queue_limit]
        picked = "SELECT id FROM (" + " UNION ALL ".join(branches) + ") AS picked"
        if limit is not None:
            picked += f" ORDER BY {CLAIM_ORDER} LIMIT %s"
            params.append(limit)
    # A typed parameter: psycopg's server-side binding needs one where the value may be None.
    seconds = "CAST(%s AS double precision)" if dialect.vendor == "postgresql" else "%s"
    deadline = dialect.now_plus(f"COALESCE({seconds}, visibility_timeout)")
    # A Task job keeps its worker per attempt (TaskResult.worker_ids); a @job job does not pay for it.
    worker_ids = (
        f"CASE WHEN task_backend = '' THEN worker_ids ELSE {dialect.json_push('worker_ids', '%s')} END"
    )
    sql = (
        f"UPDATE {JOB} SET status = 'running', attempts = attempts + 1, "
        f"claim_token = claim_token + 1, locked_by = %s, locked_until = {deadline}, "
        f"started_at = COALESCE(started_at, {dialect.now}), last_attempted_at = {dialect.now}, "
        f"worker_ids = {worker_ids} WHERE id IN ({picked}) RETURNING {JOB_COLUMNS_SQL}"
    )
    return sql, params


# -- completions ---------------------------------------------------------------


def complete(using: str, fence: Fence, result_json: str | None, keep: bool) -> bool:
    """running -> done (kept for pruning) or deleted; False if this claim is no longer current."""
    cursor, dialect = _cursor(using)
    where, params = fence.where()
    if keep:
        cursor.execute(
            f"UPDATE {JOB} SET status = 'done', finished_at = {dialect.now}, "
            f"locked_until = NULL, result = %s WHERE {where}",
            [result_json, *params],
        )
    else:
        cursor.execute(f"DELETE FROM {JOB} WHERE {where}", params)
    return cursor.rowcount == 1


def complete_many(
    using: str, worker_id: str, completions: Sequence[tuple[int, int, str | None]], keep: bool
) -> set[tuple[int, int]]:
    """running -> done (or deleted) for each ``(job_id, claim_token, result_json)`` of ``worker_id``,
    one statement per batch; return the ``(job_id, claim_token)`` of the claims completed.

    Each row is fenced as ``complete`` fences it, by its owner and its own claim
    token: a claim that expired and was re-claimed, or whose job was cancelled,
    is left alone and not returned.
    """
    if not completions:
        return set()
    if connections[using].vendor == "postgresql":
        sql, params = _complete_statement_postgresql(worker_id, completions, keep)
        return {(row[0], row[1]) for row in fetch_all(using, sql, params)}
    cursor, dialect = _cursor(using)
    done: set[tuple[int, int]] = set()
    for chunk in batched(completions, INSERT_CHUNK):
        pairs = ", ".join(["(%s, %s)"] * len(chunk))
        fence_params: list[Any] = [worker_id]
        fence_params += [value for job_id, token, _ in chunk for value in (job_id, token)]
        fence = f"status = 'running' AND locked_by = %s AND (id, claim_token) IN (VALUES {pairs})"
        if keep:
            results = [completion for completion in chunk if completion[2] is not None]
            result_sql, result_params = "NULL", []
            if results:
                # By claim, not by id: a stale ack of the same job in this batch must not lend its result.
                whens = " ".join("WHEN id = %s AND claim_token = %s THEN %s" for _ in results)
                result_sql = f"CASE {whens} END"
                result_params = [value for completion in results for value in completion]
            cursor.execute(
                f"UPDATE {JOB} SET status = 'done', finished_at = {dialect.now}, locked_until = NULL, "
                f"result = {result_sql} WHERE {fence} RETURNING id, claim_token",
                [*result_params, *fence_params],
            )
        else:
            cursor.execute(f"DELETE FROM {JOB} WHERE {fence} RETURNING id, claim_token", fence_params)
        done.update((row[0], row[1]) for row in cursor.fetchall())
    return done


def _complete_statement_postgresql(
    worker_id: str, completions: Sequence[tuple[int, int, str | None]], keep: bool
) -> tuple[str, list[Any]]:
    """``complete_many``'s statement on PostgreSQL: the batch as three arrays, however long it is."""
    ids = [job_id for job_id, _token, _result in completions]
    tokens = [token for _job_id, token, _result in completions]
    fence = f"{JOB}.status = 'running' AND {JOB}.locked_by = %s"
    if keep:
        # Joined on the claim, not the id: a stale ack of the same job must not lend its result.
        sql = (
            f"UPDATE {JOB} SET status = 'done', finished_at = now(), locked_until = NULL, "
            "result = acks.result FROM unnest(%s::bigint[], %s::bigint[], %s::jsonb[]) "
            f"AS acks(id, claim_token, result) WHERE {JOB}.id = acks.id "
            f"AND {JOB}.claim_token = acks.claim_token AND {fence} RETURNING {JOB}.id, {JOB}.claim_token"
        )
        return sql, [ids, tokens, [result for _job_id, _token, result in completions], worker_id]
    sql = (
        f"DELETE FROM {JOB} USING unnest(%s::bigint[], %s::bigint[]) AS acks(id, claim_token) "
        f"WHERE {JOB}.id = acks.id "
        f"AND {JOB}.claim_token = acks.claim_token AND {fence} RETURNING {JOB}.id, {JOB}.claim_token"
    )
    return sql, [ids, tokens, worker_id]


def retry_later(using: str, fence: Fence, delay: float, error: str, traceback: str) -> bool:
    """running -> ready after ``delay`` seconds; False if this claim is no longer current."""
    cursor, dialect = _cursor(using)
    where, params = fence.where()
    cursor.execute(
        f"UPDATE {JOB} SET status = 'ready', run_at = {dialect.now_plus('%s')}, "
        f"locked_by = NULL, locked_until = NULL, last_error = %s, last_traceback = %s "
        f"WHERE {where}",
        [delay, error, traceback, *params],
    )
    return cursor.rowcount == 1


def attempts_of(using: str, fence: Fence) -> tuple[int, int] | None:
    """Return ``(attempts, max_attempts)`` of the claimed job, or None if the claim is gone."""
    cursor, _ = _cursor(using)
    where, params = fence.where()
    cursor.execute(f"SELECT attempts, max_attempts FROM {JOB} WHERE {where}", params)
    row = cursor.fetchone()
    return (row[0], row[1]) if row else None


def bury(using: str, fence: Fence, error: str, traceback: str) -> bool:
    """running -> dead letter; False if this claim is no longer current."""
    where, params = fence.where()
    # FOR UPDATE waits for a concurrent completion of the same job, then
    # re-checks the fence, so a job is never both acked and dead-lettered.
    lock = "FOR UPDATE" if dialect_for(connections[using]).skip_locked else ""
    return _move_to_dead_letters(using, "%s", "%s", where, lock, [error, traceback, *params]) == 1


def extend(using: str, fence: Fence, seconds: float) -> bool:
    """Set a running job's deadline to now + ``seconds``; False if the claim is no longer current."""
    cursor, dialect = _cursor(using)
    where, params = fence.where()
    cursor.execute(
        f"UPDATE {JOB} SET locked_until = {dialect.now_plus('%s')} WHERE {where}",
        [seconds, *params],
    )
    return cursor.rowcount == 1


def release(using: str, fence: Fence) -> bool:
    """running -> ready now, the attempt not counted (a worker handing back work it never ran)."""
    cursor, dialect = _cursor(using)
    where, params = fence.where()
    # The attempt handed back leaves a Task job's worker_ids too, which stay one per attempt.
    worker_ids = f"CASE WHEN task_backend = '' THEN worker_ids ELSE {dialect.json_pop('worker_ids')} END"
    cursor.execute(
        f"UPDATE {JOB} SET status = 'ready', attempts = attempts - 1, locked_by = NULL, "
        f"locked_until = NULL, worker_ids = {worker_ids} WHERE {where}",
        params,
    )
    return cursor.rowcount == 1


def cancel(using: str, job_id: int) -> bool:
    """ready or running -> cancelled; a running job's worker then finds its ack refused."""
    cursor, dialect = _cursor(using)
    cursor.execute(
        f"UPDATE {JOB} SET status = 'cancelled', finished_at = {dialect.now}, "
        f"locked_until = NULL WHERE id = %s AND status IN {LIVE}",
        [job_id],
    )
    return cursor.rowcount == 1


# -- upkeep --------------------------------------------------------------------


def _expired_error_sql() -> str:
    """SQL text for an expired claim's error, built from the row itself.

    The owner is blamed for stopping only if its worker row is gone or fell
    silent before the claim's deadline. A row that beat after the deadline is a
    worker that outlived the claim: a dead worker's last beat always comes
    before the deadline, which every beat pushes past it.
    """
    alive = (
        f"EXISTS (SELECT 1 FROM {WORKER} WHERE {WORKER}.worker_id = {JOB}.locked_by "
        f"AND {WORKER}.last_heartbeat > {JOB}.locked_until)"
    )
    attempt = f"' attempt ' || {JOB}.attempts"
    return (
        f"CASE WHEN {alive} THEN 'claim expired: worker ' || {JOB}.locked_by || ' outlived its claim on' "
        f"|| {attempt} || ' without finishing it (it could not renew the claim or record the outcome)' "
        f"ELSE 'claim expired: worker ' || COALESCE({JOB}.locked_by, '?') || ' stopped without finishing' "
        f"|| {attempt} || ' (killed, hung or cut off from the database)' END"
    )


def tick_timeouts(using: str) -> int:
    """Handle every expired claim: running -> ready, or -> dead letter if its attempts are spent.

    Return how many claims were handled. Safe to run from many workers at once:
    each expired row is handled by exactly one of them.
    """
    handled = 0
    while True:
        moved = _bury_expired(using)
        rescued = _rescue_expired(using)
        handled += moved + rescued
        if moved < TICK_BATCH and rescued < TICK_BATCH:
            return handled


def _expired(dialect: Dialect) -> str:
    return f"status = 'running' AND locked_until < {dialect.now}"


# In both statements below, SKIP LOCKED is the guard: the subquery locks each
# row it picks after re-checking ``where`` on the row's newest version, so the
# outer statement acts on rows nobody can change meanwhile, and a row that
# another transaction holds (an ack committing) is passed over, not waited on.


def _bury_expired(using: str) -> int:
    dialect = dialect_for(connections[using])
    where = f"{_expired(dialect)} AND attempts >= max_attempts"
    return _move_to_dead_letters(
        using,
        _expired_error_sql(),
        # The expiry itself has no traceback; an earlier attempt's is worth keeping, labelled.
        "CASE WHEN last_traceback = '' THEN '' "
        "ELSE 'Traceback of an earlier attempt (' || last_error || '):\n' || last_traceback END",
        f"id IN (SELECT id FROM {JOB} WHERE {where} LIMIT {TICK_BATCH} {dialect.skip_locked})",
        "",
        [],
    )


def _rescue_expired(using: str) -> int:
    cursor, dialect = _cursor(using)
    where = f"{_expired(dialect)} AND attempts < max_attempts"
    cursor.execute(
        f"UPDATE {JOB} SET status = 'ready', last_error = {_expired_error_sql()}, "
        "locked_by = NULL, locked_until = NULL "
        f"WHERE id IN (SELECT id FROM {JOB} WHERE {where} LIMIT {TICK_BATCH} {dialect.skip_locked})",
        [],
    )
    return cursor.rowcount


def _move_to_dead_letters(
    using: str, error_sql: str, traceback_sql: str, where: str, lock: str, params: list[Any]
) -> int:
    """Copy the job rows matching ``where`` to the dead letters and delete them, atomically.

    ``params`` fill ``error_sql``, ``traceback_sql`` and ``where``, in that order.
    """
    cursor, dialect = _cursor(using)
    with transaction.atomic(using=using):
        # Being a write, this statement takes SQLite's write lock before it reads.
        cursor.execute(
            f"INSERT INTO {DEAD} (job_id, name, queue, payload, priority, attempts, max_attempts, "
            "visibility_timeout, enqueued_at, worker_id, error, traceback, failed_at, "
            "started_at, last_attempted_at, task_backend, worker_ids) "
            "SELECT id, name, queue, payload, priority, attempts, max_attempts, visibility_timeout, "
            f"created_at, locked_by, {error_sql}, {traceback_sql}, {dialect.now}, "
            "started_at, last_attempted_at, task_backend, worker_ids "
            f"FROM {JOB} WHERE {where} {lock} RETURNING job_id",
            params,
        )
        job_ids = [row[0] for row in cursor.fetchall()]
        # Deleted by id alone: this transaction holds their locks (the SKIP LOCKED in
        # ``where``, or ``lock``; on SQLite, the write lock) since it read them.
        for ids in batched(job_ids, INSERT_CHUNK):
            cursor.execute(f"DELETE FROM {JOB} WHERE id IN ({', '.join(['%s'] * len(ids))})", ids)
    return len(job_ids)


def _revive_sql(dialect: Dialect) -> str:
    """``INSERT ... SELECT`` of dead letters as ready jobs, attempts reset; the caller adds WHERE.

    The first enqueue time and the last error are kept; the unique key is not
    (a live job may hold it by now).
    """
    return (
        f"INSERT INTO {JOB} (name, queue, payload, priority, status, attempts, max_attempts, "
        "visibility_timeout, run_at, claim_token, unique_key, last_error, last_traceback, "
        "created_at, task_backend) "
        "SELECT name, queue, payload, priority, 'ready', 0, max_attempts, visibility_timeout, "
        f"{dialect.now}, 0, NULL, error, traceback, enqueued_at, task_backend FROM {DEAD}"
    )


def retry_dead_letter(using: str, dead_letter_id: int) -> Job:
    """dead letter -> ready job, attempts reset, in one transaction.

    Raise ``DeadLetter.DoesNotExist`` if it is gone (already retried or
    deleted), so that retrying twice never makes two jobs.
    """
    cursor, dialect = _cursor(using)
    lock = "FOR UPDATE" if dialect.skip_locked else ""
    with transaction.atomic(using=using):
        cursor.execute(
            f"{_revive_sql(dialect)} WHERE id = %s {lock} RETURNING {JOB_COLUMNS_SQL}", [dead_letter_id]
        )
        row = cursor.fetchone()
        if row is None:
            raise DeadLetter.DoesNotExist(f"dead letter {dead_letter_id} does not exist")
        cursor.execute(f"DELETE FROM {DEAD} WHERE id = %s", [dead_letter_id])
    return job_from_row(using, row)


def prune(using: str, older_than: float, batch: int = 5000) -> int:
    """Delete done and cancelled jobs finished more than ``older_than`` seconds ago.

    A job that another transaction is changing (an operator's *retry now*
    making it live again) is left alone, without waiting for it; if it is
    still finished, a later prune deletes it.
    """
    cursor, dialect = _cursor(using)
    finished = f"status IN ('done', 'cancelled') AND finished_at < {dialect.now_minus('%s')}"
    deleted = 0
    while True:
        # PostgreSQL re-checks a row changed meanwhile against the outer WHERE
        # only, never the subquery's: SKIP LOCKED passes over a row that another
        # transaction holds, and the guard repeated outside keeps a row made live
        # from being deleted. SKIP LOCKED also keeps tickers from waiting on each other.
        cursor.execute(
            f"DELETE FROM {JOB} WHERE id IN (SELECT id FROM {JOB} WHERE {finished} "
            f"LIMIT %s {dialect.skip_locked}) AND {finished}",
            [older_than, batch, older_than],
        )
        deleted += cursor.rowcount
        if cursor.rowcount < batch:
            return deleted


# -- wake-up -------------------------------------------------------------------

# The PostgreSQL channel an insert notifies, with the queue name as the payload.
# A constant: a worker LISTENs on it whatever its queues, and filters by payload.
NOTIFY_CHANNEL = "django_jobqueue"

# Appended to an insert's RETURNING list on PostgreSQL: every inserted row
# notifies its queue. The notifications are sent when the transaction commits,
# never for one that rolls back, and PostgreSQL folds identical notifications of
# one transaction into one, so a transaction that enqueues many jobs wakes the
# workers once per queue. A row that a taken unique_key kept out notifies nobody.
NOTIFY_RETURNING = f", pg_notify('{NOTIFY_CHANNEL}', queue)"


# -- heartbeat -----------------------------------------------------------------


def extend_claims(
    using: str, worker_id: str, claims: Sequence[tuple[int, int]], visibility_timeout: float | None
) -> list[int]:
    """Push the deadline of each claim ``(job_id, claim_token)`` of ``worker_id`` to at least
    now + ``visibility_timeout`` (or the job's own timeout), one statement per batch.

    A deadline already further away (``extend_visibility`` from the job itself)
    is kept. Return the ids of the claims still held; a claim that expired and
    was re-claimed, or whose job was cancelled, is not extended.
    """
    cursor, dialect = _cursor(using)
    deadline = dialect.now_plus("COALESCE(%s, visibility_timeout)")
    held: list[int] = []
    for chunk in batched(claims, INSERT_CHUNK):
        pairs = ", ".join(["(%s, %s)"] * len(chunk))
        cursor.execute(
            f"UPDATE {JOB} SET locked_until = CASE WHEN locked_until > {deadline} THEN locked_until "
            f"ELSE {deadline} END WHERE status = 'running' AND locked_by = %s "
            f"AND (id, claim_token) IN (VALUES {pairs}) RETURNING id",
            [visibility_timeout, visibility_timeout, worker_id, *(value for pair in chunk for value in pair)],
        )
        held.extend(row[0] for row in cursor.fetchall())
    return held


# -- worker rows -----------------------------------------------------------------


def register_worker(
    using: str,
    worker_id: str,
    hostname: str,
    pid: int,
    queues_json: str,
    concurrency: int,
    stale_after: float,
) -> bool:
    """Insert the row of a starting worker, or take over the row of an earlier one of that id.

    An earlier row is taken over only when its heartbeat is older than
    ``stale_after`` seconds, or when it is this very process's (same host and
    pid: a retried registration, or a pid reused after a crash). Return False,
    changing nothing, while another live worker holds the id: claims are fenced
    by the bare id, so two live holders could complete each other's jobs.
    """
    cursor, dialect = _cursor(using)
    cursor.execute(
        f"INSERT INTO {WORKER} (worker_id, hostname, pid, queues, concurrency, started_at, last_heartbeat) "
        f"VALUES (%s, %s, %s, %s, %s, {dialect.now}, {dialect.now}) "
        "ON CONFLICT (worker_id) DO UPDATE SET hostname = excluded.hostname, pid = excluded.pid, "
        "queues = excluded.queues, concurrency = excluded.concurrency, "
        "started_at = excluded.started_at, last_heartbeat = excluded.last_heartbeat "
        f"WHERE {WORKER}.last_heartbeat < {dialect.now_minus('%s')} "
        f"OR ({WORKER}.hostname = excluded.hostname AND {WORKER}.pid = excluded.pid)",
        [worker_id, hostname, pid, queues_json, concurrency, stale_after],
    )
    return cursor.rowcount == 1


def live_worker(using: str, worker_id: str) -> tuple[str, int, datetime] | None:
    """Return the ``(hostname, pid, last_heartbeat)`` of the row of ``worker_id``, or None."""
    cursor, _ = _cursor(using)
    cursor.execute(f"SELECT hostname, pid, last_heartbeat FROM {WORKER} WHERE worker_id = %s", [worker_id])
    row = cursor.fetchone()
    return None if row is None else (row[0], row[1], row[2])


def beat_worker(using: str, worker_id: str) -> bool:
    """Set a worker's heartbeat to now; False if its row is gone (pruned as stale)."""
    cursor, dialect = _cursor(using)
    cursor.execute(f"UPDATE {WORKER} SET last_heartbeat = {dialect.now} WHERE worker_id = %s", [worker_id])
    return cursor.rowcount == 1


def unregister_worker(using: str, worker_id: str) -> bool:
    """Delete a stopping worker's row; False if it was already gone."""
    cursor, _ = _cursor(using)
    cursor.execute(f"DELETE FROM {WORKER} WHERE worker_id = %s", [worker_id])
    return cursor.rowcount == 1


def prune_workers(using: str, older_than: float) -> int:
    """Delete the rows of workers whose last heartbeat is more than ``older_than`` seconds old."""
    cursor, dialect = _cursor(using)
    cursor.execute(f"DELETE FROM {WORKER} WHERE last_heartbeat < {dialect.now_minus('%s')}", [older_than])
    return cursor.rowcount


# -- operating: the admin and ``manage.py jobqueue`` ------------------------------

# An SQL ``SELECT`` of dead-letter ids and its parameters: the rows an operator chose.
IdsQuery = tuple[str, Sequence[Any]]


@dataclass(frozen=True)
class JobChange:
    """A job an operator's statement changed."""

    job_id: int
    name: str
    queue: str


@dataclass(frozen=True)
class RetriedDeadLetter:
    """A dead letter put back on its queue: where it came from and the job it became."""

    dead_letter_id: int
    old_job_id: int
    job_id: int
    name: str
    queue: str


@dataclass(frozen=True)
class DeletedDeadLetter:
    dead_letter_id: int
    old_job_id: int
    name: str


def _marks(values: Sequence[Any]) -> str:
    return ", ".join(["%s"] * len(values))


def _notify_queues(using: str, queues: Sequence[str]) -> None:
    """Wake the workers of ``queues`` when this transaction commits (PostgreSQL only)."""
    cursor, dialect = _cursor(using)
    if dialect.vendor != "postgresql":
        return
    for queue in sorted(set(queues)):
        cursor.execute("SELECT pg_notify(%s, %s)", [NOTIFY_CHANNEL, queue])


def run_jobs_now(using: str, job_ids: Sequence[int]) -> list[JobChange]:
    """ready -> due now; cancelled -> ready now with attempts reset. Return the jobs changed.

    A ready job that is already due keeps its ``run_at`` (and so its place in
    line). Running, done and missing jobs are left alone, and so is a cancelled
    job whose ``unique_key`` a live job holds: there is one live job per key.
    """
    if not job_ids:
        return []
    cursor, dialect = _cursor(using)
    now = dialect.now
    key_is_free = (
        f"unique_key IS NULL OR NOT EXISTS (SELECT 1 FROM {JOB} AS holder "
        f"WHERE holder.unique_key = {JOB}.unique_key AND holder.status IN {LIVE})"
    )
    try:
        # A savepoint: a unique-key conflict leaves the caller's transaction usable.
        with transaction.atomic(using=using):
            cursor.execute(
                f"UPDATE {JOB} SET status = 'ready', "
                f"run_at = CASE WHEN run_at > {now} THEN {now} ELSE run_at END, "
                "attempts = CASE WHEN status = 'cancelled' THEN 0 ELSE attempts END, "
                "locked_by = NULL, locked_until = NULL, finished_at = NULL "
                f"WHERE id IN ({_marks(job_ids)}) "
                f"AND (status = 'ready' OR (status = 'cancelled' AND ({key_is_free}))) "
                "RETURNING id, name, queue",
                list(job_ids),
            )
            changed = [JobChange(*row) for row in sorted(cursor.fetchall())]
            _notify_queues(using, [change.queue for change in changed])
    except IntegrityError:
        # Two cancelled jobs of one key in this batch (the NOT EXISTS of each
        # sees the other as still cancelled), or an enqueue of that key racing
        # us. One at a time, the first of a key wins and the others are skipped.
        if len(job_ids) == 1:
            return []
        return [change for job_id in job_ids for change in run_jobs_now(using, [job_id])]
    return changed


def cancel_jobs(using: str, job_ids: Sequence[int]) -> list[JobChange]:
    """ready or running -> cancelled; return the jobs changed.

    Done, cancelled and missing jobs are left alone. The worker of a running job
    then finds its ack refused.
    """
    if not job_ids:
        return []
    cursor, dialect = _cursor(using)
    cursor.execute(
        f"UPDATE {JOB} SET status = 'cancelled', finished_at = {dialect.now}, locked_until = NULL "
        f"WHERE id IN ({_marks(job_ids)}) AND status IN {LIVE} RETURNING id, name, queue",
        list(job_ids),
    )
    return [JobChange(*row) for row in sorted(cursor.fetchall())]


def retry_dead_letter_batch(
    using: str, matching: IdsQuery, after_id: int, limit: int
) -> list[RetriedDeadLetter]:
    """Dead letters -> ready jobs with attempts reset: up to ``limit`` of those in
    ``matching`` whose id is above ``after_id``, lowest ids first, in one transaction.

    Each dead letter is locked, copied and deleted in that transaction, so one
    retried twice (a double submit, two operators) becomes one job: the second
    finds it gone and skips it. Return what was retried, by dead-letter id; an
    empty list means none is left (or, on PostgreSQL, that a concurrent retry of
    the same rows took this whole batch, and goes on with the rest itself).
    Payloads never leave the database.
    """
    cursor, dialect = _cursor(using)
    matching_sql, matching_params = matching
    lock = "FOR UPDATE" if dialect.skip_locked else ""
    with transaction.atomic(using=using):
        # On SQLite this read runs inside the write lock that an IMMEDIATE
        # transaction takes up front (see the getting-started guide).
        cursor.execute(
            f"SELECT id, job_id FROM {DEAD} WHERE id > %s AND id IN ({matching_sql}) "
            f"ORDER BY id LIMIT %s {lock}",
            [after_id, *matching_params, limit],
        )
        picked = cursor.fetchall()
        if not picked:
            return []
        ids = [row[0] for row in picked]
        # Ids are drawn in the order the ORDER BY hands rows to the insert, so
        # the new jobs sorted by id pair up with the dead letters sorted by id.
        cursor.execute(
            f"{_revive_sql(dialect)} WHERE id IN ({_marks(ids)}) ORDER BY id RETURNING id, name, queue", ids
        )
        created = sorted(cursor.fetchall())
        cursor.execute(f"DELETE FROM {DEAD} WHERE id IN ({_marks(ids)})", ids)
        _notify_queues(using, [row[2] for row in created])
    return [
        RetriedDeadLetter(dead_id, old_job_id, job_id, name, queue)
        for (dead_id, old_job_id), (job_id, name, queue) in zip(picked, created, strict=True)
    ]


def delete_dead_letter_batch(
    using: str, matching: IdsQuery, after_id: int, limit: int
) -> list[DeletedDeadLetter]:
    """Delete up to ``limit`` dead letters of ``matching`` whose id is above ``after_id``,
    lowest ids first; return those deleted (an empty list means none is left).

    A dead letter retried or deleted meanwhile is skipped.
    """
    cursor, _ = _cursor(using)
    matching_sql, matching_params = matching
    cursor.execute(
        f"DELETE FROM {DEAD} WHERE id IN (SELECT id FROM {DEAD} WHERE id > %s "
        f"AND id IN ({matching_sql}) ORDER BY id LIMIT %s) RETURNING id, job_id, name",
        [after_id, *matching_params, limit],
    )
    return [DeletedDeadLetter(*row) for row in sorted(cursor.fetchall())]
