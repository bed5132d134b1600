"""Storage parameters of the job table on PostgreSQL (see docs/performance.md).

- ``fillfactor = 80``: inserts leave a fifth of each page free, so that a
  heartbeat (which changes only ``locked_until``, an unindexed column) is a HOT
  update that stays on its page and touches no index.
- autovacuum after 2 % of the rows (plus 1,000) are dead, instead of 20 %:
  every job leaves dead row versions behind, and the claim's index scans slow
  down as they pile up at the head of the queue.

Other databases have no such parameters; the migration does nothing there.
"""

from django.db import migrations
from django.db.backends.base.schema import BaseDatabaseSchemaEditor
from django.db.migrations.state import StateApps

STORAGE = {
    "fillfactor": "80",
    "autovacuum_vacuum_scale_factor": "0.02",
    "autovacuum_vacuum_threshold": "1000",
    "autovacuum_vacuum_insert_scale_factor": "0.02",
    "autovacuum_analyze_scale_factor": "0.02",
}


def _job_table(apps: StateApps) -> str:
    return str(apps.get_model("django_jobqueue", "Job")._meta.db_table)


def set_storage(apps: StateApps, schema_editor: BaseDatabaseSchemaEditor) -> None:
    if schema_editor.connection.vendor != "postgresql":
        return
    table = schema_editor.quote_name(_job_table(apps))
    options = ", ".join(f"{name} = {value}" for name, value in STORAGE.items())
    schema_editor.execute(f"ALTER TABLE {table} SET ({options})")


def reset_storage(apps: StateApps, schema_editor: BaseDatabaseSchemaEditor) -> None:
    if schema_editor.connection.vendor != "postgresql":
        return
    table = schema_editor.quote_name(_job_table(apps))
    schema_editor.execute(f"ALTER TABLE {table} RESET ({', '.join(STORAGE)})")


class Migration(migrations.Migration):
    dependencies = [
        ("django_jobqueue", "0003_tasks_framework"),
    ]

    operations = [
        migrations.RunPython(set_storage, reset_storage, elidable=False),
    ]
