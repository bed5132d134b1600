"""MySQL and MariaDB: row locks that skip, no LISTEN, no ``UPDATE … RETURNING``, no partial index.

InnoDB locks every index record a locking read scans, not only the rows it
returns: each claim reads an index whose leading columns its ``WHERE`` fixes
(migration 0018 adds them, with generated columns where a partial index would
do elsewhere), so that a claim locks the rows it takes and few others. A
statement that must return what it changed is a locking read of the rows'
ids, the change by id and a read of the rows (``ops/returning.py``), in one
transaction. A deadlock rolls back the whole transaction, not one statement.
Times are UTC, as Django stores them under ``USE_TZ``. MariaDB has
``INSERT … RETURNING`` and ``DELETE … RETURNING``; MySQL has neither.
"""

from __future__ import annotations

from typing import Any

from .base import Engine

# The table of the flow lock's one row (migration 0018): MySQL has no lock held to a
# transaction's end but a row's.
FLOW_LOCK_TABLE = "django_jobqueue_flowlock"


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

    # UTC_TIMESTAMP is the statement's start, as NOW() is, not the transaction's.
    now = "UTC_TIMESTAMP(6)"
    clock = now
    least = "LEAST"
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
    # Every rank, so that the claim's range read stops at run_at <= now in each
    # rank instead of scanning (and locking) every later job of the queue.
    claim_ranks = "jq_rank IN ({})".format(", ".join(str(rank) for rank in range(-100, 101)))
    # The generated column that the claim indexes hold (MariaDB reads an index of a
    # generated column only where a statement names the column).
    unkeyed = "jq_keyed = 0"
    keyed = "jq_keyed = 1"
    now_plus_template = "(UTC_TIMESTAMP(6) + INTERVAL ROUND(({seconds}) * 1000000) MICROSECOND)"
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

    # Byte for byte and without PAD SPACE: MySQL 8's (MariaDB's is its own name).
    binary_collation = "utf8mb4_0900_bin"
    # Table exists, duplicate column, duplicate key name, no such key or column to
    # drop, no such table, and the flow lock's row there already.
    schema_done_codes = frozenset({"1050", "1060", "1061", "1091", "1051", "1062"})

    def pairs(self, count: int) -> str:
        # Row constructors: MySQL spells a VALUES list ROW(…), MariaDB does not.
        return "(" + ", ".join(["(%s, %s)"] * count) + ")"

    def concat(self, *parts: str) -> str:
        return f"CONCAT({', '.join(parts)})"

    def schema_statements(self) -> list[str]:
        return schema_statements(self.binary_collation)

    def unschema_statements(self) -> list[str]:
        return unschema_statements()

    def error_code(self, cause: BaseException | None) -> str | None:
        """MySQLdb's errors carry the server's error number first."""
        args: Any = getattr(cause, "args", ())
        if args and isinstance(args[0], int):
            return str(args[0])
        return None


class MariaDBEngine(MySQLEngine):
    """MariaDB: MySQL's engine, and RETURNING on INSERT and DELETE (10.5)."""

    supports_insert_returning = True
    supports_delete_returning = True
    binary_collation = "utf8mb4_nopad_bin"

    def __repr__(self) -> str:
        return "<MariaDBEngine mysql>"


# The text columns that name things (a queue, a job, a key, a worker): compared byte
# for byte, as on PostgreSQL and SQLite. Under the server's default collation 'Emails'
# and 'emails' would be one queue, and 'a' and 'a ' one unique key.
# (table, column, its type and nullability as Django created it)
_NAMES = (
    ("django_jobqueue_job", "name", "varchar(200) NOT NULL"),
    ("django_jobqueue_job", "queue", "varchar(63) NOT NULL"),
    ("django_jobqueue_job", "concurrency_key", "varchar(255) NULL"),
    ("django_jobqueue_job", "locked_by", "varchar(255) NULL"),
    ("django_jobqueue_job", "unique_key", "varchar(255) NULL"),
    ("django_jobqueue_deadletter", "name", "varchar(200) NOT NULL"),
    ("django_jobqueue_deadletter", "queue", "varchar(63) NOT NULL"),
    ("django_jobqueue_deadletter", "concurrency_key", "varchar(255) NULL"),
    ("django_jobqueue_deadletter", "worker_id", "varchar(255) NULL"),
    ("django_jobqueue_batch", "on_finish", "varchar(200) NOT NULL"),
    ("django_jobqueue_worker", "worker_id", "varchar(255) NOT NULL"),
    ("django_jobqueue_schedule", "name", "varchar(200) NOT NULL"),
    ("django_jobqueue_schedule", "job", "varchar(200) NOT NULL"),
    ("django_jobqueue_queuestate", "queue", "varchar(63) NOT NULL"),
    ("django_jobqueue_queuestart", "queue", "varchar(63) NOT NULL"),
)

# The job table's indexes that elsewhere hold only the rows their condition names (a
# partial index), which MySQL has not: Django made each an index of every row, whose
# upkeep every write pays for. Dropped, and replaced by those of ``_JOB_INDEXES``.
_PARTIAL_INDEXES = (
    ("django_jobqueue_job", "jobqueue_claim_idx", "queue, priority DESC, run_at, id"),
    ("django_jobqueue_job", "jobqueue_claim_any_idx", "priority DESC, run_at, id"),
    ("django_jobqueue_job", "jobqueue_keyed_claim_idx", "priority DESC, run_at, id"),
    ("django_jobqueue_job", "jobqueue_keyed_queue_idx", "queue, priority DESC, run_at, id"),
    ("django_jobqueue_job", "jobqueue_key_ready_idx", "concurrency_key, priority DESC, run_at, id"),
    ("django_jobqueue_job", "jobqueue_key_running_idx", "concurrency_key"),
    ("django_jobqueue_job", "jobqueue_running_idx", "id"),
    ("django_jobqueue_job", "jobqueue_finished_idx", "finished_at"),
    ("django_jobqueue_job", "jobqueue_waiting_idx", "id"),
    ("django_jobqueue_job", "jobqueue_cancelled_idx", "id"),
    ("django_jobqueue_batch", "jobqueue_batch_open_idx", "id"),
)

# Generated columns of the job table, each what a partial index's condition or a
# descending key part gives elsewhere. Virtual: computed on read, stored in indexes only.
_JOB_COLUMNS = (
    # Ascending rank of priority: the claim's order read forwards (``claim_order``).
    ("jq_rank", "smallint AS (-priority) VIRTUAL"),
    # 1 for a job with a concurrency key: the claims of plain and of keyed jobs apart.
    ("jq_keyed", "tinyint AS (concurrency_key IS NOT NULL) VIRTUAL"),
    # The unique key of a live job, NULL otherwise: a unique index on it is the partial
    # unique index jobqueue_live_unique_key of PostgreSQL and SQLite.
    (
        "jq_live_key",
        "varchar(255) CHARACTER SET utf8mb4 COLLATE {collation} "
        "AS (CASE WHEN status IN ('ready', 'running') THEN unique_key END) VIRTUAL",
    ),
)
# Each claim names the index's leading columns with equality and ranks with IN, so that
# InnoDB reads (and locks) only the due rows it may take.
_JOB_INDEXES = (
    ("jq_claim_idx", "INDEX", "status, jq_keyed, queue, jq_rank, run_at, id"),
    ("jq_claim_any_idx", "INDEX", "status, jq_keyed, jq_rank, run_at, id"),
    ("jq_key_idx", "INDEX", "status, concurrency_key, jq_rank, run_at, id"),
    ("jq_expiry_idx", "INDEX", "status, locked_until"),
    ("jq_finished_idx", "INDEX", "status, finished_at"),
    ("jq_live_key_idx", "UNIQUE INDEX", "jq_live_key"),
)


def schema_statements(collation: str) -> list[str]:
    """The DDL that fits the queue's tables to InnoDB (migration 0018), after Django's own."""
    statements = [
        f"ALTER TABLE {table} MODIFY {column} {kind} COLLATE {collation}" for table, column, kind in _NAMES
    ]
    statements += [f"ALTER TABLE {table} DROP INDEX {name}" for table, name, _columns in _PARTIAL_INDEXES]
    adds = [f"ADD COLUMN {name} {kind.format(collation=collation)}" for name, kind in _JOB_COLUMNS]
    adds += [f"ADD {kind} {name} ({columns})" for name, kind, columns in _JOB_INDEXES]
    statements.append(f"ALTER TABLE django_jobqueue_job {', '.join(adds)}")
    statements.append(f"CREATE TABLE {FLOW_LOCK_TABLE} (id integer PRIMARY KEY)")
    statements.append(f"INSERT INTO {FLOW_LOCK_TABLE} (id) VALUES (1)")
    return statements


def unschema_statements() -> list[str]:
    """``schema_statements`` undone: Django's tables as its own migrations made them."""
    statements = [f"DROP TABLE {FLOW_LOCK_TABLE}"]
    drops = [f"DROP INDEX {name}" for name, _kind, _columns in _JOB_INDEXES]
    drops += [f"DROP COLUMN {name}" for name, _kind in _JOB_COLUMNS]
    statements.append(f"ALTER TABLE django_jobqueue_job {', '.join(drops)}")
    statements += [f"CREATE INDEX {name} ON {table} ({columns})" for table, name, columns in _PARTIAL_INDEXES]
    statements += [f"ALTER TABLE {table} MODIFY {column} {kind}" for table, column, kind in _NAMES]
    return statements
