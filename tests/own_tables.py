"""Tables of the tests' own on the queue's database, each with its CREATE statement per vendor."""

from __future__ import annotations

from collections.abc import Mapping

from django.db import connections


def create(table: str, ddl: Mapping[str, str], using: str = "default") -> None:
    """Create ``table`` on ``using`` by its vendor's statement in ``ddl`` if it is missing, and empty it."""
    connection = connections[using]
    with connection.cursor() as cursor:
        cursor.execute(ddl[connection.vendor])
        cursor.execute(f"DELETE FROM {table}")


def drop(table: str, using: str = "default") -> None:
    with connections[using].cursor() as cursor:
        cursor.execute(f"DROP TABLE IF EXISTS {table}")
