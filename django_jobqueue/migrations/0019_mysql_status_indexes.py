"""MySQL and MariaDB: each status index holds the rows it serves in one key, the others under NULL.

InnoDB keeps an entry of every row in every index, and a status change moves
the row in each index whose key holds the status. Before this migration a
claim (``ready`` to ``running``) and an ack (``running`` to ``done``) each
moved the row in six indexes; PostgreSQL's partial indexes hold only the rows
they serve, and a status change there touches only the indexes the row
enters or leaves. Here each index of 0018 that served some statuses only keys
its rows by a generated column that is NULL outside them, so that a row's
entry is changed only where it enters or leaves what the index serves:

- the claim indexes: ``jq_ready_keyed``, 0 or 1 (without or with a
  concurrency key) for a ready job, NULL otherwise, in place of ``status,
  jq_keyed``;
- the index of keyed jobs: ``jq_key_status``, a keyed job's status, NULL for
  a job without a key, in place of ``status``;
- the finished index: ``jq_finished_at``, a done or cancelled job's
  ``finished_at``, NULL otherwise, in place of ``status, finished_at``;
- the batch index: ``jq_batch_status``, a batch job's status, NULL for a job
  of no batch, in place of ``status``.

Each index keeps its name: a worker of the release before, still running
while this runs, names them in its hints and reads them whole until it is
replaced (slower, never wrong: its statements still say what they mean); its
``jq_keyed`` column stays, indexed nowhere. Elsewhere this does nothing.

Not atomic, as 0018: a migration cut short is run again from the start, and a
statement already done says so by its error and is passed over.
"""

from django.db import migrations
from django.db.backends.base.schema import BaseDatabaseSchemaEditor
from django.db.migrations.state import StateApps

from ._mysql_ddl import run_ddl

JOB_TABLE = "django_jobqueue_job"

# (name, its definition as a virtual column)
_COLUMNS = (
    (
        "jq_ready_keyed",
        "tinyint AS (CASE WHEN status = 'ready' THEN concurrency_key IS NOT NULL END) VIRTUAL",
    ),
    ("jq_key_status", "varchar(16) AS (CASE WHEN concurrency_key IS NOT NULL THEN status END) VIRTUAL"),
    (
        "jq_finished_at",
        "datetime(6) AS (CASE WHEN status IN ('done', 'cancelled') THEN finished_at END) VIRTUAL",
    ),
    ("jq_batch_status", "varchar(16) AS (CASE WHEN batch_id IS NOT NULL THEN status END) VIRTUAL"),
)

_ORDER = "jq_rank, run_at, id"
# (name, its columns before, its columns after)
_INDEXES = (
    ("jq_claim_idx", "status, jq_keyed, queue, " + _ORDER, "jq_ready_keyed, queue, " + _ORDER),
    ("jq_claim_any_idx", "status, jq_keyed, " + _ORDER, "jq_ready_keyed, " + _ORDER),
    ("jq_key_idx", "status, concurrency_key, " + _ORDER, "jq_key_status, concurrency_key, " + _ORDER),
    ("jq_finished_idx", "status, finished_at", "jq_finished_at"),
    ("jobqueue_batch_idx", "batch_id, status", "batch_id, jq_batch_status"),
)


def keyed_statements() -> list[str]:
    """The DDL that keys the status indexes by the generated columns."""
    adds = [f"ADD COLUMN {name} {kind}" for name, kind in _COLUMNS]
    statements = [f"ALTER TABLE {JOB_TABLE} {', '.join(adds)}"]
    # One statement an index: dropped and made again at once, so that no moment lacks it.
    statements += [_remade(name, after) for name, _before, after in _INDEXES]
    return statements


def unkeyed_statements() -> list[str]:
    """``keyed_statements`` undone: the indexes as 0018 left them."""
    statements = [_remade(name, before) for name, before, _after in _INDEXES]
    drops = [f"DROP COLUMN {name}" for name, _kind in _COLUMNS]
    statements.append(f"ALTER TABLE {JOB_TABLE} {', '.join(drops)}")
    return statements


def _remade(name: str, columns: str) -> str:
    return f"ALTER TABLE {JOB_TABLE} DROP INDEX {name}, ADD INDEX {name} ({columns})"


def key(apps: StateApps, schema_editor: BaseDatabaseSchemaEditor) -> None:
    if not schema_editor.connection.features.supports_partial_indexes:
        run_ddl(schema_editor, keyed_statements())


def unkey(apps: StateApps, schema_editor: BaseDatabaseSchemaEditor) -> None:
    if not schema_editor.connection.features.supports_partial_indexes:
        run_ddl(schema_editor, unkeyed_statements())


class Migration(migrations.Migration):
    atomic = False

    dependencies = [
        ("django_jobqueue", "0018_mysql_indexes"),
    ]

    operations = [migrations.RunPython(key, unkey, elidable=False)]
