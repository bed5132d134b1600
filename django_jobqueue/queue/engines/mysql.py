"""MySQL and MariaDB: row locks that skip, no LISTEN, no ``UPDATE … RETURNING``, no partial index.

InnoDB locks every index record a locking read scans, not only the rows it
returns: each claim reads an index whose leading columns its ``WHERE`` fixes
(migrations 0018 and 0019 add them, with generated columns where a partial
index does elsewhere), so that a claim locks the rows it takes and few others. A
statement that must return what it changed is a locking read of the rows'
ids, the change by id and a read of the rows (``ops/returning.py``), in one
transaction. A deadlock rolls back the whole transaction, not one statement.
Times are UTC, as Django stores them under ``USE_TZ``. MariaDB has
``INSERT … RETURNING``; MySQL has not.
"""

from __future__ import annotations

from typing import Any

from .base import Engine

# The table of the flow lock's one row (migration 0018 makes it): MySQL has no lock
# held to a transaction's end but a row's.
FLOW_LOCK_TABLE = "django_jobqueue_flowlock"


_TRY_AGAIN = frozenset({"1040", "1053", "1205", "1213", "1317", "1927"})


class MySQLEngine(Engine):
    vendor = "mysql"

    supports_select_for_update = True
    supports_skip_locked = True
    supports_concurrent_writers = True
    # A deadlock (1213) rolls back the whole transaction; a lock wait timeout (1205)
    # the statement alone, InnoDB's default (innodb_rollback_on_timeout off).
    conflict_codes = frozenset({"1213"})
    lock_timeout_code = "1205"
    conflict_ends_transaction = True
    duplicate_key_code = "1062"

    # MySQL materializes a CTE that is read more than once of its own accord, and has no word for it.
    materialized = ""
    # UTC_TIMESTAMP is the statement's start, as NOW() is, not the transaction's.
    now = "UTC_TIMESTAMP(6)"
    clock = now
    least = "LEAST"
    # Per session and in whole seconds (MariaDB, MySQL): set and put back around a brief wait.
    session_lock_wait = "innodb_lock_wait_timeout"
    flow_lock = f"SELECT id FROM {FLOW_LOCK_TABLE} WHERE id = 1 FOR UPDATE"
    # The scrape's reads from one snapshot: the next transaction only, set before it starts.
    snapshot_read = "SET TRANSACTION ISOLATION LEVEL REPEATABLE READ, READ ONLY"
    skip_locked = "FOR UPDATE SKIP LOCKED"
    skip_locked_in_place = "FOR UPDATE SKIP LOCKED"
    for_update = "FOR UPDATE"
    # MariaDB has no FOR SHARE; both have this.
    for_share = "LOCK IN SHARE MODE"
    # The claim index's order: priority is read ascending as jq_rank (= -priority),
    # since MariaDB before 10.8 has no descending index, and an index read
    # backwards cannot give priority DESC with run_at, id ascending.
    claim_order = "jq_rank, run_at, id"
    # The claim reads the ranks that hold ready jobs first (a walk of the index), then
    # names each: one range per rank, so that its read stops at run_at <= now in each.
    claim_rank = "jq_rank"
    # The claim indexes of migration 0018, whatever the statistics say: on a small
    # table the optimizer prefers the index of every queue, scanning (and locking,
    # if only for a moment) other queues' rows.
    queue_claim_hint = "FORCE INDEX (jq_claim_idx)"
    any_queue_claim_hint = "FORCE INDEX (jq_claim_any_idx)"
    expiry_index = "jq_expiry_idx"
    # MariaDB reads a recursive CTE's correlated MIN(col) WHERE col > found.value by the
    # whole index (a DEPENDENT SUBQUERY), where the same probe with a constant is one seek.
    skip_scan_in_one_statement = False
    reads_in_subquery_under_or = False
    # The unique key of a live job and its unique index: an ack, which takes the key out
    # of the live ones, locks the key's index record too (``acks.py``).
    live_key = "jq_live_key"
    live_key_index = "jq_live_key_idx"
    finished_index = "jq_finished_idx"
    # The generated columns that the status indexes hold, NULL outside the rows each index
    # serves (migration 0019): a status change moves a row only in the indexes it enters or
    # leaves. MariaDB reads an index of a generated column only where a statement names it,
    # and a claim index best where ``status`` is not named beside it: the optimizer would
    # weigh the expiry index's (status, …) against it on statistics.
    keyed_column = "jq_ready_keyed"
    unkeyed = "jq_ready_keyed = 0"
    keyed = "jq_ready_keyed = 1"
    keyed_status = "jq_key_status"
    batch_status = "jq_batch_status"
    finished_at = "jq_finished_at"
    # ``moment_plus``: a claim by id sets its deadline from the moment its pick read (``ops/picks.py``).
    moment_plus_template = "({moment} + INTERVAL ROUND(({seconds}) * 1000000) MICROSECOND)"
    now_plus_template = moment_plus_template.replace("{moment}", "UTC_TIMESTAMP(6)")
    # A moment read back from the database, passed to it as a parameter.
    moment_param = "CAST(%s AS DATETIME(6))"
    clock_minus_template = "(UTC_TIMESTAMP(6) - INTERVAL ROUND(({seconds}) * 1000000) MICROSECOND)"
    json_push_template = "JSON_ARRAY_APPEND({column}, '$', {value})"
    json_pop_template = (
        "(CASE WHEN JSON_LENGTH({column}) > 0 "
        "THEN JSON_REMOVE({column}, CONCAT('$[', JSON_LENGTH({column}) - 1, ']')) ELSE {column} END)"
    )
    json_object = "JSON_OBJECT"
    iso_time_template = "CONCAT(REPLACE(CAST({column} AS CHAR), ' ', 'T'), '+00:00')"
    seconds_since_template = "ROUND(TIMESTAMPDIFF(MICROSECOND, {column}, UTC_TIMESTAMP(6)) / 1000000, 3)"
    json_push_bounded_template = (
        "JSON_ARRAY_APPEND(CASE WHEN JSON_LENGTH({column}) >= {limit} THEN JSON_REMOVE({column}, '$[1]') "
        "ELSE {column} END, '$', {value})"
    )
    json_array_has_template = "JSON_CONTAINS({array}, CAST({value} AS CHAR))"

    # A write by a list of ids reads the primary key, whatever the statistics say: on a
    # table whose statistics are stale the optimizer scans it whole, and a DELETE waits
    # on (and deadlocks over) every row other transactions hold. A single-table DELETE
    # takes no index hint; the multi-table form does.
    def by_id(self, table: str) -> str:
        return f"{table} FORCE INDEX (PRIMARY)"

    def delete_by_id(self, table: str) -> str:
        return f"DELETE {table} FROM {table} FORCE INDEX (PRIMARY)"

    def force_index(self, name: str) -> str:
        # A locking read scans (and locks) what its plan reads: the plan is not left to statistics.
        return f"FORCE INDEX ({name})"

    def pairs(self, count: int) -> str:
        # Row constructors: MySQL spells a VALUES list ROW(…), MariaDB does not.
        return "(" + ", ".join(["(%s, %s)"] * count) + ")"

    def concat(self, *parts: str) -> str:
        return f"CONCAT({', '.join(parts)})"

    def is_connection_error(self, cause: BaseException | None) -> bool:
        code = self.error_code(cause)
        # The client's own errors (2000-2999: the server gone, lost, unreachable) and the
        # server's that a try later may not meet: too many connections, shutting down, a
        # lock wait timeout, a deadlock, a killed query or connection.
        return code is None or int(code) >= 2000 or code in _TRY_AGAIN

    def error_code(self, cause: BaseException | None) -> str | None:
        """MySQLdb's errors carry the server's error number first."""
        args: Any = getattr(cause, "args", ())
        if args and isinstance(args[0], int):
            return str(args[0])
        return None


class MariaDBEngine(MySQLEngine):
    """MariaDB: MySQL's engine, and RETURNING on INSERT (10.5).

    MariaDB has ``DELETE … RETURNING`` too, but only in the single-table form,
    which takes no index hint: the queue's deletes read their rows' ids by the
    index they name first, as on MySQL (``Engine.delete_by_id``).
    """

    supports_insert_returning = True

    def __repr__(self) -> str:
        return "<MariaDBEngine mysql>"
