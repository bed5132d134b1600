"""What a database needs beyond the tables Django made, to hold the queue: its engine says.

On MySQL and MariaDB (``queue/engines/mysql.py``): names compared byte for
byte, the generated columns and indexes that stand in for PostgreSQL's
partial ones (among them the unique index of live jobs' unique keys, which
Django could not make there), and the flow lock's row. Elsewhere nothing.

Not atomic: MySQL commits each DDL statement as it runs. A migration cut short
is run again from the start; each statement already done says so by its
error (``Engine.schema_done_codes``) and is passed over.
"""

from django.db import DatabaseError, migrations
from django.db.backends.base.schema import BaseDatabaseSchemaEditor
from django.db.migrations.state import StateApps

from django_jobqueue.queue.engines import Engine, engine_for


def fit(apps: StateApps, schema_editor: BaseDatabaseSchemaEditor) -> None:
    engine = engine_for(schema_editor.connection)
    _run(schema_editor, engine.schema_statements(), engine)


def unfit(apps: StateApps, schema_editor: BaseDatabaseSchemaEditor) -> None:
    engine = engine_for(schema_editor.connection)
    _run(schema_editor, engine.unschema_statements(), engine)


def _run(schema_editor: BaseDatabaseSchemaEditor, statements: list[str], engine: Engine) -> None:
    for statement in statements:
        try:
            schema_editor.execute(statement)
        except DatabaseError as error:
            if engine.error_code(error.__cause__) not in engine.schema_done_codes:
                raise


class Migration(migrations.Migration):
    atomic = False
    dependencies = [
        ("django_jobqueue", "0017_worker_listen"),
    ]

    operations = [migrations.RunPython(fit, unfit, elidable=False)]
