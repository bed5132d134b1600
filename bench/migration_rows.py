"""The rows ``bench/migrations.py`` migrates: a day of a busy site, at any migration's columns.

One ``INSERT ... SELECT`` per table, built from the columns the table has at
the migration it was migrated to: a column the table does not have yet is left
out, so that the same rows fill the tables of 0001 and of 0010. The jobs are
mostly done, a backlog ready, some scheduled days ahead, some cancelled, a
thousand running and, once 0010 added them, some waiting on others; each
payload is a few hundred bytes of JSON, as an e-mail or a webhook job carries.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

# Queue sizes in thousandths, from a big default queue to a rare one (as bench/admin_at_size.py).
QUEUE = (
    "CASE WHEN b < 400 THEN 'default' WHEN b < 650 THEN 'emails' WHEN b < 800 THEN 'sms' "
    "WHEN b < 900 THEN 'webhooks' WHEN b < 950 THEN 'reports' WHEN b < 980 THEN 'exports' "
    "WHEN b < 999 THEN 'billing' ELSE 'rare' END"
)
NOTE = "Thank you for your order. Your parcel leaves our warehouse today; we will write again when it ships."


class Dialect:
    """The few expressions that differ between PostgreSQL and SQLite."""

    def __init__(self, vendor: str) -> None:
        self.pg = vendor == "postgresql"

    def series(self, count: int) -> str:
        """A source of rows ``i`` = 1 .. ``count``."""
        if self.pg:
            return f"generate_series(1::bigint, {count}) AS g(i)"
        numbers = f"s(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM s WHERE i < {count})"
        return f"(WITH RECURSIVE {numbers} SELECT i FROM s)"

    def obj(self, *pairs: Any) -> str:
        return ("jsonb_build_object" if self.pg else "json_object") + f"({', '.join(map(str, pairs))})"

    def arr(self, *items: Any) -> str:
        return ("jsonb_build_array" if self.pg else "json_array") + f"({', '.join(map(str, items))})"

    def at(self, seconds: str) -> str:
        """The time ``seconds`` (an SQL number) from now."""
        if self.pg:
            return f"(now() + ({seconds}) * interval '1 second')"
        return f"strftime('%Y-%m-%d %H:%M:%f', 'now', printf('%+.3f seconds', {seconds}))"

    def text(self, value: str) -> str:
        return f"({value})::text" if self.pg else f"CAST({value} AS TEXT)"

    def hexid(self) -> str:
        return "md5(i::text)" if self.pg else "lower(hex(randomblob(16)))"

    @property
    def nl(self) -> str:
        return "chr(10)" if self.pg else "char(10)"

    @property
    def true(self) -> str:
        return "true" if self.pg else "json('true')"

    @property
    def empty_list(self) -> str:
        return "'[]'::jsonb" if self.pg else "'[]'"


def job_columns(d: Dialect, count: int, waiting: bool) -> tuple[dict[str, str], str]:
    """The job table's column expressions, and the rows they read (``i``, ``t``, ``status``, ``queue``)."""
    ran = "status IN ('done', 'running')"
    retried = f"({ran} AND i % 50 = 7)"
    status = (
        "CASE WHEN i % 100 = 0 THEN 'ready' WHEN i % 100 = 1 THEN 'cancelled' "
        + ("WHEN i % 1000 = 2 THEN 'waiting' " if waiting else "")
        + f"WHEN i > {count - 50_000} AND i % 50 = 3 THEN 'running' "
        f"WHEN i > {count - 100_000} AND i % 2 = 0 THEN 'ready' ELSE 'done' END"
    )
    source = (
        f"(SELECT i, t, {status} AS status, {QUEUE} AS queue FROM "
        f"(SELECT i, {d.at(f'-({count} - i) * 0.0864')} AS t, (i * 7919) % 1000 AS b "
        f"FROM {d.series(count)}) AS g0) AS r"
    )
    later = lambda seconds: f"{d.at(f'-({count} - i) * 0.0864 + {seconds}')}"  # noqa: E731
    error = "'ProviderError: no answer in ' || (i % 30) || ' s'"
    scheduled = later("(1 + i % 7) * 86400")
    result = d.obj("'sent'", d.true, "'message_id'", "'msg-' || i")
    worker_ids = d.arr("'worker-' || (i % 16)")
    columns = {
        "name": "queue || '.task_' || (i % 4)",
        "queue": "queue",
        "payload": d.obj(
            "'user_id'",
            "i % 500000",
            "'email'",
            "'user' || (i % 500000) || '@example.com'",
            "'template'",
            "'order_confirmation'",
            "'locale'",
            "'en-GB'",
            "'order'",
            d.obj("'id'", "i", "'total'", "(i % 9000) / 100.0", "'currency'", "'EUR'", "'lines'", "i % 5"),
            "'request_id'",
            d.hexid(),
            "'note'",
            f"'{NOTE}'",
        ),
        "priority": "((i % 7) - 3) * 10",
        "status": "status",
        "attempts": f"CASE WHEN {retried} THEN 2 WHEN {ran} THEN 1 ELSE 0 END",
        "max_attempts": "5",
        "visibility_timeout": "30",
        "run_at": f"CASE WHEN status = 'ready' AND i % 100 = 0 THEN {scheduled} ELSE t END",
        "locked_by": "CASE WHEN status = 'running' THEN 'worker-' || (i % 16) END",
        "locked_until": f"CASE WHEN status = 'running' THEN {d.at('30')} END",
        "claim_token": f"CASE WHEN {retried} THEN 2 WHEN {ran} THEN 1 ELSE 0 END",
        "unique_key": "CASE WHEN i % 10 = 5 THEN 'key:' || i END",
        "result": f"CASE WHEN status = 'done' THEN {result} END",
        "last_error": f"CASE WHEN {retried} THEN {error} ELSE '' END",
        "last_traceback": (
            f"CASE WHEN {retried} THEN 'Traceback (most recent call last):' || {d.nl} "
            f"|| '  File \"/srv/app/sms/provider.py\", line 88, in send_code' || {d.nl} "
            f"|| {error} ELSE '' END"
        ),
        "created_at": "t",
        "finished_at": f"CASE WHEN status IN ('done', 'cancelled') THEN {later(2)} END",
        # 0003
        "started_at": f"CASE WHEN {ran} THEN {later(1)} END",
        "last_attempted_at": f"CASE WHEN {ran} THEN {later(1)} END",
        "task_backend": "''",
        "worker_ids": f"CASE WHEN {ran} THEN {worker_ids} ELSE {d.empty_list} END",
        # 0006
        "timeout": "CASE WHEN i % 10 = 0 THEN 60 END",
        # 0007
        "concurrency_key": "CASE WHEN i % 50 = 9 THEN 'tenant-' || (i % 100) END",
        "concurrency_limit": "CASE WHEN i % 50 = 9 THEN 2 END",
        # 0008
        "attempt_history": (f"CASE WHEN status = 'done' THEN {d.arr(history(d))} ELSE {d.empty_list} END"),
        "progress": "NULL",
        "trace_context": "NULL",
        # 0009
        "batch_id": "CASE WHEN i % 20 = 11 THEN i % 1000 + 1 END",
        # 0010
        "has_dependents": "(i % 1000 = 4)",
    }
    return columns, source


def history(d: Dialect) -> str:
    return d.obj(
        "'attempt'",
        "1",
        "'worker'",
        "'worker-' || (i % 16)",
        "'started_at'",
        d.text("t"),
        "'duration'",
        "0.8",
        "'outcome'",
        "'done'",
        "'error'",
        "''",
    )


def dead_letter_columns(d: Dialect, count: int) -> tuple[dict[str, str], str]:
    """The dead-letter table's column expressions, and their rows: failures over the last 30 days."""
    source = (
        f"(SELECT i, t, {QUEUE} AS queue FROM "
        f"(SELECT i, {d.at(f'-({count} - i) * 26')} AS t, (i * 7919) % 1000 AS b "
        f"FROM {d.series(count)}) AS g0) AS r"
    )
    error = "'ProviderError: no answer in ' || (i % 30) || ' s'"
    nl = d.nl
    frame = (
        f"'  File \"/srv/app/sms/provider.py\", line 88, in send_code' || {nl} "
        f"|| '    raise ProviderError(reply)' || {nl}"
    )
    columns = {
        "job_id": "2000000 + i",
        "name": "queue || '.task_' || (i % 4)",
        "queue": "queue",
        "payload": d.obj("'user_id'", "i % 500000", "'phone'", "'+4420' || i", "'note'", f"'{NOTE}'"),
        "priority": "0",
        "attempts": "5",
        "max_attempts": "5",
        "visibility_timeout": "30",
        "enqueued_at": d.at(f"-({count} - i) * 26 - 3600"),
        "worker_id": "'worker-' || (i % 16)",
        "error": error,
        "traceback": f"'Traceback (most recent call last):' || {nl} || {' || '.join([frame] * 8)} || {error}",
        "failed_at": "t",
        "started_at": d.at(f"-({count} - i) * 26 - 60"),
        "last_attempted_at": d.at(f"-({count} - i) * 26 - 60"),
        "task_backend": "''",
        "worker_ids": d.arr("'worker-' || (i % 16)", "'worker-' || ((i + 1) % 16)"),
        "timeout": "NULL",
        "concurrency_key": "NULL",
        "concurrency_limit": "NULL",
        "attempt_history": d.arr(*[history(d)] * 5),
        "progress": "NULL",
        "trace_context": "NULL",
        "batch_id": "NULL",
    }
    return columns, source


def insert(table: str, present: list[str], columns: dict[str, str], source: str) -> str:
    """``INSERT INTO table`` the columns of ``present`` that ``columns`` names, from ``source``.

    Raise ``KeyError`` for a column of the table that ``columns`` does not
    name: rows that leave out a column would not be the rows of that migration.
    """
    missing = [name for name in present if name != "id" and name not in columns]
    if missing:
        raise KeyError(f"{table}: no expression for {missing}")
    names = [name for name in present if name != "id"]
    values = ", ".join(columns[name] for name in names)
    return f"INSERT INTO {table} ({', '.join(names)}) SELECT {values} FROM {source}"


def fill(connection: Any, jobs: int, dead_letters: int, say: Callable[[str], None]) -> None:
    """Fill the queue's tables, at whatever migration they are, with ``jobs`` jobs and their kin."""
    d = Dialect(connection.vendor)
    with connection.cursor() as cursor:

        def columns_of(table: str) -> list[str]:
            return [c.name for c in connection.introspection.get_table_description(cursor, table)]

        job = columns_of("django_jobqueue_job")
        cursor.execute(insert("django_jobqueue_job", job, *job_columns(d, jobs, "has_dependents" in job)))
        dead = columns_of("django_jobqueue_deadletter")
        cursor.execute(insert("django_jobqueue_deadletter", dead, *dead_letter_columns(d, dead_letters)))
        now = "now()" if d.pg else "strftime('%Y-%m-%d %H:%M:%f', 'now')"
        cursor.execute(
            "INSERT INTO django_jobqueue_worker (worker_id, hostname, pid, queues, concurrency, "
            f"started_at, last_heartbeat) SELECT 'worker-' || i, 'web-' || (i % 4), 1000 + i, "
            f"{d.empty_list}, 8, {now}, {now} FROM {d.series(16)}"
        )
        tables = set(connection.introspection.table_names(cursor))
        if "django_jobqueue_dependency" in tables:
            # The waiting jobs' dependencies: each waits on the job enqueued just before it.
            cursor.execute(
                "INSERT INTO django_jobqueue_dependency (dependent_id, dependency_id) "
                "SELECT id, id - 1 FROM django_jobqueue_job WHERE status = 'waiting'"
            )
        if "django_jobqueue_schedule" in tables:
            cron = d.obj("'cron'", "'0 3 * * *'")
            cursor.execute(
                "INSERT INTO django_jobqueue_schedule (name, job, definition, signature, handled_through, "
                "next_fire_at, paused, created_at, updated_at) SELECT 'nightly-' || i, 'reports.task_0', "
                f"{cron}, {d.hexid()}, {now}, "
                f"{now}, false, {now}, {now} FROM {d.series(50)}"
            )
    say(f"filled {jobs:,} jobs and {dead_letters:,} dead letters")
