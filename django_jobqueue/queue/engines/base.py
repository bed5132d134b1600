"""What one database does differently from another, behind one small class.

Every statement in ``queue/ops/`` is written once. Where databases differ, it
asks the connection's engine: a capability flag chooses between two ways of
doing a thing, and a fragment fills in SQL that is spelt differently. A new
database is one more module here, not a branch at every statement. The flags
are False here, the conservative choice; an engine sets what its database has.
All times are the database's clock.
"""

from __future__ import annotations


class Engine:
    """A database's capabilities and SQL fragments, as ``queue/ops/`` uses them."""

    # Django's ``connection.vendor`` for this database.
    vendor: str = ""

    # -- capability flags --------------------------------------------------------

    # SELECT … FOR UPDATE: a statement locks the rows it read until it commits.
    supports_select_for_update: bool = False
    # … SKIP LOCKED: claimers pass over each other's rows instead of waiting on them.
    supports_skip_locked: bool = False
    # LISTEN / NOTIFY: an insert wakes the workers of its queue at once; without it they poll.
    supports_listen_notify: bool = False
    # Binary COPY FROM STDIN: a large batch streams into the table (``ops.copy``).
    supports_copy: bool = False
    # psycopg's own cursor with server-side binding (``native.bound_cursor``) for per-job statements.
    supports_bound_cursor: bool = False
    # Array parameters unnested by the server, on the bound cursor: a batch of any length in a few parameters.
    supports_array_params: bool = False
    # INSERT / UPDATE / DELETE inside WITH: a worker's acks and next claims as one statement.
    supports_data_modifying_cte: bool = False
    # Several statements sent at once and read back together (psycopg's pipeline): the
    # limited claim's BEGIN, lock, acks, claim and COMMIT in one round trip.
    supports_pipeline: bool = False
    # jsonb_object_agg and ->>: a statement counts many groups once and looks them up by key.
    supports_json_object_agg: bool = False
    # Writers run side by side, each locking only the rows it changed: an open transaction
    # (an atomic job's) blocks no other writer of other rows. Without it, one open write
    # transaction holds the whole database's write lock until it ends.
    supports_concurrent_writers: bool = False
    # The job table is partitioned by status (migration 0011): live jobs and finished ones
    # apart, each with only the indexes read there. A change between the two moves the row
    # (``ops/moves.py``); new jobs that a unique key may keep out go straight to the live one.
    finished_jobs_apart: bool = False
    # A skip scan (distinct values, one index probe each) as one recursive statement; where
    # its correlated probe would read the whole index instead (MariaDB), one statement a probe.
    skip_scan_in_one_statement: bool = True
    # ``a = %s OR id IN (SELECT …)`` read through indexes; where it scans the table (MySQL),
    # the subquery's ids are read first.
    reads_in_subquery_under_or: bool = True
    # RETURNING on an UPDATE, a DELETE, an INSERT: the rows a statement changed, from the
    # statement itself. Without it, the statement is a locking read of the rows' ids, the
    # change by id, and a read of what it returns, in one transaction (``ops/returning.py``).
    supports_update_returning: bool = False
    supports_delete_returning: bool = False
    supports_insert_returning: bool = False
    # INSERT … ON CONFLICT on the partial unique index of live jobs' keys: a row whose key a
    # live job holds is left out. Without it, the holders are read first and a unique index
    # on a generated column refuses the rest (``duplicate_key_code``), read again then.
    supports_on_conflict: bool = False

    # The SQLSTATEs of a statement given up for meeting another transaction (a deadlock,
    # a serialization failure): the transition is run again (``queue/conflicts.py``).
    conflict_codes: frozenset[str] = frozenset()
    # The SQLSTATE of a lock not granted within the transaction's lock timeout.
    lock_timeout_code: str = ""
    # A conflict rolls back the whole transaction, not the statement alone (InnoDB's
    # deadlock): one met inside the caller's transaction cannot be tried again there.
    conflict_ends_transaction: bool = False
    # The error of an insert that a unique index refused (where there is no ON CONFLICT).
    duplicate_key_code: str = ""

    # Statements that run now the work a transaction deferred to its commit (the dependency
    # mark's trigger, migration 0012), then defer it again: a test's transaction never
    # commits, and the testing kit's run_jobs needs what the commit would have done.
    fire_deferred: tuple[str, ...] = ()

    # -- SQL fragments -----------------------------------------------------------

    # Between a CTE's name and AS and its query: the query run once, before the statement's rest.
    materialized: str = "MATERIALIZED "

    # A claim's ORDER BY of due jobs, as the claim index reads it.
    claim_order: str = "priority DESC, run_at, id"
    # The column of ``claim_order`` that ranks jobs by priority, where a claim reads the
    # ranks in use first and names each (``ops/picks.py``); "" where it does not.
    claim_rank: str = ""
    # Index hints of a claim's locking read of one queue, and of every queue ("" for none):
    # where the read locks what it scans, its plan must not depend on the table's statistics.
    queue_claim_hint: str = ""
    any_queue_claim_hint: str = ""
    # The indexes a locking read of expired claims and of finished jobs reads, where a read
    # must name its index (``force_index``): "" leaves it to the database.
    expiry_index: str = ""
    finished_index: str = ""
    # Where a live job's unique key has an index record of its own that a producer's refused
    # insert keeps a shared lock on (MySQL's duplicate check): its column and index, else "".
    live_key: str = ""
    live_key_index: str = ""
    # SQL true for a ready job without a concurrency key, and for one with a key, as the claim
    # indexes read them. The column that tells keyed ready jobs from the others where the claim
    # indexes hold it as a column of its own (MySQL's generated jq_ready_keyed: 0 or 1 for a
    # ready job, NULL for any other), else "".
    keyed_column: str = ""
    unkeyed: str = "status = 'ready' AND concurrency_key IS NULL"
    keyed: str = "status = 'ready' AND concurrency_key IS NOT NULL"
    # A column as a statement names it where the rows it reads are known to be of the kind an
    # index serves: a keyed job's status, a batch job's status, a finished job's time. MySQL's
    # indexes hold generated columns that are NULL outside that kind (migration 0019), which
    # InnoDB reads through their indexes only where a statement names them.
    keyed_status: str = "status"
    batch_status: str = "status"
    finished_at: str = "finished_at"

    # The database's current time, as the statements write it.
    now: str = ""
    # Appended to a subquery that picks rows to delete or move: lock them, passing over locked ones.
    skip_locked: str = ""
    # The same for rows changed in place, their keys untouched (a claim, a rescue, a heartbeat):
    # a lock that an enqueue's ``for_key_share`` of the row does not hold up.
    skip_locked_in_place: str = ""
    # Appended to a read of jobs that must not finish (be deleted or moved) until this
    # transaction commits, while they may still be claimed, beat and changed in place: the
    # dependencies an enqueue names (``ops/dependencies.py``). "" where no row locks exist.
    for_key_share: str = ""
    # Appended to a read whose rows this transaction changes next: lock them, waiting.
    for_update: str = ""
    # Appended to a read of rows another transaction must not delete until this one commits.
    for_share: str = ""
    # A number parameter that may be None: a server that infers parameter types needs a cast.
    nullable_float: str = "%s"
    # A JSON text parameter (or None) where a column's type does not say what it is (a SELECT list).
    json_param: str = "%s"
    # The time at this moment, not at the transaction's start: a rate limit's ledger
    # is written and counted by it after the claim waited for the flow lock.
    clock: str = ""
    # The smaller of two SQL numbers.
    least: str = ""
    # The statement a limited claim runs first, in its transaction: after it, no
    # other limited claim runs until this one commits, and the claim's reads see
    # every one committed before (queue/ops/limited.py).
    flow_lock: str = ""
    # The first statement of a read-only transaction whose reads must all see one
    # snapshot of the database; None where reads are left statement by statement.
    snapshot_read: str | None = None
    # Run right after ``snapshot_read``: a setting for that transaction's plans.
    snapshot_plans: str | None = None
    # A SELECT that sets this transaction's lock timeout from one parameter (text such as
    # '200ms') and returns the one it replaces; None where a lock wait cannot be bounded so.
    lock_timeout_sql: str | None = None
    # Where the lock wait is bounded per session, in whole seconds, not per transaction
    # (``lock_timeout_sql`` None): the session variable that bounds it (MySQL's).
    session_lock_wait: str | None = None
    # ``with_lock_timeout``'s template: a value read once, which sets the lock timeout first.
    with_lock_timeout_template: str = ""
    # A SELECT that sets synchronous_commit for the rest of the transaction, from
    # one parameter (a worker's rounds: JOBQUEUE["WORKER_SYNCHRONOUS_COMMIT"]);
    # None where the database has no such setting.
    commit_mode_sql: str | None = None
    # ``str.format`` templates for ``now_plus``, ``json_push`` and ``json_pop``.
    now_plus_template: str = ""
    # ``moment_plus``'s, and a parameter holding a time read from the database: where a claim
    # cannot return its rows (MySQL), its pick reads the claim's moment and deadline.
    moment_plus_template: str = ""
    moment_param: str = "%s"
    json_push_template: str = ""
    json_pop_template: str = ""
    clock_minus_template: str = ""
    # An attempt history's pieces (``ops/history.py``): a JSON object of key, value
    # pairs; a stored time as ISO 8601 text; the seconds from a stored time to now.
    json_object: str = ""
    iso_time_template: str = ""
    seconds_since_template: str = ""
    # The JSON array ``column`` with the JSON value ``value`` appended, its item at
    # index 1 dropped first once it holds ``limit`` items (the first one is kept).
    json_push_bounded_template: str = ""
    # SQL true where the JSON array ``array`` holds the number ``value``.
    json_array_has_template: str = ""

    def error_code(self, cause: BaseException | None) -> str | None:
        """The code of the driver's error ``cause`` (psycopg's ``sqlstate``, psycopg2's ``pgcode``)."""
        code = getattr(cause, "sqlstate", None) or getattr(cause, "pgcode", None)
        return str(code) if code is not None else None

    def is_connection_error(self, cause: BaseException | None) -> bool:
        """Whether the driver's ``cause`` of an OperationalError or InterfaceError is a lost, refused
        or timed-out connection (or a lock not had in time): a write that may succeed if tried again."""
        return True

    def by_id(self, table: str) -> str:
        """``table`` as the target of an ``UPDATE`` of rows picked by their ids."""
        return table

    def delete_by_id(self, table: str) -> str:
        """A ``DELETE`` of rows of ``table`` picked by their ids, up to its ``WHERE``."""
        return f"DELETE FROM {table}"

    def force_index(self, name: str) -> str:
        """The hint that makes a read of a table use its index ``name``; "" where none is needed."""
        return ""

    def pairs(self, count: int) -> str:
        """SQL of ``count`` pairs of parameters that ``(a, b) IN`` may test a row against."""
        return "(VALUES " + ", ".join(["(%s, %s)"] * count) + ")"

    def concat(self, *parts: str) -> str:
        """SQL of the text ``parts`` (SQL expressions) joined; NULL if one is."""
        return "(" + " || ".join(parts) + ")"

    def now_plus(self, seconds_sql: str) -> str:
        """SQL for the database's now plus ``seconds_sql`` (an SQL number) seconds."""
        return self.now_plus_template.format(seconds=seconds_sql)

    def moment_plus(self, moment_sql: str, seconds_sql: str) -> str:
        """SQL for the time ``moment_sql`` plus ``seconds_sql`` seconds, as ``now_plus`` adds them."""
        return self.moment_plus_template.format(moment=moment_sql, seconds=seconds_sql)

    def now_minus(self, seconds_sql: str) -> str:
        """SQL for the database's now minus ``seconds_sql`` seconds."""
        return self.now_plus(f"-({seconds_sql})")

    def clock_minus(self, seconds_sql: str) -> str:
        """SQL for ``clock`` minus ``seconds_sql`` seconds."""
        return self.clock_minus_template.format(seconds=seconds_sql)

    def json_push(self, column: str, value_sql: str) -> str:
        """SQL for the JSON array ``column`` with the string ``value_sql`` appended."""
        return self.json_push_template.format(column=column, value=value_sql)

    def json_pop(self, column: str) -> str:
        """SQL for the JSON array ``column`` less its last item."""
        return self.json_pop_template.format(column=column)

    def iso_time(self, column: str) -> str:
        """SQL for the time in ``column`` as ISO 8601 text with its UTC offset."""
        return self.iso_time_template.format(column=column)

    def seconds_since(self, column: str) -> str:
        """SQL for the seconds from the time in ``column`` to now, to the millisecond."""
        return self.seconds_since_template.format(column=column)

    def json_push_bounded(self, column: str, value_sql: str, limit: int) -> str:
        """SQL for the JSON array ``column`` with the JSON ``value_sql`` appended, at most ``limit`` long.

        A full array loses its second item, so that its first one stays.
        """
        return self.json_push_bounded_template.format(column=column, value=value_sql, limit=int(limit))

    def json_array_has(self, array: str, value: str) -> str:
        """SQL true where the JSON array ``array`` (an SQL expression) holds the number ``value``."""
        return self.json_array_has_template.format(array=array, value=value)

    def with_lock_timeout(self, value_sql: str) -> str:
        """SQL of ``value_sql`` that first sets the transaction's lock timeout from one more parameter.

        The value is read before the statement locks any row that depends on
        it; from then on, a lock not granted within the timeout ends the
        statement (``lock_timeout_code``). Only where ``lock_timeout_sql`` is.
        """
        return self.with_lock_timeout_template.format(value=value_sql)

    def in_rows(self, column: str, subquery: str) -> str:
        """SQL true where ``column`` is among the rows of ``subquery``, a SELECT in parentheses.

        With array parameters it is ``column = ANY(ARRAY(subquery))``:
        PostgreSQL reads the subquery once, before the statement, into an
        array an index can look the column up in, also as one arm of an OR.
        As ``column IN (subquery)`` its planner may run the subquery again per
        row (a nested loop, or a subplan no index serves).
        """
        if self.supports_array_params:
            return f"{column} = ANY(ARRAY{subquery})"
        return f"{column} IN {subquery}"

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.vendor}>"
