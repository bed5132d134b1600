"""The few SQL fragments that differ between databases.

Every statement in ``ops.py`` is written once and filled in with these. All
times are the database's clock: ``now()`` on PostgreSQL, ``'now'`` on SQLite
(written with microseconds, the way Django stores datetimes there).
"""

from __future__ import annotations

from dataclasses import dataclass

from django.db.backends.base.base import BaseDatabaseWrapper


@dataclass(frozen=True)
class Dialect:
    vendor: str
    now: str
    # FOR UPDATE SKIP LOCKED where the database has it; SQLite serialises writers.
    skip_locked: str
    _now_plus: str
    # Append to / drop the last item of a JSON array column (a Task job's worker_ids).
    _json_push: str = ""
    _json_pop: str = ""

    def json_push(self, column: str, value_sql: str) -> str:
        """SQL for the JSON array ``column`` with the string ``value_sql`` appended."""
        return self._json_push.format(column=column, value=value_sql)

    def json_pop(self, column: str) -> str:
        """SQL for the JSON array ``column`` less its last item."""
        return self._json_pop.format(column=column)

    def now_plus(self, seconds_sql: str) -> str:
        """SQL for the database's now plus ``seconds_sql`` (an SQL number) seconds."""
        return self._now_plus.format(seconds=seconds_sql)

    def now_minus(self, seconds_sql: str) -> str:
        return self.now_plus(f"-({seconds_sql})")


POSTGRESQL = Dialect(
    vendor="postgresql",
    now="now()",
    skip_locked="FOR UPDATE SKIP LOCKED",
    _now_plus="(now() + ({seconds}) * interval '1 second')",
    _json_push="({column} || jsonb_build_array(({value})::text))",
    _json_pop="({column} - (-1))",
)

SQLITE = Dialect(
    vendor="sqlite",
    now="(strftime('%%Y-%%m-%%d %%H:%%M:%%f', 'now') || '000')",
    skip_locked="",
    _now_plus=("(strftime('%%Y-%%m-%%d %%H:%%M:%%f', 'now', printf('%%.6f seconds', {seconds})) || '000')"),
    _json_push="json_insert({column}, '$[#]', {value})",
    _json_pop="json_remove({column}, '$[#-1]')",
)


def dialect_for(connection: BaseDatabaseWrapper) -> Dialect:
    """Return the dialect of ``connection``; raise for a database we do not support yet."""
    if connection.vendor == "postgresql":
        return POSTGRESQL
    if connection.vendor == "sqlite":
        return SQLITE
    raise NotImplementedError(
        f"django-jobqueue does not support the {connection.vendor!r} database yet "
        "(PostgreSQL and SQLite are supported)"
    )
