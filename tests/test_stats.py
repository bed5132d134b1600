"""The read-only figures behind the overview and ``jobqueue status``."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.db import connection
from django.utils import timezone

from django_jobqueue import stats
from django_jobqueue.column_values import distinct_values
from django_jobqueue.models import DeadLetter, Job
from django_jobqueue.queue.flow import QueueLimits, Rate


@pytest.mark.parametrize(
    ("seconds", "shown"),
    [
        (None, "—"),
        (-3, "0 s"),
        (0.4, "0 s"),
        (59.4, "59 s"),
        (60, "1 min"),
        (3599, "59 min"),
        (3600, "1 h"),
        (3 * 3600 + 5 * 60, "3 h 5 min"),
        (86400, "1 d"),
        (2 * 86400 + 4 * 3600 + 59, "2 d 4 h"),
    ],
)
def test_format_age(seconds, shown):
    assert stats.format_age(seconds) == shown


def test_distinct_values_skip_through_an_index(queue):
    for name in ["c", "a", "b", "a", "c"]:
        queue.push(f"job.{name}", {}, queue=f"q-{name}")
    assert distinct_values(Job, "queue", "default") == ["q-a", "q-b", "q-c"]
    assert distinct_values(Job, "name", "default", limit=2) == ["job.a", "job.b"]
    assert distinct_values(DeadLetter, "queue", "default") == []


def test_distinct_values_find_every_kind_of_job(queue):
    """Done, cancelled, ready (keyed or not), running and waiting jobs each offer their queue and name.

    On PostgreSQL the live jobs have no index on either: each kind is read its own way.
    """
    queue.push("job.done", {}, queue="q-done")
    queue.ack(queue.pull(worker_id="w"), worker_id="w")
    queue.cancel(queue.push("job.cancelled", {}, queue="q-cancelled"))
    queue.push("job.running", {}, queue="q-running")
    queue.pull("q-running", worker_id="w")
    queue.push("job.ready", {}, queue="q-ready")
    queue.push("job.keyed", {}, queue="q-keyed", concurrency_key="k", concurrency_limit=1)
    first = queue.push("job.first", {}, queue="q-first")
    queue.push("job.waiting", {}, queue="q-waiting", depends_on=[first])
    kinds = ["done", "cancelled", "running", "ready", "keyed", "first", "waiting"]
    assert distinct_values(Job, "queue", "default") == sorted(f"q-{kind}" for kind in kinds)
    assert distinct_values(Job, "name", "default") == sorted(f"job.{kind}" for kind in kinds)


def test_the_last_hour_counts_each_minute_by_the_database_clock(queue):
    for _ in range(3):
        queue.push("tests.noop", {})
    for job in queue.pull_many(worker_id="w", limit=3):
        queue.ack(job, worker_id="w")
    now = stats.database_now("default")
    Job.objects.filter(pk=Job.objects.order_by("pk").first().pk).update(
        finished_at=now - timedelta(minutes=30)
    )
    minutes = stats.last_hour("default", now)
    assert len(minutes) == 60 and minutes[-1].start <= now < minutes[-1].start + timedelta(minutes=1)
    assert [m.done for m in minutes if m.done] == [1, 2]
    assert minutes[29].done == 1, "thirty minutes ago is the thirtieth bar"
    assert abs((now - timezone.now()).total_seconds()) < 5


def test_ready_jobs_with_and_without_a_key_add_up_per_queue(queue):
    now = stats.database_now("default")
    for minutes_ago, key in [(5, None), (20, "tenant:1"), (-10, "tenant:1"), (-10, None)]:
        job = queue.push("tests.noop", {}, queue="emails")
        Job.objects.filter(pk=job.pk).update(run_at=now - timedelta(minutes=minutes_ago), concurrency_key=key)
    [emails] = stats.overview("default", minutes=False).queues
    assert (emails.ready, emails.scheduled) == (2, 2)
    assert 19 * 60 < emails.oldest_ready_age < 21 * 60, "the oldest of both halves"


def test_describe_limits():
    assert stats.describe_limits(QueueLimits()) == "—"
    assert stats.describe_limits(QueueLimits(12000, Rate(100, 60))) == "12,000 at once, 100/m"
    assert stats.describe_limits(QueueLimits(rate=Rate(5, 1))) == "5/s"


def test_the_figures_are_read_in_one_snapshot_planned_for_their_indexes(postgresql_only, transactional_db):
    """The figures' transaction rules out table scans and JIT, and only that transaction does."""

    def settings() -> tuple[str, str, str]:
        with connection.cursor() as cursor:
            cursor.execute("SELECT current_setting('transaction_isolation'), "
                           "current_setting('enable_seqscan'), current_setting('jit')")  # fmt: skip
            return cursor.fetchone()

    outside = settings()
    with stats.one_snapshot("default"):
        assert settings() == ("repeatable read", "off", "off")
    assert settings() == outside
    assert outside[1] == "on"
