"""One engine per database: what differs between them (see ``base.Engine``).

A database is supported by an engine module here; ``engine_for`` picks the
connection's: by Django's ``vendor``, and MariaDB apart from MySQL.
"""

from __future__ import annotations

from django.db.backends.base.base import BaseDatabaseWrapper

from .base import Engine
from .mysql import MariaDBEngine, MySQLEngine
from .postgresql import PostgreSQLEngine
from .sqlite import SQLiteEngine

# By Django's ``connection.vendor``; MariaDB's is "mysql" too (``engine_for``).
ENGINES: dict[str, Engine] = {
    engine.vendor: engine for engine in (PostgreSQLEngine(), SQLiteEngine(), MySQLEngine())
}
MARIADB = MariaDBEngine()


def engine_for(connection: BaseDatabaseWrapper) -> Engine:
    """Return the engine of ``connection``; raise ``NotImplementedError`` for a database not supported yet."""
    engine = ENGINES.get(connection.vendor)
    if engine is None:
        raise NotImplementedError(
            f"django-jobqueue does not support the {connection.vendor!r} database yet "
            "(PostgreSQL, MySQL, MariaDB and SQLite are supported)"
        )
    # Django's cached answer: it asks the server once per connection object.
    if engine.vendor == "mysql" and getattr(connection, "mysql_is_mariadb", False):
        return MARIADB
    return engine


__all__ = ["ENGINES", "MARIADB", "Engine", "engine_for"]
