"""PostgreSQL: row locks that skip, LISTEN/NOTIFY, COPY, arrays, psycopg's own cursor, partitions."""

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
    supports_pipeline = True
    supports_json_object_agg = True
    supports_concurrent_writers = True
    finished_jobs_apart = True
    supports_update_returning = True
    supports_delete_returning = True
    supports_insert_returning = True
    supports_on_conflict = True
    # deadlock_detected, and serialization_failure: under READ COMMITTED, a row that
    # another transaction's UPDATE moved to the other partition while this one waited on it.
    conflict_codes = frozenset({"40P01", "40001"})
    lock_timeout_code = "55P03"  # lock_not_available

    fire_deferred = (
        "SET CONSTRAINTS django_jobqueue_flag_dependency IMMEDIATE",
        "SET CONSTRAINTS django_jobqueue_flag_dependency DEFERRED",
    )
    now = "now()"
    clock = "clock_timestamp()"
    least = "LEAST"
    # One lock for every limited claim of the database, held to the claim's commit.
    # The number is arbitrary: it only has to be this product's own.
    flow_lock = "SELECT pg_advisory_xact_lock(7100160716)"
    # READ COMMITTED takes a new snapshot per statement; a scrape's counts must add up.
    snapshot_read = "SET TRANSACTION ISOLATION LEVEL REPEATABLE READ, READ ONLY"
    # The figures' reads are each served by a partial index that holds just the
    # rows counted, read index-only (stats.py). Where those rows are most of a
    # small table (the ready jobs of the live partition) the planner guesses a
    # scan of the table cheaper; it reads every row's heap tuple and took 2.5x
    # as long at 60,000 ready jobs. For this read-only transaction alone; and
    # no JIT, which a disabled scan's huge cost would otherwise set off (a scan
    # of a 16-row table then took 70 ms to compile).
    snapshot_plans = "SELECT set_config('enable_seqscan', 'off', true), set_config('jit', 'off', true)"
    # set_config(..., true): for this transaction only, even the implicit one of a lone statement.
    commit_mode_sql = "SELECT set_config('synchronous_commit', %s, true)"
    lock_timeout_sql = "SELECT current_setting('lock_timeout'), set_config('lock_timeout', %s, true)"
    # An uncorrelated subquery: run once, before the rows that the value picks are locked.
    with_lock_timeout_template = (
        "(SELECT {value} FROM (SELECT set_config('lock_timeout', %s, true)) AS bounded)"
    )
    clock_minus_template = "(clock_timestamp() - ({seconds}) * interval '1 second')"
    skip_locked = "FOR UPDATE SKIP LOCKED"
    skip_locked_in_place = "FOR NO KEY UPDATE SKIP LOCKED"
    for_key_share = "FOR KEY SHARE"
    for_update = "FOR UPDATE"
    for_share = "FOR SHARE"
    # psycopg's server-side binding sends None untyped.
    nullable_float = "CAST(%s AS double precision)"
    json_param = "CAST(%s AS jsonb)"
    now_plus_template = "(now() + ({seconds}) * interval '1 second')"
    json_push_template = "({column} || jsonb_build_array(({value})::text))"
    json_pop_template = "({column} - (-1))"
    json_object = "jsonb_build_object"
    # A timestamptz in jsonb is ISO 8601 with the session's offset (UTC under Django).
    iso_time_template = "to_jsonb({column})"
    seconds_since_template = "round(extract(epoch FROM now() - {column})::numeric, 3)"
    json_push_bounded_template = (
        "(CASE WHEN jsonb_array_length({column}) >= {limit} THEN {column} - 1 ELSE {column} END "
        "|| jsonb_build_array({value}))"
    )
    json_array_has_template = "({array} @> to_jsonb({value}))"
