"""Running the DDL of the migrations that fit the queue's tables to MySQL and MariaDB.

MySQL commits each DDL statement as it runs, so those migrations are not
atomic: one cut short is run again from the start, and a statement already
done says so by its error (``DONE``) and is passed over.
"""

from collections.abc import Iterable

from django.db import DatabaseError
from django.db.backends.base.schema import BaseDatabaseSchemaEditor

# Table exists, duplicate column, duplicate key name, no such key or column to
# drop, no such table to drop, and the flow lock's row there already.
DONE = frozenset({1050, 1060, 1061, 1091, 1051, 1062})


def run_ddl(schema_editor: BaseDatabaseSchemaEditor, statements: Iterable[str]) -> None:
    """Run ``statements`` in order, passing over each that says it was done already."""
    for statement in statements:
        try:
            schema_editor.execute(statement)
        except DatabaseError as error:
            code = getattr(error.__cause__, "args", (None,))[0]
            if code not in DONE:
                raise
