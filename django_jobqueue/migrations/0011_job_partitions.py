"""The job table on PostgreSQL: live jobs and finished ones in partitions of their own.

``django_jobqueue_job`` becomes a table partitioned by ``status``:
``django_jobqueue_job_live`` holds the ready, running and waiting jobs, and
``django_jobqueue_job_finished`` the done and cancelled ones. ``Job`` is
unchanged: the ORM and every query see one table.

Each index lives where its rows are (``LIVE_ONLY``, ``FINISHED_ONLY``):
the admin's indexes of the whole table by queue and by name become the
finished partition's alone. A new job so enters three indexes instead of
five, a claim writes two entries instead of four, and the admin's indexes
are written once per job, when it finishes (docs/performance.md, "The job
table").

The rows are copied into the new table, keeping their ids, and the id
sequence goes on from where it was: a dead letter's ``job_id`` and a
dependency's ``dependency_id`` never meet a new job of the same id. The copy
holds the table's lock for its length (about a second per 100,000 jobs):
prune first (``manage.py jobqueue prune``) to shorten it.

Other databases keep one table with every index; the migration does nothing there.
"""

from collections.abc import Callable

from django.db import migrations
from django.db.backends.base.schema import BaseDatabaseSchemaEditor
from django.db.migrations.state import StateApps
from django.db.models import Model, UniqueConstraint

LIVE_STATUSES = ("ready", "running", "waiting")
FINISHED_STATUSES = ("done", "cancelled")
# Each index is where its rows are. The claim's, the running and waiting jobs'
# and the live unique key's are the live partition's; the admin's lists by
# queue and by name, the finished and cancelled jobs' the finished
# partition's. The unique key's and the batch's are on both, and so are the
# keyed jobs' by key: empty among finished jobs (at no cost), they let the
# admin's search (a name, a unique key, a ready or running job's key, an id)
# read the finished jobs through indexes alone. On the live jobs, the admin's
# indexes would cost each enqueue and each claim an entry.
LIVE_ONLY = frozenset(
    {
        "jobqueue_claim_idx",
        "jobqueue_claim_any_idx",
        "jobqueue_keyed_claim_idx",
        "jobqueue_keyed_queue_idx",
        "jobqueue_running_idx",
        "jobqueue_waiting_idx",
        "jobqueue_live_unique_key",
    }
)
FINISHED_ONLY = frozenset(
    {"jobqueue_queue_id_idx", "jobqueue_name_id_idx", "jobqueue_finished_idx", "jobqueue_cancelled_idx"}
)
# Migration 0004's storage parameters: the live partition is the one its reasons are about.
LIVE_STORAGE = {
    "fillfactor": "80",
    "autovacuum_vacuum_scale_factor": "0.02",
    "autovacuum_vacuum_threshold": "1000",
    "autovacuum_vacuum_insert_scale_factor": "0.02",
    "autovacuum_analyze_scale_factor": "0.02",
}
# A table's columns, their defaults and its check constraint: not the id's identity, added once named.
LIKE = "LIKE {} INCLUDING DEFAULTS INCLUDING CONSTRAINTS"
# Finished rows are written once and deleted by the prune: vacuum and analyze them early too.
FINISHED_STORAGE = {name: value for name, value in LIVE_STORAGE.items() if name != "fillfactor"}


def _options(storage: dict[str, str]) -> str:
    return ", ".join(f"{name} = {value}" for name, value in storage.items())


def _literals(values: tuple[str, ...]) -> str:
    return ", ".join(f"'{value}'" for value in values)


def partition(apps: StateApps, schema_editor: BaseDatabaseSchemaEditor) -> None:
    if schema_editor.connection.vendor != "postgresql":
        return
    job = apps.get_model("django_jobqueue", "Job")
    table = str(job._meta.db_table)

    def partitioned(new: str, old: str) -> None:
        schema_editor.execute(f"CREATE TABLE {new} ({LIKE.format(old)}) PARTITION BY LIST (status)")
        for part, statuses, storage in (
            ("live", LIVE_STATUSES, LIVE_STORAGE),
            ("finished", FINISHED_STATUSES, FINISHED_STORAGE),
        ):
            schema_editor.execute(
                f"CREATE TABLE {table}_{part} PARTITION OF {new} FOR VALUES IN ({_literals(statuses)}) "
                f"WITH ({_options(storage)})"
            )

    _rebuild(schema_editor, table, partitioned)
    for part in ("live", "finished"):
        schema_editor.execute(
            f"ALTER TABLE {table}_{part} ADD CONSTRAINT {table}_{part}_pkey PRIMARY KEY (id)"
        )
    for index in [*job._meta.indexes, *_unique_indexes(job)]:
        parts = ["live"] if index.name in LIVE_ONLY else ["finished"] if index.name in FINISHED_ONLY else []
        for part in parts or ["live", "finished"]:
            # Named after the model's index, so that a plan names it; the parent's, if any, takes it in.
            statement = index.create_sql(job, schema_editor)
            statement.rename_table_references(table, f"{table}_{part}")
            statement.parts["name"] = schema_editor.quote_name(f"{index.name}_{part}")
            schema_editor.execute(statement)
        if not parts:
            schema_editor.execute(index.create_sql(job, schema_editor))
    schema_editor.execute(f"ANALYZE {table}")


def unpartition(apps: StateApps, schema_editor: BaseDatabaseSchemaEditor) -> None:
    if schema_editor.connection.vendor != "postgresql":
        return
    job = apps.get_model("django_jobqueue", "Job")
    table = str(job._meta.db_table)

    def plain(new: str, old: str) -> None:
        schema_editor.execute(f"CREATE TABLE {new} ({LIKE.format(old)}) WITH ({_options(LIVE_STORAGE)})")

    _rebuild(schema_editor, table, plain)
    schema_editor.execute(f"ALTER TABLE {table} ADD CONSTRAINT {table}_pkey PRIMARY KEY (id)")
    for index in [*job._meta.indexes, *_unique_indexes(job)]:
        schema_editor.execute(index.create_sql(job, schema_editor))
    schema_editor.execute(f"ANALYZE {table}")


def _rebuild(schema_editor: BaseDatabaseSchemaEditor, table: str, create: Callable[[str, str], None]) -> None:
    """Replace ``table`` by the one ``create(new_name, old_name)`` makes, with every row and its id.

    The id column becomes an identity again, its sequence going on from where
    the old one was; the new table has no index yet.
    """
    old, new = f"{table}_old", f"{table}_new"
    next_id = _next_id(schema_editor, table)
    schema_editor.execute(f"ALTER TABLE {table} RENAME TO {old}")
    create(new, old)
    schema_editor.execute(f"INSERT INTO {new} SELECT * FROM {old}")
    schema_editor.execute(f"DROP TABLE {old}")
    schema_editor.execute(f"ALTER TABLE {new} RENAME TO {table}")
    _add_identity(schema_editor, table, next_id)


def _unique_indexes(job: type[Model]) -> list[UniqueConstraint]:
    """The model's unique constraints: each one a unique index, placed like the indexes."""
    return [c for c in job._meta.constraints if isinstance(c, UniqueConstraint)]


def _next_id(schema_editor: BaseDatabaseSchemaEditor, table: str) -> int:
    """The id the next job would have been given: new ids never reuse an old job's."""
    with schema_editor.connection.cursor() as cursor:
        cursor.execute("SELECT pg_get_serial_sequence(%s, 'id')", [table])
        sequence = cursor.fetchone()[0]
        cursor.execute(f"SELECT last_value, is_called FROM {sequence}")
        last_value, is_called = cursor.fetchone()
        cursor.execute(f"SELECT COALESCE(MAX(id), 0) FROM {table}")
        highest = cursor.fetchone()[0]
    return max(last_value + 1 if is_called else last_value, highest + 1)


def _add_identity(schema_editor: BaseDatabaseSchemaEditor, table: str, next_id: int) -> None:
    """Make ``id`` an identity column again, its sequence (named as Django names it) at ``next_id``.

    Before PostgreSQL 17 a partition does not take its parent's identity: an
    insert straight into the live partition (as the queue's inserts are) draws
    its id from the same sequence by the partition's own default instead.
    """
    run = schema_editor.execute
    run(f"ALTER TABLE {table} ALTER COLUMN id ADD GENERATED BY DEFAULT AS IDENTITY (START WITH {next_id})")
    with schema_editor.connection.cursor() as cursor:
        cursor.execute("SELECT pg_get_serial_sequence(%s, 'id')", [table])
        sequence = cursor.fetchone()[0]
        cursor.execute(
            "SELECT c.relname FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid "
            "JOIN pg_attribute a ON a.attrelid = c.oid AND a.attname = 'id' "
            "WHERE i.inhparent = %s::regclass AND a.attidentity = '' AND NOT a.atthasdef",
            [table],
        )
        partitions = [row[0] for row in cursor.fetchall()]
    for name in partitions:
        run(f"ALTER TABLE {name} ALTER COLUMN id SET DEFAULT nextval('{sequence}'::regclass)")


class Migration(migrations.Migration):
    dependencies = [
        ("django_jobqueue", "0010_dependencies"),
    ]

    operations = [
        migrations.RunPython(partition, unpartition, elidable=False),
    ]
