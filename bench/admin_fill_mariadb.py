"""``bench/admin_at_size.py``'s rows on MariaDB: the same day of a busy site, made by MariaDB's SQL.

MariaDB's sequence engine (``seq_1_to_N``) stands in for PostgreSQL's
``generate_series``; the columns are computed as ``admin_at_size`` computes
them there: the same queues, statuses, times, keys and dead letters. The
sequence engine's numbers are unsigned: each is made signed first, so that
``i % 7 - 3`` may be negative.
"""

from __future__ import annotations

JOBS = 1_000_000
DEAD_LETTERS = 100_000

# Queue sizes in thousandths, from a big default queue to a rare one (PostgreSQL's fill too).
QUEUE_SHARES = (
    "CASE WHEN b < 400 THEN 'default' WHEN b < 650 THEN 'emails' WHEN b < 800 THEN 'sms' "
    "WHEN b < 900 THEN 'webhooks' WHEN b < 950 THEN 'reports' WHEN b < 980 THEN 'exports' "
    "WHEN b < 999 THEN 'billing' ELSE 'rare' END"
)

FILL_JOBS = f"""
INSERT INTO django_jobqueue_job (name, queue, payload, priority, status, attempts, max_attempts,
    visibility_timeout, run_at, locked_by, locked_until, claim_token, unique_key, result, last_error,
    last_traceback, created_at, finished_at)
SELECT CONCAT(queue, '.task_', i % 4), queue,
    JSON_OBJECT('user_id', CAST(i % 500000 AS CHAR), 'seq', i), ((i % 7) - 3) * 10, status,
    CASE WHEN status IN ('done', 'running') THEN 1 ELSE 0 END, 5, 30,
    CASE WHEN status = 'ready' AND i % 100 = 0 THEN t + INTERVAL (1 + i % 7) DAY ELSE t END,
    CASE WHEN status = 'running' THEN CONCAT('worker-', i % 16) END,
    CASE WHEN status = 'running' THEN UTC_TIMESTAMP(6) + INTERVAL 30 SECOND END,
    CASE WHEN status IN ('done', 'running') THEN 1 ELSE 0 END,
    CASE WHEN i % 10 = 5 THEN CONCAT('key:', i) END,
    CASE WHEN status = 'done' THEN '{{"ok": true}}' END, '', '', t,
    CASE WHEN status IN ('done', 'cancelled') THEN t + INTERVAL 2 SECOND END
FROM (
    SELECT i, t, {QUEUE_SHARES} AS queue, status FROM (
        SELECT CAST(seq AS SIGNED) AS i,
            UTC_TIMESTAMP(6) - INTERVAL (({JOBS} - seq) * 86400) MICROSECOND AS t,
            (seq * 7919) % 1000 AS b,
            CASE
                WHEN seq % 100 = 0 THEN 'ready'
                WHEN seq % 100 = 1 THEN 'cancelled'
                WHEN seq > {JOBS - 50_000} AND seq % 50 = 3 THEN 'running'
                WHEN seq > {JOBS - 100_000} AND seq % 2 = 0 THEN 'ready'
                ELSE 'done' END AS status
        FROM seq_1_to_{JOBS}
    ) AS made
) AS g
"""

FILL_DEAD_LETTERS = f"""
INSERT INTO django_jobqueue_deadletter (job_id, name, queue, payload, priority, attempts, max_attempts,
    visibility_timeout, enqueued_at, worker_id, error, traceback, failed_at)
SELECT 2000000 + i, CONCAT(queue, '.task_', i % 4), queue,
    JSON_OBJECT('user_id', CAST(i % 500000 AS CHAR), 'seq', i), 0, 5, 5, 30,
    f - INTERVAL 1 HOUR, CONCAT('worker-', i % 16), CONCAT('ProviderError: no answer in ', i % 30, ' s'),
    CONCAT('Traceback (most recent call last):', CHAR(10),
        REPEAT(CONCAT('  File "/srv/app/sms/provider.py", line 88, in send_code', CHAR(10),
            '    raise ProviderError(reply["error"])', CHAR(10)), 8),
        'ProviderError: no answer in ', i % 30, ' s'),
    f
FROM (
    SELECT i, f, {QUEUE_SHARES} AS queue FROM (
        SELECT CAST(seq AS SIGNED) AS i,
            UTC_TIMESTAMP(6) - INTERVAL ({DEAD_LETTERS} - seq) * 26 SECOND AS f,
            (seq * 7919) % 1000 AS b
        FROM seq_1_to_{DEAD_LETTERS}
    ) AS made
) AS g
"""

TABLES = ("django_jobqueue_job", "django_jobqueue_deadletter", "django_jobqueue_worker")


def fill(cursor: object) -> None:
    """Empty the queue's tables and fill them (``cursor``: a Django cursor on MariaDB)."""
    for table in TABLES:
        cursor.execute(f"TRUNCATE TABLE {table}")  # type: ignore[attr-defined]
    cursor.execute(FILL_JOBS)  # type: ignore[attr-defined]
    cursor.execute(FILL_DEAD_LETTERS)  # type: ignore[attr-defined]
    for table in TABLES[:2]:
        cursor.execute(f"ANALYZE TABLE {table}")  # type: ignore[attr-defined]
        cursor.fetchall()  # type: ignore[attr-defined]


def ensure_database(url: str) -> None:
    """Create the MariaDB database of ``url`` if it does not exist yet."""
    from .databases import create_mysql_database

    create_mysql_database(url)
