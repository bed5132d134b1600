"""Where a database has no partial index (MySQL, MariaDB), what stands in for them, and more.

Django made each partial index of the queue's tables an index of every row
there, and left out the unique constraint on live jobs' keys. This migration
puts in their place the indexes the queue's statements read on InnoDB
(``queue/engines/mysql.py``): generated columns that hold what a partial
index's condition or a descending key part gives elsewhere, and indexes whose
leading columns a claim names with equalities; the unique index of live jobs'
unique keys; text columns that name things compared byte for byte; and the
one-row table whose lock is the flow lock (MySQL has no lock held to a
transaction's end but a row's). Elsewhere it does nothing.

Not atomic: MySQL commits each DDL statement as it runs (``_mysql_ddl.py``).
"""

from django.db import migrations
from django.db.backends.base.schema import BaseDatabaseSchemaEditor
from django.db.migrations.state import StateApps

from ._mysql_ddl import run_ddl

FLOW_LOCK_TABLE = "django_jobqueue_flowlock"
# Byte for byte and without PAD SPACE: MariaDB's name, then MySQL 8's.
BINARY_COLLATIONS = ("utf8mb4_nopad_bin", "utf8mb4_0900_bin")


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


def fit_statements(collation: str) -> list[str]:
    """The DDL that fits the queue's tables to MySQL, after Django's own."""
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


def unfit_statements() -> list[str]:
    """``fit_statements`` undone: Django's tables as its own migrations made them."""
    statements = [f"DROP TABLE {FLOW_LOCK_TABLE}"]
    drops = [f"DROP INDEX {name}" for name, _kind, _columns in _JOB_INDEXES]
    drops += [f"DROP COLUMN {name}" for name, _kind in _JOB_COLUMNS]
    statements.append(f"ALTER TABLE django_jobqueue_job {', '.join(drops)}")
    statements += [f"CREATE INDEX {name} ON {table} ({columns})" for table, name, columns in _PARTIAL_INDEXES]
    statements += [f"ALTER TABLE {table} MODIFY {column} {kind}" for table, column, kind in _NAMES]
    return statements


def _binary_collation(schema_editor: BaseDatabaseSchemaEditor) -> str:
    with schema_editor.connection.cursor() as cursor:
        for name in BINARY_COLLATIONS:
            cursor.execute(
                "SELECT COUNT(*) FROM information_schema.COLLATIONS WHERE COLLATION_NAME = %s", [name]
            )
            if cursor.fetchone()[0]:
                return name
    raise RuntimeError(f"the database has none of the collations {BINARY_COLLATIONS}")


def fit(apps: StateApps, schema_editor: BaseDatabaseSchemaEditor) -> None:
    if schema_editor.connection.features.supports_partial_indexes:
        return
    run_ddl(schema_editor, fit_statements(_binary_collation(schema_editor)))


def unfit(apps: StateApps, schema_editor: BaseDatabaseSchemaEditor) -> None:
    if schema_editor.connection.features.supports_partial_indexes:
        return
    run_ddl(schema_editor, unfit_statements())


class Migration(migrations.Migration):
    atomic = False

    dependencies = [
        ("django_jobqueue", "0017_worker_listen"),
    ]

    operations = [migrations.RunPython(fit, unfit, elidable=False)]
