"""Dead workers, long jobs, lost connections and wake-ups, with real processes."""

from __future__ import annotations

import re
import signal
import time
from collections import Counter

from django.conf import settings
from django.db import connection
from django.db.models.functions import Now

from django_jobqueue.models import DeadLetter, Job
from tests.jobs_for_workers import events
from tests.pooler import terminate_sessions
from tests.worker_support import wait_until


def starts(path: str) -> list[dict]:
    return [e for e in events(path) if e["event"] == "start"]


def test_a_sigkilled_workers_job_is_finished_by_another(queue, start_worker, events_path, tmp_path):
    release = tmp_path / "release"
    job = queue.push("workers.gate", {"path": events_path, "release": str(release)})
    doomed = start_worker("--visibility-timeout", "1", "--worker-id", "doomed")
    wait_until(lambda: starts(events_path), 10, "the job to start")
    survivor = start_worker("--visibility-timeout", "1", "--worker-id", "survivor", "--poll-interval", "0.1")
    survivor.wait_started()

    doomed.send(signal.SIGKILL)
    doomed.wait()
    release.touch()

    wait_until(lambda: Job.objects.filter(pk=job.pk, status="done").exists(), 10, "the rescued job to finish")
    job.refresh_from_db()
    assert (job.attempts, job.locked_by) == (2, "survivor")
    assert [e["worker"] for e in starts(events_path)] == ["doomed", "survivor"]
    assert "claim expired: worker doomed stopped without finishing attempt 1" in job.last_error


def test_the_heartbeat_keeps_a_job_three_times_its_timeout_on_one_worker(queue, start_worker, events_path):
    job = queue.push("workers.record", {"path": events_path, "value": "long", "seconds": 3.0})
    first = start_worker("--visibility-timeout", "1", "--worker-id", "first", "--poll-interval", "0.1")
    wait_until(lambda: starts(events_path), 10, "the job to start")
    second = start_worker("--visibility-timeout", "1", "--worker-id", "second", "--poll-interval", "0.1")
    second.wait_started()

    wait_until(lambda: Job.objects.filter(pk=job.pk, status="done").exists(), 10, "the long job")

    job.refresh_from_db()
    assert (job.attempts, job.locked_by) == (1, "first")
    assert [e["worker"] for e in starts(events_path)] == ["first"], "run exactly once"
    assert "claim lost" not in first.log() + second.log()
    for worker in (first, second):
        worker.send(signal.SIGTERM)
        assert worker.wait() == 0


def test_without_a_heartbeat_the_claim_would_have_expired(queue, events_path):
    """The control for the test above: the same claim, not beaten, is rescued after 1 s."""
    queue.push("workers.record", {"path": events_path, "value": "long"})
    claimed = queue.pull(worker_id="silent", visibility_timeout=1)
    assert claimed is not None
    wait_until(lambda: queue.tick_timeouts() == 1, 5, "the claim to expire")


def test_a_failed_bookkeeping_write_is_written_once_the_slot_reconnects(
    queue, start_worker, events_path, postgresql_only
):
    """The job ran; only its ack met a dead connection: the slot reconnects and writes it, no rerun."""
    job = queue.push("workers.cut_own_connection", {"path": events_path})

    worker = start_worker("--visibility-timeout", "1", "--poll-interval", "0.1", "--concurrency", "2")

    wait_until(lambda: Job.objects.filter(pk=job.pk, status="done").exists(), 15, "the job's ack")
    job.refresh_from_db()
    assert (job.attempts, job.result, job.last_error) == (1, 1, "")
    assert [e["attempt"] for e in starts(events_path)] == [1]
    assert f"job workers.cut_own_connection id={job.pk}: could not record its outcome" in worker.log()
    assert "backing off" in worker.log()
    assert f"job workers.cut_own_connection id={job.pk} attempt=1/5 duration=" in worker.log()
    worker.send(signal.SIGTERM)
    assert worker.wait() == 0


UNRECORDED = re.compile(r"job workers\.record id=(\d+) attempt=(\d+)/\d+ duration=\S+ outcome=unrecorded")


def assert_each_ran_until_recorded(jobs: list[Job], path: str, log: str) -> None:
    """Each of ``jobs`` ran once per attempt, to its end, and again only after an unrecorded outcome.

    Its last run is the attempt its row counts, the one acked. An earlier run
    is one whose outcome the worker could not record, and logged so: the ack
    went in a round whose connection was cut, and the job runs again when its
    claim expires (docs/guarantees.md). An attempt counts at its claim: a
    claim lost with its connection before the worker read it counts one that
    never ran.
    """
    attempts = dict(Job.objects.filter(pk__in=[job.pk for job in jobs]).values_list("pk", "attempts"))
    ran = Counter((e["job"], e["attempt"]) for e in starts(path))
    twice = sorted(run for run, n in ran.items() if n > 1)
    assert not twice, f"(job, attempt) run more than once: {twice}"
    ended = Counter((e["job"], e["attempt"]) for e in events(path) if e["event"] == "end")
    assert ran == ended, "each run went on to its end"
    last = {pk: attempt for pk, attempt in sorted(ran)}
    assert last == attempts, "each job's last run is its acked attempt"
    earlier = {(pk, attempt) for pk, attempt in ran if attempt < attempts[pk]}
    unrecorded = {(int(m[1]), int(m[2])) for m in UNRECORDED.finditer(log)}
    # A commit the server carried out as the connection was cut (MySQL ends a COMMIT it has
    # begun) reaches the worker as an error: logged unrecorded, its attempt is the job's last.
    landed = {(pk, attempt) for pk, attempt in unrecorded - earlier if attempts.get(pk) == attempt}
    assert earlier == unrecorded - landed, (
        f"run again though recorded: {sorted(earlier - unrecorded)}; "
        f"unrecorded and not run again: {sorted(unrecorded - earlier - landed)}"
    )


def test_lost_connections_are_survived(queue, start_worker, events_path, row_locks_only):
    """The sessions under a busy worker terminated five times: every job is run once and done.

    Directly, each cut ends every session of the worker (``KILL CONNECTION`` on
    MySQL), and its log shows the errors and the recovery. Behind a pooler a cut ends PgBouncer's server
    connections, which it replaces unseen when they are idle: there only the
    jobs are asserted, and that the cuts hit the pool.
    """
    jobs = queue.push_many(
        [
            ("workers.record", {"path": events_path, "value": i, "seconds": 0.01}, {"max_attempts": 20})
            for i in range(600)
        ]
    )
    worker = start_worker("--visibility-timeout", "1", "--concurrency", "4", "--poll-interval", "0.1")
    worker.wait_started()

    cuts = []
    for _round in range(5):
        wait_until(lambda: len(starts(events_path)) > 0, 10, "jobs to run")
        time.sleep(0.3)  # let the worker reconnect and get going between cuts
        cuts.append(terminate_sessions())
    left = Job.objects.exclude(status="done").count()

    wait_until(lambda: Job.objects.filter(status="done").count() == len(jobs), 30, "every job")
    assert left, "the last cut fell while jobs were still to run"
    assert sum(cut.sessions for cut in cuts) >= 5
    assert not DeadLetter.objects.exists()
    assert_each_ran_until_recorded(jobs, events_path, worker.log())
    assert worker.proc.poll() is None, "the worker is still up"
    if settings.POOLER_DATABASE:
        assert all(cut.pooled for cut in cuts), f"each cut ended PgBouncer's server connections: {cuts}"
    else:
        assert "database error" in worker.log() and "database reachable again" in worker.log()
    worker.send(signal.SIGTERM)
    assert worker.wait() == 0


def listening() -> bool:
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() "
            "AND query = 'LISTEN django_jobqueue'"
        )
        return bool(cursor.fetchone()[0])


def test_a_new_job_wakes_an_idle_worker_at_once_on_postgresql(
    queue, start_worker, events_path, postgresql_only
):
    worker = start_worker("--poll-interval", "30", "--queue", "watched")
    worker.wait_started()
    wait_until(listening, 10, "the worker to LISTEN")
    time.sleep(0.2)  # the first claiming round is over: the worker is idle, polling every 30 s

    latencies = []
    for i in range(5):
        enqueued = time.time()
        queue.push("workers.record", {"path": events_path, "value": i}, queue="watched")
        wait_until(lambda i=i: [e for e in starts(events_path) if e["value"] == i], 5, f"job {i}")
        latencies.append(next(e["time"] for e in starts(events_path) if e["value"] == i) - enqueued)

    assert max(latencies) < 0.5, latencies
    worker.send(signal.SIGTERM)
    assert worker.wait() == 0


def test_a_notification_for_another_queue_does_not_claim(queue, start_worker, events_path, postgresql_only):
    worker = start_worker("--poll-interval", "30", "--queue", "watched", "--concurrency", "1")
    worker.wait_started()
    wait_until(listening, 10, "the worker to LISTEN")

    other = queue.push("workers.record", {"path": events_path, "value": "other"}, queue="elsewhere")
    mine = queue.push("workers.record", {"path": events_path, "value": "mine"}, queue="watched")

    wait_until(lambda: Job.objects.filter(pk=mine.pk, status="done").exists(), 5, "the watched job")
    assert Job.objects.get(pk=other.pk).status == "ready"
    worker.send(signal.SIGTERM)
    assert worker.wait() == 0


def test_polling_finds_new_jobs_on_sqlite(queue, start_worker, events_path, sqlite_only):
    worker = start_worker("--poll-interval", "0.2")
    worker.wait_started()

    enqueued = time.time()
    queue.push("workers.record", {"path": events_path, "value": 1})

    wait_until(lambda: starts(events_path), 5, "the job")
    assert starts(events_path)[0]["time"] - enqueued < 1.0
    assert "wake-up=polling every 0.2s" in worker.log()


def test_an_expired_claim_of_a_live_worker_does_not_say_it_stopped(queue, events_path):
    """A worker whose row beat after its claim's deadline outlived the claim: not called dead."""
    queue.register_worker("alive", hostname="h", pid=1, queues=[], concurrency=1)
    job = queue.push("workers.record", {"path": events_path, "value": "x"})
    assert queue.pull(worker_id="alive", visibility_timeout=0.05) is not None
    wait_until(lambda: Job.objects.filter(pk=job.pk, locked_until__lt=Now()).exists(), 5, "the deadline")
    assert queue.worker_heartbeat("alive")

    assert queue.tick_timeouts() == 1
    job.refresh_from_db()
    assert job.status == "ready"
    expected = "claim expired: worker alive outlived its claim on attempt 1 without finishing it"
    assert expected in job.last_error
    assert "stopped" not in job.last_error
