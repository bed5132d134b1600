"""What every statement shares: the tables, the job's insert columns, the fence, the wake-up.

Written once here, used by the statement modules of this package.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, NamedTuple, TypeVar

from django.db import DatabaseError, OperationalError, connections, transaction
from django.db.backends.utils import CursorWrapper

from ...models import DeadLetter, Job, Worker
from ..conflicts import is_lock_timeout
from ..engines import Engine, engine_for

T = TypeVar("T")

JOB = Job._meta.db_table
# Where the engine keeps finished jobs apart (``Engine.finished_jobs_apart``), the job
# table's partitions: ready, running and waiting jobs; done and cancelled ones.
LIVE_JOBS = f"{JOB}_live"
FINISHED_JOBS = f"{JOB}_finished"
DEAD = DeadLetter._meta.db_table
WORKER = Worker._meta.db_table
LIVE = "('ready', 'running')"
# Not finished: live, or waiting on a dependency (``depends_on``), which no claim sees.
UNFINISHED = "('ready', 'running', 'waiting')"
CLAIM_ORDER = "priority DESC, run_at, id"
# The columns an insert of a new job writes, in the order its values come.
INSERT_COLUMNS = (
    "name, queue, payload, priority, status, attempts, max_attempts, visibility_timeout, timeout, "
    "concurrency_key, concurrency_limit, run_at, claim_token, unique_key, last_error, last_traceback, "
    "created_at, task_backend"
)
# Written after INSERT_COLUMNS by a traced insert only: an untraced one's statement leaves it NULL.
TRACE_COLUMN = ", trace_context"
# An insert whose unique_key a live job holds writes nothing; the unique index decides.
ON_LIVE_KEY_CONFLICT = (
    f"ON CONFLICT (unique_key) WHERE status IN {LIVE} AND unique_key IS NOT NULL DO NOTHING"
)
# A claimed row still held by the owner that the next parameter names.
HELD_BY = "status = 'running' AND locked_by = %s"
# Rows (or ids, or claims) per statement, for inserts, acks, heartbeats and
# operator batches alike: well under SQLite's limit of 32,766 bound parameters.
ROWS_PER_STATEMENT = 500
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
    timeout: float | None  # seconds one attempt may run; None = no limit
    run_at: datetime | None  # an absolute time, or None for now + delay
    delay: float
    unique_key: str | None
    task_backend: str = ""  # the TASKS alias of a Django Tasks job; "" for a @job job
    # The payload as decoding payload_json gives it, where that is known without decoding.
    payload: dict[str, Any] | None = None
    # Flow control: both None for a job without a key. Last, with defaults, so
    # that the plain jobs of a big batch are still built positionally without them.
    concurrency_key: str | None = None
    concurrency_limit: int | None = None  # set whenever concurrency_key is
    # depends_on: the ids of the jobs this one waits for, sorted and distinct; () for none.
    depends_on: tuple[int, ...] = ()


@dataclass(frozen=True)
class Fence:
    """The claim a completion expects: the job, its owner and (if known) the claim token."""

    job_id: int
    worker_id: str
    claim_token: int | None = None

    def where(self) -> tuple[str, list[Any]]:
        sql = f"id = %s AND {HELD_BY}"
        params: list[Any] = [self.job_id, self.worker_id]
        if self.claim_token is not None:
            sql += " AND claim_token = %s"
            params.append(self.claim_token)
        return sql, params


def new_jobs_table(engine: Engine) -> str:
    """The table new jobs are inserted into: the live jobs' partition where finished ones are apart.

    Its unique index on live jobs' keys is what an insert's ``ON CONFLICT``
    names (a partitioned table has no index of its own that could), and the
    rows skip the routing of an insert through the partitioned table.
    """
    return LIVE_JOBS if engine.finished_jobs_apart else JOB


def live_jobs(engine: Engine) -> str:
    """What a statement that reads or changes live jobs alone (a claim's) names as the job table.

    Where finished jobs are apart, the live jobs' partition under the job
    table's name: the statement's SQL is the same, and PostgreSQL plans one
    table instead of the partitioned one, whose partitions it would otherwise
    weigh and prune at every planning (a limited claim is planned at each run).
    """
    return f"{LIVE_JOBS} AS {JOB}" if engine.finished_jobs_apart else JOB


def batched(items: Sequence[Any], size: int) -> Iterator[Sequence[Any]]:
    """``items`` in consecutive slices of at most ``size``."""
    for start in range(0, len(items), size):
        yield items[start : start + size]


def cursor_and_engine(using: str) -> tuple[CursorWrapper, Engine]:
    """A Django cursor on database ``using``, and that database's engine."""
    connection = connections[using]
    return connection.cursor(), engine_for(connection)


class RowsLocked:
    """A ``WITH`` item that locks the claimed rows of a batch, in id order, passing over those held,
    and the ``WHERE`` term that keeps a statement to the rows it locked.

    ``name`` names the item; ``fence`` is the claims' condition, whose one
    parameter is the owner, ``worker_id``; ``lock`` a ``SKIP LOCKED`` clause of
    the engine's. A batch (of acks, of progress reports) that met a row another
    transaction holds would otherwise wait on it with every other row of the
    batch, for as long as that transaction stays open. With ``lock`` empty
    there is neither item nor term: the caller waits instead, or the engine
    has no row locks, one writer holding the whole database.
    """

    def __init__(
        self, engine: Engine, name: str, ids: Sequence[int], worker_id: str, fence: str, lock: str
    ) -> None:
        self.sql, self.where = "", ""
        self.params: list[Any] = []
        if lock:
            self.sql = (
                f"{name} AS MATERIALIZED (SELECT id FROM {live_jobs(engine)} WHERE id = ANY(%s::bigint[]) "
                f"AND {fence} ORDER BY id {lock})"
            )
            self.params = [list(ids), worker_id]
            self.where = f" AND {JOB}.id IN (SELECT id FROM {name})"

    def before(self, sql: str, params: list[Any]) -> tuple[str, list[Any]]:
        """``sql``'s ``WITH`` items (with ``params``) after this one."""
        if not self.sql:
            return sql, params
        return f"{self.sql}, {sql}", [*self.params, *params]

    def statement(self, sql: str, params: list[Any]) -> tuple[str, list[Any]]:
        """The statement ``sql`` (with ``params``), this item's ``WITH`` first."""
        if not self.sql:
            return sql, params
        return f"WITH {self.sql} {sql}", [*self.params, *params]


def insert_rows(using: str, table: str, columns: Sequence[str], rows: Sequence[Sequence[Any]]) -> None:
    """Insert ``rows`` (each the values of ``columns``) into ``table``, ``ROWS_PER_STATEMENT`` a statement."""
    cursor, _ = cursor_and_engine(using)
    row_marks = f"({marks(columns)})"
    for chunk in batched(rows, ROWS_PER_STATEMENT):
        cursor.execute(
            f"INSERT INTO {table} ({', '.join(columns)}) VALUES {', '.join([row_marks] * len(chunk))}",
            [value for row in chunk for value in row],
        )


# How long a worker's transaction waits on a row that another transaction holds before it
# passes the row over: another worker's round, or a tick, holds one for milliseconds; an
# operator's transaction left open (a cancel in a project's atomic block) as long as it likes.
BRIEF_LOCK_WAIT = "200ms"


def waiting_briefly(using: str, locking: Callable[[bool], T]) -> T:
    """``locking(False)``, statements that lock rows, waiting ``BRIEF_LOCK_WAIT`` at most for any;
    past that, ``locking(True)``: the same statements, passing over the rows still held.

    Run inside the caller's transaction, which keeps the locks to its commit.
    The waits are bounded in a savepoint: a timeout rolls back what
    ``locking(False)`` did, and with it the bound, which is also put back
    once it is done. Where the bound is the session's, in whole seconds
    (MySQL), the wait is a second at most. Where the engine cannot bound a
    wait (SQLite, whose one writer holds every lock), ``locking(False)`` runs
    as it is.
    """
    cursor, engine = cursor_and_engine(using)
    if engine.lock_timeout_sql is None:
        if engine.session_lock_wait is not None:
            return _waiting_briefly_in_session(using, engine.session_lock_wait, locking)
        return locking(False)
    try:
        with transaction.atomic(using=using):
            cursor.execute(engine.lock_timeout_sql, [BRIEF_LOCK_WAIT])
            previous = cursor.fetchone()[0]
            done = locking(False)
            cursor.execute(engine.lock_timeout_sql, [previous])
            return done
    except OperationalError as error:
        if not is_lock_timeout(using, error):
            raise
    return locking(True)


def _waiting_briefly_in_session(using: str, variable: str, locking: Callable[[bool], T]) -> T:
    """``waiting_briefly`` where the lock wait is bounded per session, in whole seconds (MySQL).

    The session's bound is one second for ``locking(False)``, then what it was,
    also when that fails: InnoDB's lock wait timeout (1205) rolls back the
    statement alone, and the savepoint the rest of what it did.
    """
    cursor, _ = cursor_and_engine(using)
    cursor.execute(f"SELECT @@SESSION.{variable}")
    previous = int(cursor.fetchone()[0])
    cursor.execute(f"SET SESSION {variable} = 1")
    try:
        with transaction.atomic(using=using):
            return locking(False)
    except OperationalError as error:
        if not is_lock_timeout(using, error):
            raise
    finally:
        try:
            cursor.execute(f"SET SESSION {variable} = %s", [previous])
        except DatabaseError:
            pass  # the connection is gone, and its setting with it
    return locking(True)


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
# Each queue of a batch woken once; like every notification, sent on commit, dropped on rollback.
NOTIFY_QUEUES = "SELECT count(pg_notify(%s, queue)) FROM unnest(%s::text[]) AS queue"


# The PostgreSQL channel that cancelling a running job notifies, with the
# cancelled running jobs' ids as the payload: a worker's cancel watch LISTENs on
# it and then asks ``ended_claims`` which of its claims ended. Sent on commit.
CANCEL_CHANNEL = "jobqueue_cancel"
# The PostgreSQL channel of a worker's LISTEN probe: a NOTIFY it sends itself through the
# queue's own connection (the producers' path, through a pooler if there is one) and
# expects its listener to hear. The payload is a token only that worker knows; other
# workers hear it and pass it over, without a claim round. A channel of its own, so that
# the workers of a release before it, which treat every payload on NOTIFY_CHANNEL as a
# queue name, never hear it.
PROBE_CHANNEL = "jobqueue_probe"
# PostgreSQL refuses a payload of 8000 bytes or more; the ids are only a nudge,
# so a long list is cut short rather than split over several notifications.
MAX_CANCEL_PAYLOAD = 7900


def keys_not_held(cursor: Any, engine: Engine, live_keys: dict[int, str | None]) -> list[int]:
    """Of the rows this transaction locked (id -> live unique key), in id order, those whose key's
    index record no other transaction holds.

    A producer whose insert met a live job's unique key keeps a shared lock on
    the key's index record until it commits (InnoDB's duplicate check). An
    ack takes the key out of the live ones and would wait on that lock with
    every other ack of the round; the record is locked first, passing over
    those held, and their acks are written again once the producer commits.
    """
    keys = sorted({key for key in live_keys.values() if key is not None})
    free: set[str] = set()
    for chunk in batched(keys, ROWS_PER_STATEMENT):
        cursor.execute(
            f"SELECT {engine.live_key} FROM {JOB} {engine.force_index(engine.live_key_index)} "
            f"WHERE {engine.live_key} IN ({marks(chunk)}) ORDER BY {engine.live_key} {engine.skip_locked}",
            list(chunk),
        )
        free.update(row[0] for row in cursor.fetchall())
    return sorted(job_id for job_id, key in live_keys.items() if key is None or key in free)


def written_ids(ids: Sequence[int]) -> str:
    """``ids`` written into a statement, comma-separated, each as ``int()`` makes it.

    For the writes by id of MySQL's engine, whose driver (mysqlclient) formats
    every parameter in Python: formatting a round's ids was a tenth of it.
    An int written out is its literal, and nothing else can be.
    """
    return ", ".join([str(int(value)) for value in ids])


def marks(values: Sequence[Any]) -> str:
    """``%s`` placeholders, one per value, comma-separated."""
    return ", ".join(["%s"] * len(values))


def notify_queues(using: str, queues: Sequence[str]) -> None:
    """Wake the workers of ``queues`` when this transaction commits, where the engine can."""
    cursor, engine = cursor_and_engine(using)
    if not engine.supports_listen_notify or not queues:
        return
    cursor.execute(NOTIFY_QUEUES, [NOTIFY_CHANNEL, sorted(set(queues))])


def notify_probe(using: str, token: str) -> bool:
    """Send ``token`` on ``PROBE_CHANNEL`` (on commit); False where the engine has no LISTEN/NOTIFY."""
    cursor, engine = cursor_and_engine(using)
    if not engine.supports_listen_notify:
        return False
    cursor.execute("SELECT pg_notify(%s, %s)", [PROBE_CHANNEL, token])
    return True


def notify_cancelled(using: str, job_ids: Sequence[int]) -> None:
    """Tell the workers, when this transaction commits, that running ``job_ids`` were cancelled.

    Where the engine can (PostgreSQL); elsewhere workers find out by polling.
    The payload is the ids, comma-separated, cut at ``MAX_CANCEL_PAYLOAD`` bytes.
    """
    cursor, engine = cursor_and_engine(using)
    if not engine.supports_listen_notify or not job_ids:
        return
    payload = ",".join(map(str, job_ids))
    if len(payload) > MAX_CANCEL_PAYLOAD:
        payload = payload[: payload.rindex(",", 0, MAX_CANCEL_PAYLOAD + 1)]
    cursor.execute("SELECT pg_notify(%s, %s)", [CANCEL_CHANNEL, payload])
