"""One engine per database: what differs between them (see ``base.Engine``).

A database is supported by an engine module here; ``engine_for`` picks the
connection's. MySQL or MariaDB later is one more module and one more line in
``ENGINES``.
"""

from __future__ import annotations

from django.db.backends.base.base import BaseDatabaseWrapper

from .base import Engine
from .postgresql import PostgreSQLEngine
from .sqlite import SQLiteEngine

# By Django's ``connection.vendor``.
ENGINES: dict[str, Engine] = {engine.vendor: engine for engine in (PostgreSQLEngine(), SQLiteEngine())}


def engine_for(connection: BaseDatabaseWrapper) -> Engine:
    """Return the engine of ``connection``; raise ``NotImplementedError`` for a database not supported yet."""
    engine = ENGINES.get(connection.vendor)
    if engine is None:
        raise NotImplementedError(
            f"django-jobqueue does not support the {connection.vendor!r} database yet "
            "(PostgreSQL and SQLite are supported)"
        )
    return engine


__all__ = ["ENGINES", "Engine", "engine_for"]
