"""What the job table itself allows on MySQL/MariaDB: the baseline's statements, on the queue's table.

The raw baseline (``raw_mysql.py``) runs on a table of its own with one
secondary index. The job table has ten (the claim indexes, the keyed,
expiry, finished and batch indexes, the live unique key, the admin's), each
of which an insert writes and a status change may move. These measure the
baseline's own statements, mysqlclient alone and no Python per job, on the
job table as the migrations leave it: the most any queue with that table
could reach, against which ours is read as well as against the baseline.
"""

from __future__ import annotations

import time

from .raw_mysql import claim_and_ack_rate, connect, insert_rows

JOB = "django_jobqueue_job"
# The columns without a default, and a ready no-op job's values for them.
_COLUMNS = (
    "name, queue, payload, priority, status, attempts, max_attempts, visibility_timeout, run_at, "
    "claim_token, last_error, last_traceback, created_at"
)
_ROW = "('bench.noop', 'default', %s, 0, 'ready', 0, 3, 30, UTC_TIMESTAMP(6), 0, '', '', UTC_TIMESTAMP(6))"
# The claim's locking read as the worker's pick makes it (``queue/ops/picks.py``), of one rank.
_PICK = (
    f"SELECT id FROM {JOB} FORCE INDEX (jq_claim_idx) WHERE jq_ready_keyed = 0 AND queue = 'default' "
    "AND jq_rank IN (0) AND run_at <= UTC_TIMESTAMP(6) AND status = 'ready' AND concurrency_key IS NULL "
    "ORDER BY jq_rank, run_at, id LIMIT %s FOR UPDATE SKIP LOCKED"
)
# The claim and the ack by id, as the worker's round writes them.
_CLAIM = (
    f"UPDATE {JOB} FORCE INDEX (PRIMARY) SET status = 'running', locked_by = 'raw', "
    "attempts = attempts + 1, claim_token = claim_token + 1, "
    "locked_until = UTC_TIMESTAMP(6) + INTERVAL 30 SECOND, "
    "started_at = UTC_TIMESTAMP(6), last_attempted_at = UTC_TIMESTAMP(6) WHERE id IN ({ids})"
)
_ACK = (
    f"UPDATE {JOB} FORCE INDEX (PRIMARY) SET status = 'done', locked_by = NULL, locked_until = NULL, "
    "finished_at = UTC_TIMESTAMP(6), result = 'null' WHERE id IN ({ids}) AND locked_by = 'raw'"
)


def _empty(url: str) -> None:
    conn = connect(url)
    conn.cursor().execute(f"DELETE FROM {JOB}")
    conn.close()


def insert_many(url: str, count: int, rows_per_statement: int = 500) -> float:
    """Jobs/s for ``count`` ready-made jobs inserted into the job table by multi-row INSERTs,
    in one transaction."""
    _empty(url)
    conn = connect(url)
    started = time.perf_counter()
    conn.begin()
    insert_rows(conn.cursor(), JOB, _COLUMNS, _ROW, count, rows_per_statement)
    conn.commit()
    rate = count / (time.perf_counter() - started)
    conn.close()
    _empty(url)
    return rate


def claim_and_ack(url: str, count: int, batch: int = 100) -> float:
    """Jobs/s of one connection claiming ``batch`` jobs of the job table a transaction, then marking
    them done (the queue's default ack), ``count`` in all."""
    _empty(url)
    conn = connect(url)
    insert_rows(conn.cursor(), JOB, _COLUMNS, _ROW, count)
    rate = claim_and_ack_rate(conn, JOB, _PICK, _CLAIM, _ACK, count, batch)
    conn.close()
    _empty(url)
    return rate
