"""PostgreSQL: row locks that skip, LISTEN/NOTIFY, COPY, arrays and psycopg's own cursor."""

from __future__ import annotations

from .base import Engine


class PostgreSQLEngine(Engine):
    vendor = "postgresql"

    supports_select_for_update = True
    supports_skip_locked = True
    supports_listen_notify = True
    supports_copy = True
    supports_bound_cursor = True
    supports_array_params = True
    supports_data_modifying_cte = True

    now = "now()"
    skip_locked = "FOR UPDATE SKIP LOCKED"
    for_update = "FOR UPDATE"
    # psycopg's server-side binding sends None untyped.
    nullable_float = "CAST(%s AS double precision)"
    now_plus_template = "(now() + ({seconds}) * interval '1 second')"
    json_push_template = "({column} || jsonb_build_array(({value})::text))"
    json_pop_template = "({column} - (-1))"
