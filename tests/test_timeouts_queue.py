"""The queue's side of time limits and cancellation.

An attempt's time limit is declared (enqueue option, ``@job``, setting),
resolved at enqueue and fixed on the row, and travels with the job through
every statement that writes or moves it. A worker's cancel watch asks
``ended_claims`` which of its claims ended, and on PostgreSQL is woken on
``CANCEL_CHANNEL`` when a running job is cancelled.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from importlib.util import find_spec
from typing import Any

import pytest
from django.conf import settings
from django.db import DatabaseError, connection, transaction
from django.test.utils import CaptureQueriesContext, override_settings
from django.utils import timezone

from django_jobqueue import QueueClient, enqueue, enqueue_many, job, registry
from django_jobqueue.checks import check_jobqueue_settings
from django_jobqueue.models import DeadLetter, Job
from django_jobqueue.queue import CANCEL_CHANNEL
from django_jobqueue.queue.ops import tables
from django_jobqueue.queue.schedules import ScheduleBook
from django_jobqueue.queue.timetable import Schedule

LIMITED = "tests.timeouts.limited"
UNLIMITED = "tests.timeouts.unlimited"
UNREGISTERED = "tests.timeouts.unregistered"
WEEK = 7 * 86400


@job(name=LIMITED, timeout=30)
def limited(n: int = 0) -> int:
    return n


@job(name=UNLIMITED)
def unlimited(n: int = 0) -> int:
    return n


def timeout_setting(value: Any) -> override_settings:
    """The test project's ``JOBQUEUE`` with ``TIMEOUT`` set to ``value``."""
    return override_settings(JOBQUEUE={**settings.JOBQUEUE, "TIMEOUT": value})


def stored(made: Job) -> float | None:
    """The timeout the row holds, checked to be the one the returned Job says."""
    row = Job.objects.get(pk=made.pk)
    assert row.timeout == made.timeout
    return row.timeout


# -- which limit a job gets --------------------------------------------------------


@timeout_setting(300)
def test_the_enqueue_option_wins_over_the_job_and_the_job_over_the_setting(queue):
    assert stored(enqueue(LIMITED, timeout=5)) == 5.0
    assert stored(enqueue(LIMITED)) == 30.0
    assert stored(limited.enqueue(n=1)) == 30.0
    assert stored(limited.using(timeout=7).enqueue(n=1)) == 7.0
    assert stored(queue.push(LIMITED, {}, timeout=8)) == 8.0
    # A job whose @job says nothing, and one not registered here: the setting's.
    assert stored(unlimited.enqueue()) == 300.0
    assert stored(enqueue(UNREGISTERED)) == 300.0
    assert stored(enqueue(UNREGISTERED, timeout=2.5)) == 2.5


@timeout_setting(300)
def test_an_explicit_none_means_the_default_as_for_every_other_option(queue):
    assert stored(enqueue(LIMITED, timeout=None)) == 30.0
    assert stored(limited.using(timeout=None).enqueue()) == 30.0
    assert stored(enqueue(UNREGISTERED, timeout=None, max_attempts=None)) == 300.0
    assert stored(enqueue_many([(LIMITED, {}, {"timeout": None})])[0]) == 30.0


def test_without_the_setting_a_job_has_no_limit(queue):
    assert stored(enqueue(UNREGISTERED)) is None
    assert stored(unlimited.enqueue()) is None
    assert stored(limited.enqueue()) == 30.0


@timeout_setting(300)
@pytest.mark.parametrize("size", [3, 40])  # one INSERT; on PostgreSQL a COPY
def test_enqueue_many_resolves_each_items_limit(queue, size):
    items: list[Any] = []
    for i in range(size):
        kind = i % 4
        if kind == 0:
            items.append((LIMITED, {"n": i}))  # the per-name fast path after the first
        elif kind == 1:
            items.append((LIMITED, {"n": i}, {"timeout": 9}))
        elif kind == 2:
            items.append((UNREGISTERED, {"n": i}))
        else:
            items.append((UNLIMITED, {"n": i}, {"timeout": timedelta(minutes=2)}))
    made = enqueue_many(items)
    expected = [(30.0, 9.0, 300.0, 120.0)[i % 4] for i in range(size)]
    assert [j.timeout for j in made] == expected
    rows = Job.objects.in_bulk([j.pk for j in made])
    assert [rows[j.pk].timeout for j in made] == expected


def test_a_timedelta_is_taken_everywhere_as_its_seconds(queue):
    @job(name="tests.timeouts.minutes", timeout=timedelta(minutes=3))
    def minutes() -> None: ...

    try:
        assert stored(minutes.enqueue()) == 180.0
        assert stored(enqueue(UNREGISTERED, timeout=timedelta(seconds=1.5))) == 1.5
        assert stored(limited.using(timeout=timedelta(hours=1)).enqueue()) == 3600.0
        assert stored(enqueue_many([(UNREGISTERED, {}, {"timeout": timedelta(days=7)})])[0]) == WEEK
        with timeout_setting(timedelta(seconds=45)):
            assert stored(enqueue(UNREGISTERED)) == 45.0
            assert not [e for e in check_jobqueue_settings() if e.id == "django_jobqueue.E013"]
    finally:
        registry.unregister("tests.timeouts.minutes")


# -- bad limits --------------------------------------------------------------------

BAD_TIMEOUTS = [
    pytest.param(0, "more than 0 seconds", id="zero"),
    pytest.param(-1, "more than 0 seconds", id="negative"),
    pytest.param(timedelta(seconds=-5), "more than 0 seconds", id="negative-timedelta"),
    pytest.param(math.nan, "finite", id="nan"),
    pytest.param(math.inf, "finite", id="inf"),
    pytest.param(WEEK + 1, "at most 604800 seconds", id="over-a-week"),
    pytest.param(timedelta(days=8), "at most 604800 seconds", id="over-a-week-timedelta"),
    pytest.param(10**400, "more than 7 days", id="huge-int"),
    pytest.param("30", "timedelta or seconds, not str", id="string"),
    pytest.param(True, "timedelta or seconds, not bool", id="bool"),
]


@contextmanager
def refused(match: str) -> Iterator[None]:
    """Expect a ``ValueError`` naming the timeout option, with not one query on the way."""
    with CaptureQueriesContext(connection) as queries, pytest.raises(ValueError, match=match) as raised:
        yield
    assert "timeout" in str(raised.value)
    assert len(queries) == 0, "refused before any SQL"


@pytest.mark.parametrize(("bad", "match"), BAD_TIMEOUTS)
def test_a_bad_limit_is_refused_before_anything_is_written(queue, bad, match):
    with refused(match):
        enqueue(LIMITED, timeout=bad)
    with refused(match):
        queue.push(UNREGISTERED, {}, timeout=bad)
    with refused(match):
        limited.using(timeout=bad).enqueue()
    with refused(rf"item 2: .*{match}"):
        enqueue_many([(LIMITED, {}), (LIMITED, {}), (LIMITED, {}, {"timeout": bad})])
    assert not Job.objects.exists()


@pytest.mark.parametrize(("bad", "match"), BAD_TIMEOUTS[:3])
def test_a_bad_limit_deep_in_a_large_batch_writes_nothing(queue, bad, match):
    items: list[Any] = [(LIMITED, {"n": i}) for i in range(700)]
    items[650] = (LIMITED, {"n": 650}, {"timeout": bad})
    # A batch that goes by COPY is checked as it streams: the COPY is abandoned and rolled back.
    with pytest.raises(ValueError, match=rf"item 650: timeout .*{match}"):
        enqueue_many(items)
    assert not Job.objects.exists()


@pytest.mark.parametrize(("bad", "match"), BAD_TIMEOUTS)
def test_job_refuses_a_bad_limit_when_the_module_is_imported(bad, match):
    with pytest.raises(ValueError, match=match):

        @job(name="tests.timeouts.bad", timeout=bad)
        def bad_job() -> None: ...

    assert registry.lookup("tests.timeouts.bad") is None


@pytest.mark.parametrize(("bad", "match"), BAD_TIMEOUTS)
def test_a_bad_setting_is_a_check_error(bad, match):
    with timeout_setting(bad):
        errors = [e for e in check_jobqueue_settings() if e.id == "django_jobqueue.E013"]
    assert len(errors) == 1
    assert "JOBQUEUE['TIMEOUT']" in errors[0].msg and match.split(" (")[0] in errors[0].msg


@pytest.mark.parametrize("good", [None, 0.5, 30, WEEK, timedelta(hours=2)])
def test_a_good_setting_passes_its_check(good):
    with timeout_setting(good):
        assert not [e for e in check_jobqueue_settings() if e.id == "django_jobqueue.E013"]


def test_a_week_is_the_longest_limit(queue):
    assert stored(enqueue(UNREGISTERED, timeout=WEEK)) == WEEK
    assert stored(enqueue(UNREGISTERED, timeout=timedelta(days=7))) == WEEK


# -- the limit travels with the job -------------------------------------------------


def claim_one(queue: QueueClient, worker_id: str = "w1") -> Job:
    claimed = queue.pull(worker_id=worker_id)
    assert claimed is not None
    return claimed


def expire(job_id: int) -> None:
    """Put a claim's deadline in the past, as if its worker had died."""
    Job.objects.filter(pk=job_id).update(locked_until=timezone.now() - timedelta(minutes=5))


@pytest.mark.parametrize("limit", [12.5, None])
def test_the_limit_survives_nack_to_dead_letter_and_retry(queue, limit):
    made = enqueue(UNLIMITED, timeout=limit, max_attempts=1)
    assert queue.nack(claim_one(queue), worker_id="w1", error="boom")
    letter = DeadLetter.objects.get(job_id=made.pk)
    assert letter.timeout == limit
    revived = queue.retry_dead_letter(letter)
    assert revived.timeout == limit and stored(revived) == limit


def test_the_limit_survives_fail_and_a_batch_retry(queue):
    made = enqueue(UNLIMITED, timeout=4)
    assert queue.fail(claim_one(queue), worker_id="w1", error="no")
    assert DeadLetter.objects.get(job_id=made.pk).timeout == 4.0
    assert queue.retry_dead_letters(DeadLetter.objects.all()) == 1
    assert Job.objects.get().timeout == 4.0


def test_the_limit_survives_an_expired_claim_whose_attempts_are_spent(queue):
    made = enqueue(LIMITED, max_attempts=1)
    expire(claim_one(queue).pk)
    assert queue.tick_timeouts() == 1
    assert DeadLetter.objects.get(job_id=made.pk).timeout == 30.0
    assert queue.retry_dead_letters([DeadLetter.objects.get()]) == 1
    assert Job.objects.get().timeout == 30.0


@pytest.mark.parametrize("size", [5, 40])
def test_batch_paths_store_the_limit_and_return_it(queue, on_postgresql, size):
    # Unique keys send a batch through INSERT ... ON CONFLICT (arrays on
    # PostgreSQL); a plain batch of 16 or more goes by COPY there.
    keyed = [(UNLIMITED, {"n": i}, {"timeout": i + 1, "unique_key": f"k{i}"}) for i in range(size)]
    plain = [(UNLIMITED, {"n": i}, {"timeout": None if i % 2 else i + 0.5}) for i in range(size)]
    for items in (keyed, plain):
        with CaptureQueriesContext(connection) as queries:
            made = enqueue_many(items)
        expected = [options["timeout"] for _, _, options in items]
        assert [j.timeout for j in made] == expected
        rows = Job.objects.in_bulk([j.pk for j in made])
        assert [rows[j.pk].timeout for j in made] == expected
        copied = any(q["sql"].startswith("COPY") for q in queries.captured_queries)
        assert copied == (on_postgresql and items is plain and size >= 16)


def test_a_fired_schedule_gets_its_jobs_limit(queue):
    schedule = Schedule(name="timeouts.minutely", job=LIMITED, every=60)
    book = ScheduleBook()
    start = datetime(2026, 6, 1, 12, 0, 30, tzinfo=UTC)
    book.sync([schedule], now=start)
    fired = book.fire_due([schedule], now=start + timedelta(seconds=31))
    assert len(fired) == 1 and len(fired[0].job_ids) == 1
    assert Job.objects.get(pk=fired[0].job_ids[0]).timeout == 30.0
    assert stored(book.run_now(schedule)) == 30.0


@pytest.mark.skipif(
    find_spec("django.tasks") is None and find_spec("django_tasks") is None,
    reason="needs Django's Tasks framework (Django 6, or django-tasks on 5.2)",
)
def test_a_django_task_gets_the_settings_limit(queue):
    from tests import tasks_for_workers as tasks

    assert Job.objects.get(pk=int(tasks.add.enqueue(1, 2).id)).timeout is None
    with timeout_setting(60):
        assert Job.objects.get(pk=int(tasks.add.enqueue(1, 2).id)).timeout == 60.0


# -- ended_claims: a worker's cancel watch -----------------------------------------


def test_ended_claims_names_the_claims_that_ended_and_why(queue):
    for n in range(5):
        enqueue(UNLIMITED, {"n": n})
    current, cancelled, reclaimed, acked, released = queue.pull_many(worker_id="w1", limit=5)
    assert queue.cancel(cancelled)
    expire(reclaimed.pk)
    assert queue.tick_timeouts() == 1
    again = claim_one(queue, "w2")
    assert again.pk == reclaimed.pk and again.claim_token != reclaimed.claim_token
    assert queue.ack(acked, worker_id="w1")
    assert queue.release(released, worker_id="w1")
    held = [current, cancelled, reclaimed, acked, released]
    assert queue.ended_claims(held) == {
        cancelled.pk: "cancelled",
        reclaimed.pk: "lost",
        acked.pk: "lost",
        released.pk: "lost",
    }
    assert queue.ended_claims([again, current]) == {}


def test_ended_claims_of_a_deleted_job_is_lost(queue):
    enqueue(UNLIMITED)
    claimed = claim_one(queue)
    with override_settings(JOBQUEUE={**settings.JOBQUEUE, "KEEP_COMPLETED": 0}):
        assert queue.ack(claimed, worker_id="w1")
    assert not Job.objects.exists()
    assert queue.ended_claims([claimed]) == {claimed.pk: "lost"}


def test_a_cancelled_job_reads_cancelled_whoever_held_it(queue):
    enqueue(UNLIMITED)
    first = claim_one(queue)
    expire(first.pk)
    queue.tick_timeouts()
    second = claim_one(queue, "w2")
    assert queue.cancel(second)
    assert queue.ended_claims([first, second]) == {first.pk: "cancelled"}


def test_ended_claims_reads_by_primary_key_in_batches_and_writes_nothing(queue):
    enqueue_many([(UNLIMITED, {"n": n}) for n in range(1200)])
    held = queue.pull_many(worker_id="w1", limit=1200)
    assert len(held) == 1200
    cancelled, acked = held[:400], held[400:800]
    assert len(queue.cancel_jobs(cancelled)) == 400
    assert len(queue.ack_many([(j, None) for j in acked], worker_id="w1")) == 400
    with CaptureQueriesContext(connection) as queries:
        ended = queue.ended_claims(held)
    assert ended == {j.pk: "cancelled" for j in cancelled} | {j.pk: "lost" for j in acked}
    statements = [q["sql"] for q in queries.captured_queries]
    assert len(statements) == 3, "one SELECT per 500 claims"
    assert all(sql.startswith("SELECT id, status, claim_token FROM") for sql in statements)
    assert all(" WHERE id IN (" in sql for sql in statements)


def test_no_claims_ask_no_query(queue):
    with CaptureQueriesContext(connection) as queries:
        assert queue.ended_claims([]) == {}
    assert len(queries) == 0


# -- cancelling wakes the workers (PostgreSQL) --------------------------------------


@pytest.fixture
def cancel_listener(postgresql_only: None, transactional_db: None) -> Iterator[Any]:
    """A psycopg connection LISTENing on the cancel channel."""
    import psycopg

    params = connection.get_connection_params()
    params.pop("cursor_factory", None)
    params.pop("context", None)
    with psycopg.connect(**params, autocommit=True) as conn:
        conn.execute(f"LISTEN {CANCEL_CHANNEL}")
        yield conn


def payloads(conn: Any, timeout: float = 0.3) -> list[str]:
    """The payloads notified to ``conn`` in the next ``timeout`` seconds."""
    return [notify.payload for notify in conn.notifies(timeout=timeout)]


def running_and_ready(queue: QueueClient, running: int, ready: int) -> tuple[list[Job], list[Job]]:
    enqueue_many([(UNLIMITED, {"n": n}) for n in range(running)])
    claimed = queue.pull_many(worker_id="w1", limit=running) if running else []
    waiting = enqueue_many([(UNLIMITED, {"n": n}) for n in range(ready)])
    return claimed, waiting


def test_cancelling_a_running_job_notifies_on_commit_only(queue, cancel_listener):
    (running,), (ready,) = running_and_ready(queue, 1, 1)
    with transaction.atomic():
        changes = queue.cancel_jobs([running, ready])
        assert payloads(cancel_listener) == [], "nothing before the commit"
    assert payloads(cancel_listener) == [str(running.pk)]
    assert [(c.job_id, c.was_running) for c in changes] == [(running.pk, True), (ready.pk, False)]


def test_a_rolled_back_cancel_notifies_nobody(queue, cancel_listener):
    (running,), _ = running_and_ready(queue, 1, 0)
    with pytest.raises(RuntimeError), transaction.atomic():
        assert queue.cancel(running)
        raise RuntimeError("the request failed")
    assert payloads(cancel_listener) == []
    assert Job.objects.get().status == "running"


def test_cancelling_only_ready_jobs_notifies_nobody(queue, cancel_listener):
    _, ready = running_and_ready(queue, 0, 3)
    assert len(queue.cancel_jobs(ready)) == 3
    assert payloads(cancel_listener) == []


def test_a_cancel_of_many_running_jobs_names_them_in_each_batchs_notification(queue, cancel_listener):
    running, ready = running_and_ready(queue, 600, 10)
    assert len(queue.cancel_jobs([*running, *ready])) == 610
    received = payloads(cancel_listener, timeout=1.0)
    assert len(received) == 2, "one notification per statement of 500"
    named = [int(job_id) for payload in received for job_id in payload.split(",")]
    assert sorted(named) == sorted(j.pk for j in running)


def test_a_long_list_of_ids_is_cut_to_fit_a_notification(queue, cancel_listener):
    ids = [10**17 + n for n in range(500)]  # 18 digits each: 9,499 bytes in full
    with transaction.atomic():
        tables.notify_cancelled("default", ids)
    (payload,) = payloads(cancel_listener)
    assert len(payload.encode()) < 8000
    named = payload.split(",")
    assert named == [str(job_id) for job_id in ids[: len(named)]] and len(named) > 400


def test_cancel_sends_no_notification_where_the_database_has_none(queue, sqlite_only):
    (running,), _ = running_and_ready(queue, 1, 0)
    with CaptureQueriesContext(connection) as queries:
        (change,) = queue.cancel_jobs([running])
    assert change.was_running
    assert not [q for q in queries.captured_queries if "notify" in q["sql"].lower()]
    # In a transaction of its own, as the counts of a batch's jobs and the cascade over
    # dependents move with the cancel; the dependency edges' deletes find none here.
    statements = [
        q["sql"] for q in queries.captured_queries if q["sql"].split()[0] not in ("BEGIN", "COMMIT")
    ]
    assert [sql.split()[:3] for sql in statements] == [
        ["UPDATE", "django_jobqueue_job", "SET"],
        ["DELETE", "FROM", "django_jobqueue_dependency"],
        ["DELETE", "FROM", "django_jobqueue_dependency"],
    ], "the cancel, and its dependency edges"


def test_a_cancelled_running_job_keeps_its_owner_and_a_ready_one_has_none(queue):
    (running,), (ready,) = running_and_ready(queue, 1, 1)
    queue.cancel_jobs([running, ready])
    rows = Job.objects.in_bulk([running.pk, ready.pk])
    assert (rows[running.pk].status, rows[running.pk].locked_by) == ("cancelled", "w1")
    assert (rows[ready.pk].status, rows[ready.pk].locked_by) == ("cancelled", None)


def test_the_cancel_and_its_notification_commit_together_or_not_at_all(queue, cancel_listener, monkeypatch):
    (running,), _ = running_and_ready(queue, 1, 0)
    monkeypatch.setattr(tables, "CANCEL_CHANNEL", "")  # PostgreSQL refuses to notify an empty channel
    with pytest.raises(DatabaseError, match="channel name cannot be empty"):
        queue.cancel(running)
    assert Job.objects.get().status == "running", "the cancel rolled back with its notification"
