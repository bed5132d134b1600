"""Enqueueing: an ordinary insert on the caller's connection, with defaults and batches."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.db import connection, transaction
from django.test.utils import CaptureQueriesContext, override_settings
from django.utils import timezone

from django_jobqueue import enqueue, enqueue_many, job
from django_jobqueue import registry as job_registry
from django_jobqueue.models import Job

from .conftest import count_jobs


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
    inserts = [q for q in queries.captured_queries if q["sql"].lstrip().upper().startswith("INSERT")]
    assert len(inserts) == 1
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
