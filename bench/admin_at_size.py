"""The admin at size: every page timed over 1,000,000 jobs and 100,000 dead letters on PostgreSQL or MariaDB.

The queue's metrics view (a Prometheus scrape) is timed with the pages.

    DATABASE_URL=postgres://postgres@127.0.0.1:5432/jq_admin_size .venv/bin/python bench/admin_at_size.py
    DATABASE_URL=mysql://root@127.0.0.1:3306/jq_admin_size .venv/bin/python bench/admin_at_size.py

Creates the database if it is missing and migrates it, fills it once (about a
minute, ``INSERT ... SELECT generate_series``), then requests each admin page
through Django's test client as a superuser and prints a Markdown table: the
median and the slowest of ``--runs`` requests after one warm-up, the number of
queries and the slowest query. The actions are timed too, each inside a
transaction that is rolled back, so the data stays as filled. ``--refill``
starts from empty tables.

The rows look like a day of a busy site: 1,000,000 jobs created over the last
24 hours, mostly done, the newest half-hour's backlog ready, some scheduled
days ahead, some cancelled, a thousand running; 100,000 dead letters over the
last 30 days; eight queues of very different sizes.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
from bench import admin_fill_mariadb  # noqa: E402 - the repository's root is on the path just above

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "testproject.settings")
# The test client's host; and no DEBUG, so that the query log is only what we capture.
os.environ.setdefault("ALLOWED_HOSTS", "testserver,localhost")
os.environ.setdefault("DEBUG", "false")

# The sizes and the queues' shares, one definition for the PostgreSQL fill below and MariaDB's.
JOBS, DEAD_LETTERS, QUEUE_SHARES = (
    admin_fill_mariadb.JOBS,
    admin_fill_mariadb.DEAD_LETTERS,
    admin_fill_mariadb.QUEUE_SHARES,
)

FILL_JOBS = f"""
INSERT INTO django_jobqueue_job (name, queue, payload, priority, status, attempts, max_attempts,
    visibility_timeout, run_at, locked_by, locked_until, claim_token, unique_key, result, last_error,
    last_traceback, created_at, finished_at)
SELECT q.queue || '.task_' || (i % 4), q.queue,
    jsonb_build_object('user_id', (i % 500000)::text, 'seq', i), ((i % 7) - 3) * 10, s.status,
    CASE WHEN s.status IN ('done', 'running') THEN 1 ELSE 0 END, 5, 30,
    CASE WHEN s.status = 'ready' AND i % 100 = 0 THEN t + (1 + i % 7) * interval '1 day' ELSE t END,
    CASE WHEN s.status = 'running' THEN 'worker-' || (i % 16) END,
    CASE WHEN s.status = 'running' THEN now() + interval '30 seconds' END,
    CASE WHEN s.status IN ('done', 'running') THEN 1 ELSE 0 END,
    CASE WHEN i % 10 = 5 THEN 'key:' || i END,
    CASE WHEN s.status = 'done' THEN '{{"ok": true}}'::jsonb END, '', '', t,
    CASE WHEN s.status IN ('done', 'cancelled') THEN t + interval '2 seconds' END
FROM generate_series(1, {JOBS}) AS i,
    LATERAL (SELECT now() - ({JOBS} - i) * interval '86.4 milliseconds' AS t) AS created,
    LATERAL (SELECT (i::bigint * 7919) % 1000 AS b) AS bucket,
    LATERAL (SELECT {QUEUE_SHARES} AS queue) AS q,
    LATERAL (SELECT CASE
        WHEN i % 100 = 0 THEN 'ready'
        WHEN i % 100 = 1 THEN 'cancelled'
        WHEN i > {JOBS - 50_000} AND i % 50 = 3 THEN 'running'
        WHEN i > {JOBS - 100_000} AND i % 2 = 0 THEN 'ready'
        ELSE 'done' END AS status) AS s
"""

FILL_DEAD_LETTERS = f"""
INSERT INTO django_jobqueue_deadletter (job_id, name, queue, payload, priority, attempts, max_attempts,
    visibility_timeout, enqueued_at, worker_id, error, traceback, failed_at)
SELECT 2000000 + i, q.queue || '.task_' || (i % 4), q.queue,
    jsonb_build_object('user_id', (i % 500000)::text, 'seq', i), 0, 5, 5, 30,
    f - interval '1 hour', 'worker-' || (i % 16), 'ProviderError: no answer in ' || (i % 30) || ' s',
    'Traceback (most recent call last):' || chr(10)
        || repeat('  File "/srv/app/sms/provider.py", line 88, in send_code' || chr(10)
        || '    raise ProviderError(reply["error"])' || chr(10), 8)
        || 'ProviderError: no answer in ' || (i % 30) || ' s',
    f
FROM generate_series(1, {DEAD_LETTERS}) AS i,
    LATERAL (SELECT now() - ({DEAD_LETTERS} - i) * interval '26 seconds' AS f) AS failed,
    LATERAL (SELECT (i::bigint * 7919) % 1000 AS b) AS bucket,
    LATERAL (SELECT {QUEUE_SHARES} AS queue) AS q
"""


def ensure_database(url: str) -> None:
    """Create the database of ``url`` if it does not exist yet."""
    import psycopg
    from psycopg import sql
    from psycopg.conninfo import conninfo_to_dict

    params = conninfo_to_dict(url)
    name = str(params.pop("dbname"))
    with psycopg.connect(**{**params, "dbname": "postgres"}, autocommit=True) as conn:
        if not conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", [name]).fetchone():
            conn.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
            print(f"created database {name}")


def fill(refill: bool) -> None:
    from django.db import connection

    from django_jobqueue import QueueClient
    from django_jobqueue.models import DeadLetter, Job

    if not refill and Job.objects.count() == JOBS and DeadLetter.objects.count() == DEAD_LETTERS:
        return
    started = time.perf_counter()
    with connection.cursor() as cursor:
        if connection.vendor == "mysql":
            admin_fill_mariadb.fill(cursor)
        else:
            cursor.execute("TRUNCATE django_jobqueue_job, django_jobqueue_deadletter, django_jobqueue_worker")
            cursor.execute(FILL_JOBS)
            cursor.execute(FILL_DEAD_LETTERS)
            cursor.execute("VACUUM ANALYZE django_jobqueue_job")
            cursor.execute("VACUUM ANALYZE django_jobqueue_deadletter")
    client = QueueClient()
    for n in range(16):
        client.register_worker(f"worker-{n}", hostname=f"web-{n % 4}", pid=1000 + n, queues=[], concurrency=8)
    print(f"filled {JOBS:,} jobs and {DEAD_LETTERS:,} dead letters in {time.perf_counter() - started:.0f} s")


def measure(request: Callable[[], Any], runs: int) -> dict[str, Any]:
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    request()  # warm-up: caches, the planner's statistics
    timings, queries, slowest = [], 0, 0.0
    for _ in range(runs):
        with CaptureQueriesContext(connection) as captured:
            started = time.perf_counter()
            response = request()
            timings.append((time.perf_counter() - started) * 1000)
        if response.status_code not in (200, 302):
            raise RuntimeError(f"HTTP {response.status_code}")
        queries = len(captured.captured_queries)
        slowest = max([slowest, *(float(q["time"]) * 1000 for q in captured.captured_queries)])
    return {"median": statistics.median(timings), "max": max(timings), "queries": queries, "slowest": slowest}


def rolled_back(request: Callable[[], Any]) -> Callable[[], Any]:
    """``request`` inside a transaction that is rolled back: an action timed without changing the data."""
    from django.db import transaction

    def run() -> Any:
        with transaction.atomic():
            response = request()
            transaction.set_rollback(True)
        return response

    return run


def pages() -> list[tuple[str, str]]:
    from django_jobqueue.models import DeadLetter, Job

    running = Job.objects.filter(status="running").order_by("-id").values_list("pk", flat=True)[0]
    keyed = Job.objects.filter(unique_key__isnull=False, status="done").values_list("unique_key", flat=True)[
        0
    ]
    letter = DeadLetter.objects.order_by("-id").values_list("pk", "job_id")[0]
    jobs, dead = "/admin/django_jobqueue/job/", "/admin/django_jobqueue/deadletter/"
    return [
        ("admin index", "/admin/"),
        ("queue overview", "/admin/django_jobqueue/queueoverview/"),
        ("jobs", jobs),
        ("jobs, last page (200)", f"{jobs}?p=200"),
        ("jobs, status ready: due now", f"{jobs}?status=due"),
        ("jobs, status ready: scheduled", f"{jobs}?status=scheduled"),
        ("jobs, status running", f"{jobs}?status=running"),
        ("jobs, status done", f"{jobs}?status=done"),
        ("jobs, status cancelled", f"{jobs}?status=cancelled"),
        ("jobs, queue default (40 %)", f"{jobs}?queue=default"),
        ("jobs, queue rare (0.1 %)", f"{jobs}?queue=rare"),
        ("jobs, name", f"{jobs}?name=sms.task_1"),
        ("jobs, queue + status + name", f"{jobs}?queue=emails&status=due&name=emails.task_2"),
        ("jobs, search an id", f"{jobs}?q={running}"),
        ("jobs, search a name", f"{jobs}?q=billing.task_3"),
        ("jobs, search a unique key", f"{jobs}?q={keyed}"),
        ("jobs, search finding nothing", f"{jobs}?q=no-such-thing"),
        ("job page", f"{jobs}{running}/change/"),
        ("job history", f"{jobs}{running}/history/"),
        ("dead letters", dead),
        ("dead letters, queue sms", f"{dead}?queue=sms"),
        ("dead letters, name", f"{dead}?name=webhooks.task_0"),
        ("dead letters, failed in the last 24 hours", f"{dead}?failed=24h"),
        ("dead letters, failed more than 30 days ago", f"{dead}?failed=older"),
        ("dead letters, queue + name + 7 days", f"{dead}?queue=emails&name=emails.task_1&failed=7d"),
        ("dead letters, search a job id", f"{dead}?q={letter[1]}"),
        ("dead letter page", f"{dead}{letter[0]}/change/"),
        ("retry all matching, the question (queue sms)", f"{dead}retry-matching/?queue=sms"),
        ("workers", "/admin/django_jobqueue/worker/"),
        # Not an admin page: what a Prometheus scrape of the queue's figures costs.
        ("queue metrics (django_jobqueue.views.metrics)", "/jobqueue/metrics"),
    ]


def actions(client: Any) -> list[tuple[str, Callable[[], Any]]]:
    from django_jobqueue.models import DeadLetter, Job

    jobs, dead = "/admin/django_jobqueue/job/", "/admin/django_jobqueue/deadletter/"
    scheduled = list(Job.objects.filter(status="ready").order_by("-id").values_list("pk", flat=True)[:50])
    letters = list(DeadLetter.objects.order_by("-id").values_list("pk", flat=True)[:50])
    rare = DeadLetter.objects.filter(queue="rare").count()
    webhooks = DeadLetter.objects.filter(queue="webhooks").count()

    def action(url: str, name: str, ids: list[int], **extra: str) -> Callable[[], Any]:
        data = {"action": name, "_selected_action": ids, "index": "0", **extra}
        return lambda: client.post(url, data)

    return [
        ("action: retry 50 jobs now", action(jobs, "retry_now", scheduled)),
        ("action: cancel 50 jobs", action(jobs, "cancel", scheduled)),
        ("action: retry 50 dead letters", action(dead, "retry", letters)),
        ("action: delete 50 dead letters", action(dead, "delete_letters", letters, post="yes")),
        (
            f"retry all matching: queue rare ({rare:,} dead letters)",
            lambda: client.post(f"{dead}retry-matching/?queue=rare", {"post": "yes"}),
        ),
        (
            f"retry all matching: queue webhooks ({webhooks:,} dead letters)",
            lambda: client.post(f"{dead}retry-matching/?queue=webhooks", {"post": "yes"}),
        ),
    ]


def in_turns(client: Any, path: str, runs: int) -> tuple[float, float]:
    """Median ms of ``path`` with Django's own list rows and paginator, and with the queue's: in turns.

    Django's ``action_checkbox``, ``ChangeList`` and paginator are put back on
    the queue's admins for one request, then taken away for the next, so
    that the machine's mood weighs on both alike.
    """
    from django.contrib.admin import ModelAdmin

    from django_jobqueue.admin.base import OperatorAdmin
    from django_jobqueue.admin.jobs import JobAdmin

    ours = (OperatorAdmin.action_checkbox, OperatorAdmin.get_changelist, JobAdmin.get_paginator)
    djangos = (ModelAdmin.action_checkbox, ModelAdmin.get_changelist, ModelAdmin.get_paginator)
    timings: dict[bool, list[float]] = {True: [], False: []}
    try:
        for turn in range(2 * (runs + 1)):
            djangos_turn = turn % 2 == 0
            OperatorAdmin.action_checkbox, OperatorAdmin.get_changelist, JobAdmin.get_paginator = (
                djangos if djangos_turn else ours
            )
            started = time.perf_counter()
            client.get(path)
            if turn >= 2:  # the first of each is a warm-up
                timings[djangos_turn].append((time.perf_counter() - started) * 1000)
    finally:
        OperatorAdmin.action_checkbox, OperatorAdmin.get_changelist, JobAdmin.get_paginator = ours
    return statistics.median(timings[True]), statistics.median(timings[False])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=5, help="timed requests per page (after a warm-up)")
    parser.add_argument("--refill", action="store_true", help="empty the tables and fill them again")
    parser.add_argument("--no-actions", action="store_true", help="time the pages only")
    parser.add_argument("--only", default="", help="time only the rows whose label contains this text")
    parser.add_argument(
        "--against-django",
        action="store_true",
        help="time the pages in turns with Django's own list rows and paginator, and with the queue's",
    )
    args = parser.parse_args()

    url = os.environ.get("DATABASE_URL", "")
    if url.startswith("mysql://"):
        admin_fill_mariadb.ensure_database(url)
    elif url.startswith(("postgres://", "postgresql://")):
        ensure_database(url)
    else:
        sys.exit(
            "Set DATABASE_URL to a PostgreSQL database, "
            "e.g. postgres://postgres@127.0.0.1:5432/jq_admin_size, or a MariaDB one, e.g. mysql://root@127.0.0.1:3306/jq_admin_size"
        )

    import django

    django.setup()
    from django.contrib.auth import get_user_model
    from django.core.management import call_command
    from django.db import connection
    from django.test import Client

    call_command("migrate", verbosity=0)
    fill(args.refill)
    user_model = get_user_model()
    user = user_model.objects.filter(username="bench").first() or user_model.objects.create_superuser(
        "bench", "bench@example.com", "bench"
    )
    client = Client()
    client.force_login(user)

    with connection.cursor() as cursor:
        cursor.execute("SELECT version()")
        version = cursor.fetchone()[0].split(" on ")[0]
        if connection.vendor == "mysql":
            version = f"MariaDB {version}" if connection.mysql_is_mariadb else f"MySQL {version}"
            cursor.execute(
                "SELECT CONCAT(ROUND(SUM(CASE WHEN table_name = 'django_jobqueue_job' "
                "THEN data_length + index_length END) / 1048576), ' MB'), "
                "CONCAT(ROUND(SUM(CASE WHEN table_name = 'django_jobqueue_deadletter' "
                "THEN data_length + index_length END) / 1048576), ' MB') "
                "FROM information_schema.TABLES WHERE table_schema = DATABASE()"
            )
        else:
            cursor.execute(
                # The job table's partitions (PostgreSQL keeps finished jobs apart): their sizes summed.
                "SELECT (SELECT pg_size_pretty(SUM(pg_total_relation_size(relid))) "
                "FROM pg_partition_tree('django_jobqueue_job')), "
                "pg_size_pretty(pg_total_relation_size('django_jobqueue_deadletter'))"
            )
        job_size, dead_size = cursor.fetchone()
    print(f"\n{version}; {JOBS:,} jobs ({job_size}), {DEAD_LETTERS:,} dead letters ({dead_size})")
    cpus, load = os.cpu_count(), os.getloadavg()[0]
    print(f"{cpus} CPUs, load average {load:.1f} at the start (other work on the machine slows every page)")
    if args.against_django:
        print(f"median of {args.runs} requests each, in turns, after a warm-up, through the test client\n")
        print("| page | Django's rows and paginator ms | the queue's ms |")
        print("| --- | ---: | ---: |")
        for label, path in pages():
            if args.only in label:
                djangos, ours = in_turns(client, path, args.runs)
                print(f"| {label} | {djangos:.1f} | {ours:.1f} |")
        return
    print(f"median and slowest of {args.runs} requests after a warm-up, through Django's test client\n")
    print("| page | median ms | max ms | queries | slowest query ms |")
    print("| --- | ---: | ---: | ---: | ---: |")
    rows: list[tuple[str, Callable[[], Any]]] = [
        (label, (lambda path=path: client.get(path))) for label, path in pages()
    ]
    if not args.no_actions:
        rows += [(label, rolled_back(request)) for label, request in actions(client)]
    for label, request in rows:
        if args.only not in label:
            continue
        result = measure(request, args.runs)
        print(
            f"| {label} | {result['median']:.1f} | {result['max']:.1f} | {result['queries']} "
            f"| {result['slowest']:.1f} |"
        )


if __name__ == "__main__":
    main()
