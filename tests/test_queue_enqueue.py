"""Enqueueing: an ordinary insert on the caller's connection, with defaults and batches."""

from __future__ import annotations

import gc
import zoneinfo
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from django.db import connection, transaction
from django.test.utils import CaptureQueriesContext, override_settings
from django.utils import timezone

from django_jobqueue import enqueue, enqueue_many, job
from django_jobqueue import registry as job_registry
from django_jobqueue.models import Job
from django_jobqueue.queue import engine_for

from .conftest import count_jobs, received


def test_enqueue_is_invisible_to_other_connections_until_commit(queue, other_connection):
    with transaction.atomic():
        enqueue("tests.noop", {"n": 1})
        assert count_jobs(connection) == 1
        assert count_jobs(other_connection) == 0
    assert count_jobs(other_connection) == 1


def test_rollback_leaves_no_job(queue):
    with pytest.raises(RuntimeError), transaction.atomic():
        enqueue("tests.noop", {"n": 1})
        raise RuntimeError("the request failed")
    assert Job.objects.count() == 0


def test_savepoint_rollback_leaves_no_job_but_keeps_the_outer_one(queue):
    with transaction.atomic():
        enqueue("tests.noop", {"outer": True})
        with pytest.raises(RuntimeError), transaction.atomic():
            enqueue("tests.noop", {"inner": True})
            raise RuntimeError("inner step failed")
    assert list(Job.objects.values_list("payload", flat=True)) == [{"outer": True}]


def test_enqueue_returns_a_ready_job_with_defaults(queue):
    before = timezone.now()
    created = enqueue("tests.noop", {"user_id": "42"})
    row = Job.objects.get(pk=created.pk)
    assert (row.status, row.queue, row.priority, row.attempts) == ("ready", "default", 0, 0)
    assert (row.max_attempts, row.visibility_timeout) == (5, 30.0)
    assert row.payload == created.payload == {"user_id": "42"}
    # The database's clock; allow for a little skew between it and ours.
    assert abs((row.run_at - before).total_seconds()) < 5
    assert row.created_at == created.created_at


def test_delay_and_run_at_set_when_a_job_becomes_due(queue):
    delayed = enqueue("tests.noop", delay=timedelta(minutes=5))
    at = timezone.now() + timedelta(hours=2)
    scheduled = enqueue("tests.noop", run_at=at)
    assert 290 < (delayed.run_at - delayed.created_at).total_seconds() < 310
    assert abs((Job.objects.get(pk=scheduled.pk).run_at - at).total_seconds()) < 0.001
    assert queue.pull(worker_id="w") is None  # neither is due


def test_job_decorator_defaults_apply_also_when_enqueued_by_name(queue):
    @job(name="tests.send_otp", queue="emails", priority=10, max_attempts=7, visibility_timeout=12)
    def send_otp(user_id: str) -> None:
        pass

    try:
        by_function = send_otp.enqueue(user_id="1")
        by_name = enqueue("tests.send_otp", {"user_id": "2"})
        overridden = send_otp.using(queue="urgent", priority=50, max_attempts=2).enqueue(user_id="3")
    finally:
        job_registry.unregister("tests.send_otp")
    for made in (by_function, by_name):
        assert (made.queue, made.priority, made.max_attempts, made.visibility_timeout) == (
            "emails",
            10,
            7,
            12.0,
        )
    assert (overridden.queue, overridden.priority, overridden.max_attempts) == ("urgent", 50, 2)
    assert by_function.payload == {"user_id": "1"}


def test_job_name_defaults_to_module_and_qualname():
    @job
    def rebuild_index() -> str:
        return "rebuilt"

    try:
        expected = f"{__name__}.test_job_name_defaults_to_module_and_qualname.<locals>.rebuild_index"
        assert rebuild_index.name == expected
        assert rebuild_index() == "rebuilt"  # calling it runs it here
    finally:
        job_registry.unregister(rebuild_index.name)


def test_a_name_taken_by_another_function_is_refused():
    @job(name="tests.taken")
    def first() -> None:
        pass

    try:
        with pytest.raises(ValueError, match="already registered"):

            @job(name="tests.taken")
            def second() -> None:
                pass
    finally:
        job_registry.unregister("tests.taken")


@override_settings(JOBQUEUE={"DEFAULT_QUEUE": "fallback", "MAX_ATTEMPTS": 9, "VISIBILITY_TIMEOUT": 3})
def test_settings_supply_what_the_call_and_decorator_leave_out(queue):
    made = enqueue("tests.unregistered")
    assert (made.queue, made.max_attempts, made.visibility_timeout) == ("fallback", 9, 3.0)


def test_enqueue_many_writes_one_batch_in_order(queue):
    items = [("tests.noop", {"i": i}) for i in range(300)]
    items.append(("tests.other", {"i": 300}, {"priority": 5, "queue": "q2"}))
    with CaptureQueriesContext(connection) as queries:
        made = enqueue_many(items, queue="bulk")
    # One write statement: an INSERT, or on PostgreSQL a COPY. MySQL has no INSERT … RETURNING
    # and does not promise one insert's rows consecutive ids: there, one INSERT a row.
    writes = [q for q in queries.captured_queries if q["sql"].lstrip().upper().startswith(("INSERT", "COPY"))]
    assert len(writes) == (1 if engine_for(connection).supports_insert_returning else 301)
    assert [m.payload["i"] for m in made] == list(range(301))
    assert {m.queue for m in made[:300]} == {"bulk"}
    assert (made[-1].queue, made[-1].priority, made[-1].name) == ("q2", 5, "tests.other")
    assert Job.objects.count() == 301


def test_enqueue_many_of_thousands_is_chunked_and_atomic(queue):
    made = enqueue_many([("tests.noop", {"i": i}) for i in range(1200)])
    assert len({m.pk for m in made}) == 1200
    with pytest.raises(ValueError, match="item 3"):
        enqueue_many([("tests.noop", {})] * 3 + [("tests.noop", {}, {"priority": 500})])
    assert Job.objects.count() == 1200  # the bad batch wrote nothing


def test_unique_key_returns_the_live_job_instead_of_inserting(queue):
    first = enqueue("tests.otp", {"n": 1}, unique_key="otp:7")
    again = enqueue("tests.otp", {"n": 2}, unique_key="otp:7")
    assert again.pk == first.pk and again.payload == {"n": 1}
    assert Job.objects.count() == 1
    # Running still counts as live.
    claimed = queue.pull(worker_id="w")
    assert enqueue("tests.otp", unique_key="otp:7").pk == first.pk
    # Once finished, the key is free again.
    assert queue.ack(claimed, worker_id="w")
    fresh = enqueue("tests.otp", {"n": 3}, unique_key="otp:7")
    assert fresh.pk != first.pk and fresh.status == "ready"


def test_unique_keys_inside_one_batch(queue):
    made = enqueue_many(
        [
            ("tests.otp", {"n": 1}, {"unique_key": "a"}),
            ("tests.otp", {"n": 2}),
            ("tests.otp", {"n": 3}, {"unique_key": "a"}),
            ("tests.otp", {"n": 4}, {"unique_key": "b"}),
        ]
    )
    assert made[0].pk == made[2].pk
    assert [m.payload["n"] for m in made] == [1, 2, 1, 4]
    assert Job.objects.count() == 3


def test_unique_key_inside_a_transaction_that_rolls_back_frees_the_key(queue):
    with pytest.raises(RuntimeError), transaction.atomic():
        enqueue("tests.otp", unique_key="k")
        raise RuntimeError
    assert enqueue("tests.otp", unique_key="k").status == "ready"


def test_enqueue_many_batch_queue_fills_items_whose_queue_is_none(queue):
    made = enqueue_many(
        [("tests.noop", {}, {"queue": None}), ("tests.noop", {}, {"queue": "own"})], queue="b"
    )
    assert [m.queue for m in made] == ["b", "own"]


def test_jobs_modules_are_loaded_at_start_so_enqueue_by_name_gets_job_defaults(queue):
    # testproject/demo/jobs.py registers send_otp on queue "otp" with max_attempts=4;
    # nothing in this process imported it but the app's start-up.
    made = enqueue("send_otp", {"account_id": 1})
    assert (made.queue, made.max_attempts) == ("otp", 4)


# -- a batch as the database holds it ------------------------------------------


def stored_as_returned(made: list[Job]) -> None:
    """Each returned job is a loaded instance holding exactly what its row holds."""
    rows = Job.objects.in_bulk([returned.pk for returned in made])
    fields = [field.attname for field in Job._meta.concrete_fields]
    for returned in made:
        assert (returned._state.adding, returned._state.db) == (False, "default")
        assert {f: getattr(returned, f) for f in fields} == {f: getattr(rows[returned.pk], f) for f in fields}
        assert type(returned.payload) is dict and type(returned.worker_ids) is list


def database_now() -> datetime:
    with connection.cursor() as cursor:
        cursor.execute("SELECT now()" if connection.vendor == "postgresql" else "SELECT 1")
        return cursor.fetchone()[0]


def test_a_large_batch_returns_its_rows_in_order_with_growing_ids(queue):
    at = timezone.now().astimezone(zoneinfo.ZoneInfo("Asia/Kolkata")) + timedelta(hours=1)
    items = []
    for i in range(1300):
        options: dict[str, Any] = {"queue": f"q{i % 3}", "priority": i % 201 - 100}
        if i % 5 == 1:
            options["delay"] = timedelta(seconds=i)
        elif i % 5 == 2:
            options["run_at"] = at + timedelta(microseconds=i)
        elif i % 5 == 3:
            options["delay"] = 0.25
        items.append(("tests.noop", {"i": i, "text": 'é\\\t"x'}, options))
    made = enqueue_many(items)
    assert [job.payload["i"] for job in made] == list(range(1300))
    ids = [job.pk for job in made]
    assert ids == sorted(ids) and len(set(ids)) == 1300
    stored_as_returned(made)
    assert made[2].run_at == at + timedelta(microseconds=2)
    assert made[2].run_at.tzinfo == made[0].created_at.tzinfo  # read back as the ORM reads it
    assert Job.objects.count() == 1300


@pytest.mark.parametrize("copies", [1, 20])  # a small batch is an INSERT, a larger one a COPY
def test_a_batch_is_timed_by_the_database_clock(queue, postgresql_only, copies):
    with transaction.atomic():
        now = database_now()  # the transaction's now(): the clock of everything it writes
        items = [("tests.noop", {}), ("tests.noop", {}, {"delay": 90}), ("tests.noop", {}, {"delay": 0.5})]
        made = enqueue_many(items * copies)
    assert {job.created_at for job in made} == {now}
    delays = [timedelta(0), timedelta(seconds=90), timedelta(seconds=0.5)]
    assert [job.run_at - now for job in made] == delays * copies
    stored_as_returned(made)


@pytest.mark.parametrize("copies", [1, 20])
@override_settings(USE_TZ=False, TIME_ZONE="America/New_York")
def test_a_batch_without_time_zone_support_reads_back_naive_local_times(queue, postgresql_only, copies):
    at = datetime(2030, 3, 10, 1, 30)  # naive: the session's time zone, New York
    aware = datetime(2030, 3, 10, 12, 0, tzinfo=UTC)  # read back as 08:00 in New York
    items = [("tests.noop", {}), ("tests.noop", {}, {"delay": 7200}), ("tests.noop", {}, {"run_at": aware})]
    made = enqueue_many(items * copies)
    assert all(job.created_at.tzinfo is None and job.run_at.tzinfo is None for job in made)
    assert made[2].run_at == datetime(2030, 3, 10, 8, 0)
    stored_as_returned(made)
    scheduled = enqueue_many([("tests.noop", {}, {"run_at": at}), ("tests.noop", {}, {"delay": 1})] * copies)
    assert scheduled[0].run_at == at
    stored_as_returned(scheduled)


def test_a_batch_notifies_each_queue_once_on_commit_only(queue, listener):
    items = [("tests.noop", {"i": i}, {"queue": ("emails", "sms")[i % 2]}) for i in range(700)]
    with transaction.atomic():
        enqueue_many(items)
        assert received(listener) == [], "nothing before the commit"
    assert received(listener) == ["emails", "sms"]
    with pytest.raises(RuntimeError), transaction.atomic():
        enqueue_many(items)
        raise RuntimeError("roll back")
    assert received(listener) == []
    enqueue_many(items[:2])
    assert received(listener) == ["emails", "sms"]


def test_a_rolled_back_batch_leaves_no_row(queue, other_connection):
    with pytest.raises(RuntimeError), transaction.atomic():
        enqueue_many([("tests.noop", {"i": i}) for i in range(600)])
        assert count_jobs(connection) == 600
        assert count_jobs(other_connection) == 0
        raise RuntimeError("the request failed")
    assert Job.objects.count() == 0
    with transaction.atomic():
        kept = enqueue_many([("tests.noop", {"outer": True})] * 2)
        with pytest.raises(RuntimeError), transaction.atomic():
            enqueue_many([("tests.noop", {"inner": True})] * 600)
            raise RuntimeError("inner step failed")
    assert sorted(Job.objects.values_list("pk", flat=True)) == [job.pk for job in kept]


def test_a_large_batch_with_unique_keys_among_others(queue):
    held = enqueue("tests.otp", {"n": -1}, unique_key="held")
    at = timezone.now().astimezone(zoneinfo.ZoneInfo("America/Sao_Paulo")) + timedelta(minutes=5)
    items: list[tuple[str, dict[str, int], dict[str, Any]]] = []
    for n in range(800):
        if n % 100 == 0:
            options: dict[str, Any] = {"unique_key": "held"}
        elif n % 100 == 50:
            options = {"unique_key": f"new{n // 200}"}  # 50 and 150 share new0, 250 and 350 new1, ...
        elif n % 3 == 0:
            options = {"run_at": at}
        else:
            options = {"delay": n % 7}
        items.append(("tests.otp", {"n": n}, options))
    made = enqueue_many(items)
    assert {made[n].pk for n in range(0, 800, 100)} == {held.pk}
    for first in (50, 250, 450, 650):
        assert made[first].pk == made[first + 100].pk and made[first + 100].payload == {"n": first}
    unkeyed = [job for job, (_, _, options) in zip(made, items, strict=True) if "unique_key" not in options]
    assert [job.payload["n"] for job in unkeyed] == [n for n in range(800) if n % 50]
    assert [job.pk for job in unkeyed] == sorted(job.pk for job in unkeyed)
    assert Job.objects.count() == 1 + 4 + 784
    stored_as_returned(made)


def test_returned_batch_jobs_save_and_refresh_like_loaded_ones(queue):
    made = enqueue_many([("tests.noop", {"i": i}) for i in range(3)])
    made[1].priority = 42
    made[1].save(update_fields=["priority"])
    assert Job.objects.get(pk=made[1].pk).priority == 42
    made[2].refresh_from_db()
    assert made[2].payload == {"i": 2}
    made[0].save()  # a loaded instance: an UPDATE, not a second row
    assert Job.objects.count() == 3


@pytest.mark.parametrize(
    ("bad", "error", "message"),
    [
        ({"x": float("nan")}, ValueError, r"item 450: payload\['x'\] is nan"),
        ({"x": "\ud800"}, ValueError, "item 450: payload cannot be stored"),
        ("not a dict", ValueError, "item 450: payload must be a JSON object"),
    ],
    ids=["nan", "lone-surrogate", "not-a-dict"],
)
def test_a_bad_item_deep_in_a_large_batch_writes_nothing(queue, bad, error, message):
    # On PostgreSQL this batch streams through COPY while it is checked: the
    # bad item aborts the COPY after 450 rows have left, and they roll back.
    items: list[Any] = [("tests.noop", {"i": i}) for i in range(600)]
    items[450] = ("tests.noop", bad)
    with pytest.raises(error, match=message):
        enqueue_many(items)
    assert Job.objects.count() == 0
    with transaction.atomic():
        mine = enqueue("tests.noop", {"mine": True})
        with pytest.raises(error, match=message):
            enqueue_many(items)
        # The caller's transaction goes on: its own job is there, and it can write more.
        after = enqueue_many(items[:20])
    assert sorted(Job.objects.values_list("pk", flat=True)) == sorted([mine.pk, *(job.pk for job in after)])


def test_a_bad_option_deep_in_a_large_batch_writes_nothing_and_wakes_nobody(queue, listener):
    items: list[Any] = [("tests.noop", {"i": i}, {"queue": "emails"}) for i in range(100)]
    items[99] = ("tests.noop", {}, {"priority": 101})
    with pytest.raises(ValueError, match="item 99: priority"):
        enqueue_many(items)
    items[99] = ("tests.noop", {}, {"colour": "red"})
    with pytest.raises(TypeError, match="item 99: unknown enqueue option"):
        enqueue_many(items)
    assert Job.objects.count() == 0
    assert received(listener) == []


@pytest.mark.parametrize("copies", [1, 20])
def test_a_batch_returns_payloads_of_its_own(queue, copies):
    flat = {"user": "é", "n": 2**70, "x": 0.1, "ok": True, "none": None}
    nested = {"to": ["a", "b"], "meta": {"k": (1, 2)}}
    made = enqueue_many([("tests.noop", flat), ("tests.noop", nested)] * copies)
    flat["user"] = "changed after the call"
    nested["to"].append("c")
    assert made[0].payload == {"user": "é", "n": 2**70, "x": 0.1, "ok": True, "none": None}
    assert made[1].payload == {"to": ["a", "b"], "meta": {"k": [1, 2]}}  # as JSON gives it back
    stored_as_returned(made)
    if copies > 1:
        made[0].payload["user"] = "one job's own"
        assert made[2].payload["user"] == "é"


def test_a_batch_builds_its_jobs_with_the_collector_paused(queue, monkeypatch):
    # Every object a batch makes is still reachable when it returns: a collection meanwhile
    # is pure cost (docs/performance.md). The pause ends with the batch, even one that fails.
    from django_jobqueue.queue import preparation

    seen: list[bool] = []
    prepare = preparation.JobPreparer.prepare

    def watched(self, *args):
        seen.append(gc.isenabled())
        return prepare(self, *args)

    monkeypatch.setattr(preparation.JobPreparer, "prepare", watched)
    assert gc.isenabled()
    made = enqueue_many([("tests.noop", {"i": i}) for i in range(50)])
    assert len(made) == 50 and seen == [False] * 50
    assert gc.isenabled()
    items: list[Any] = [("tests.noop", {"i": i}) for i in range(50)]
    items[40] = ("tests.noop", {"x": float("nan")})
    with pytest.raises(ValueError, match="item 40"):
        enqueue_many(items)
    with pytest.raises(ValueError, match="item 3: expected"):
        enqueue_many([("tests.noop", {})] * 3 + ["not an item"])
    assert gc.isenabled()
    assert Job.objects.count() == 50


def test_a_collector_the_application_turned_off_stays_off(queue):
    gc.disable()
    try:
        enqueue_many([("tests.noop", {"i": i}) for i in range(50)])
        assert not gc.isenabled()
    finally:
        gc.enable()
