"""SQLite: one writer at a time, so no row locks; workers poll; times written as Django stores them.

``'now'`` is written with microseconds, the way Django stores datetimes on SQLite.
"""

from __future__ import annotations

from .base import Engine


class SQLiteEngine(Engine):
    vendor = "sqlite"
    # RETURNING since SQLite 3.35 (check E017).
    supports_update_returning = True
    supports_delete_returning = True
    supports_insert_returning = True
    supports_on_conflict = True

    now = "(strftime('%%Y-%%m-%%d %%H:%%M:%%f', 'now') || '000')"
    clock = now
    # A write that changes nothing, so that a limited round holds the database's
    # write lock from its first statement, also in a DEFERRED transaction: its
    # counts are then read by the only writer (SQLite has no row locks to wait on).
    flow_lock = "UPDATE django_jobqueue_queuestate SET paused = paused WHERE id = -1"
    # None: a transaction opened for the reads would take the write lock under
    # transaction_mode IMMEDIATE and stall every worker for the scrape's length.
    snapshot_read = None
    least = "MIN"
    clock_minus_template = (
        "(strftime('%%Y-%%m-%%d %%H:%%M:%%f', 'now', printf('-%%.6f seconds', {seconds})) || '000')"
    )
    now_plus_template = (
        "(strftime('%%Y-%%m-%%d %%H:%%M:%%f', 'now', printf('%%.6f seconds', {seconds})) || '000')"
    )
    json_push_template = "json_insert({column}, '$[#]', {value})"
    json_pop_template = "json_remove({column}, '$[#-1]')"
    json_object = "json_object"
    # Stored as Django writes it on SQLite, in UTC (every job time is the engine's ``now``).
    iso_time_template = "(replace({column}, ' ', 'T') || '+00:00')"
    seconds_since_template = "round((julianday('now') - julianday({column})) * 86400.0, 3)"
    # json() keeps the object an object: a plain text value would be inserted as a JSON string.
    json_push_bounded_template = (
        "json_insert(CASE WHEN json_array_length({column}) >= {limit} THEN json_remove({column}, '$[1]') "
        "ELSE {column} END, '$[#]', json({value}))"
    )
    json_array_has_template = "EXISTS (SELECT 1 FROM json_each({array}) WHERE json_each.value = {value})"
