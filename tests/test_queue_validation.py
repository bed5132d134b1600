"""Bad input raises before any SQL, writes nothing, and leaves the caller's transaction usable."""

from __future__ import annotations

import decimal
import math
from datetime import UTC, date, datetime, timedelta, timezone

import pytest
from django.contrib.auth.models import Group
from django.db import connection, transaction
from django.test.utils import CaptureQueriesContext, override_settings

from django_jobqueue import JobPayloadError, QueueClient, enqueue, enqueue_many
from django_jobqueue.models import Job


def deep(levels: int) -> dict:
    value: dict = {}
    for _ in range(levels):
        value = {"n": value}
    return value


BAD_PAYLOADS = [
    pytest.param([1, 2], "must be a JSON object", id="list"),
    pytest.param("text", "must be a JSON object", id="string"),
    pytest.param(
        {"when": datetime(2026, 1, 1, tzinfo=UTC)}, r"payload\['when'\] is a datetime", id="datetime"
    ),
    pytest.param({"day": date(2026, 1, 1)}, "is a date", id="date"),
    pytest.param({"amount": decimal.Decimal("1.5")}, r"payload\['amount'\] is a Decimal", id="decimal"),
    pytest.param({"tags": {1, 2}}, r"payload\['tags'\] is a set", id="set"),
    pytest.param({"blob": b"x"}, "is a bytes", id="bytes"),
    pytest.param({"obj": object()}, "is a object", id="object"),
    pytest.param({"nested": {"list": [1, {"deep": float("nan")}]}}, r"\['deep'\] is nan", id="nan"),
    pytest.param({"x": math.inf}, "is inf", id="infinity"),
    pytest.param({"x": -math.inf}, "is -inf", id="minus-infinity"),
    pytest.param({"x": "a\x00b"}, "NUL character", id="nul-value"),
    pytest.param({"a\x00": 1}, "NUL character", id="nul-key"),
    pytest.param({1: "one"}, "key 1 of type int", id="int-key"),
    pytest.param({"x": "\ud800"}, "cannot be stored", id="lone-surrogate"),
    pytest.param(deep(100_000), "nested more than", id="100000-deep"),
]


@pytest.mark.parametrize(("payload", "message"), BAD_PAYLOADS)
def test_bad_payloads_raise_job_payload_error_and_write_nothing(queue, payload, message):
    with CaptureQueriesContext(connection) as queries, pytest.raises(JobPayloadError, match=message):
        enqueue("tests.noop", payload)
    assert queries.captured_queries == []
    assert not Job.objects.exists()


def test_a_model_instance_in_the_payload_is_refused(queue):
    with pytest.raises(JobPayloadError, match="is a Group"):
        enqueue("tests.noop", {"group": Group(name="staff")})


@override_settings(JOBQUEUE={"MAX_PAYLOAD_BYTES": 1000})
def test_payload_over_the_size_limit(queue):
    enqueue("tests.noop", {"x": "a" * 900})
    with pytest.raises(JobPayloadError, match="more than MAX_PAYLOAD_BYTES"):
        enqueue("tests.noop", {"x": "é" * 600})  # 1,200 bytes of UTF-8
    assert Job.objects.count() == 1


def test_100_mb_of_json_is_refused_by_the_default_limit(queue):
    with pytest.raises(JobPayloadError, match="more than MAX_PAYLOAD_BYTES"):
        enqueue("tests.noop", {"x": "a" * 100_000_000})


def test_json_values_that_are_fine(queue):
    payload = {"s": "ünï", "i": 10**30, "f": 1.5, "b": True, "n": None, "l": [1, [2]], "t": (1, 2)}
    assert Job.objects.get(pk=enqueue("tests.noop", payload).pk).payload == {**payload, "t": [1, 2]}


BAD_OPTIONS = [
    pytest.param({"priority": True}, "priority must be an integer", id="priority-bool"),
    pytest.param({"priority": "5"}, "priority must be an integer", id="priority-str"),
    pytest.param({"priority": 1.5}, "priority must be an integer", id="priority-float"),
    pytest.param({"priority": 10**9}, "from -100 to 100", id="priority-huge"),
    pytest.param({"priority": -101}, "from -100 to 100", id="priority-low"),
    pytest.param({"max_attempts": 0}, "max_attempts must be from 1", id="max-attempts-0"),
    pytest.param({"max_attempts": True}, "max_attempts must be an integer", id="max-attempts-bool"),
    pytest.param({"queue": ""}, "1 to 63 characters", id="queue-empty"),
    pytest.param({"queue": "q" * 64}, "1 to 63 characters", id="queue-64"),
    pytest.param({"queue": "q" * 300}, "1 to 63 characters", id="queue-300"),
    pytest.param({"queue": "a b"}, "may hold only", id="queue-space"),
    pytest.param({"queue": "x'; DROP TABLE django_jobqueue_job; --"}, "may hold only", id="queue-sql"),
    pytest.param({"queue": 'say "hi"'}, "may hold only", id="queue-quotes"),
    pytest.param({"queue": "a\x00b"}, "may hold only", id="queue-nul"),
    pytest.param({"queue": 5}, "must be a string", id="queue-int"),
    pytest.param({"run_at": datetime(2030, 1, 1)}, "timezone-aware", id="naive-run-at"),
    pytest.param({"run_at": "2030-01-01"}, "must be a datetime", id="run-at-string"),
    pytest.param({"delay": -1}, "0 seconds or more", id="delay-negative"),
    pytest.param({"delay": timedelta(days=-1)}, "0 seconds or more", id="delay-negative-timedelta"),
    pytest.param({"delay": timedelta(days=365 * 8000)}, "more than 100 years", id="delay-year-9999"),
    pytest.param({"delay": 10**400}, "more than 100 years", id="delay-too-big-for-a-float"),
    pytest.param({"run_at": datetime(9999, 12, 31, tzinfo=UTC)}, "from 1970 to 100 years", id="run-at-9999"),
    pytest.param({"run_at": datetime(1, 1, 1, tzinfo=UTC)}, "from 1970 to 100 years", id="run-at-year-1"),
    pytest.param(
        {"run_at": datetime(9999, 12, 31, 23, tzinfo=timezone(timedelta(hours=-5)))},
        "from 1970 to 100 years",
        id="run-at-9999-behind-utc",
    ),
    pytest.param({"unique_key": "k\ud800"}, "lone surrogate", id="unique-key-surrogate"),
    pytest.param({"delay": float("nan")}, "0 seconds or more", id="delay-nan"),
    pytest.param({"delay": "5"}, "timedelta or seconds", id="delay-string"),
    pytest.param({"delay": 5, "run_at": datetime(2030, 1, 1, tzinfo=UTC)}, "not both", id="delay-and-run-at"),
    pytest.param({"unique_key": ""}, "unique_key must be", id="unique-key-empty"),
    pytest.param({"unique_key": "k\x00"}, "NUL", id="unique-key-nul"),
]


@pytest.mark.parametrize(("options", "message"), BAD_OPTIONS)
def test_bad_options_raise_value_error_and_write_nothing(queue, options, message):
    with CaptureQueriesContext(connection) as queries, pytest.raises(ValueError, match=message):
        enqueue("tests.noop", {}, **options)
    assert queries.captured_queries == []
    assert not Job.objects.exists()


@pytest.mark.parametrize(
    ("name", "message"),
    [
        ("", "1 to 200 characters"),
        ("n" * 201, "1 to 200 characters"),
        ("bad\x00name", "control characters"),
        ("line\nbreak", "control characters"),
        (" padded ", "surrounding spaces"),
        (None, "must be a string"),
        ("send_otp\ud800", r"lone surrogate \(U\+D800\) at position 8"),
        ("send_otp\u200b", r"U\+200B \(ZERO WIDTH SPACE\) at position 8"),
        ("send_\u202eptO", r"U\+202E \(RIGHT-TO-LEFT OVERRIDE\)"),
        ("a\u2028b", r"U\+2028 \(LINE SEPARATOR\)"),
        ("a\x85b", r"U\+0085"),
    ],
)
def test_bad_job_names(queue, name, message):
    with pytest.raises(ValueError, match=message):
        enqueue(name)
    assert not Job.objects.exists()


def test_the_callers_transaction_stays_usable_after_bad_input(queue):
    with transaction.atomic():
        Group.objects.create(name="before")
        for bad in ({"x": math.nan}, {"x": "\x00"}, [1]):
            with pytest.raises(JobPayloadError):
                enqueue("tests.noop", bad)
        with pytest.raises(ValueError):
            enqueue("tests.noop", {}, priority="high")
        enqueue("tests.noop", {"ok": True})
        Group.objects.create(name="after")
    assert Job.objects.count() == 1
    assert Group.objects.count() == 2


def test_enqueue_many_names_the_bad_item_and_writes_nothing(queue):
    with pytest.raises(JobPayloadError, match=r"item 2: payload\['x'\] is nan"):
        enqueue_many([("tests.noop", {}), ("tests.noop", {}), ("tests.noop", {"x": math.nan})])
    with pytest.raises(ValueError, match="item 1: expected"):
        enqueue_many([("tests.noop", {}), ("only-a-name",)])
    assert not Job.objects.exists()


def test_enqueue_many_names_the_item_whose_options_are_not_a_dict(queue):
    with pytest.raises(TypeError, match="item 1: options must be a dict, not int"):
        enqueue_many([("tests.noop", {}), ("tests.noop", {}, 5)])
    with pytest.raises(TypeError, match="item 0: enqueue options must be a dict, not list"):
        QueueClient().push_many([("tests.noop", {}, ["priority"])])
    assert not Job.objects.exists()


def test_names_in_other_scripts_are_fine(queue):
    assert enqueue("tests.отправить_код", {}).name == "tests.отправить_код"


@pytest.mark.parametrize("timeout", [0.05, 1e-9, 0.999, timedelta(milliseconds=500)])
def test_a_visibility_timeout_below_one_second_is_refused(queue, timeout):
    with pytest.raises(ValueError, match="visibility_timeout must be at least 1 second"):
        QueueClient().push("tests.noop", {}, visibility_timeout=timeout)
    with (
        override_settings(JOBQUEUE={"VISIBILITY_TIMEOUT": timeout}),
        pytest.raises(ValueError, match="at least"),
    ):
        enqueue("tests.noop", {})
    assert not Job.objects.exists()
    assert QueueClient().push("tests.noop", {}, visibility_timeout=1).visibility_timeout == 1


@override_settings(USE_TZ=False)
def test_run_at_is_bounded_without_time_zone_support_too(queue):
    for far in (datetime(9999, 12, 31), datetime(9999, 12, 31, tzinfo=UTC), datetime(1, 1, 1)):
        with pytest.raises(ValueError, match="from 1970 to 100 years from now"):
            enqueue("tests.noop", {}, run_at=far)
    assert not Job.objects.exists()
    assert enqueue("tests.noop", {}, run_at=datetime(2030, 1, 1)).run_at == datetime(2030, 1, 1)


def test_run_at_within_the_bounds_is_kept(queue):
    soon = datetime(1970, 1, 1, tzinfo=UTC)
    later = datetime.now(UTC) + timedelta(days=365 * 99)
    assert [enqueue("tests.noop", {}, run_at=when).run_at for when in (soon, later)] == [soon, later]


def test_unknown_enqueue_options_are_refused(queue):
    with pytest.raises(TypeError, match="unknown enqueue option"):
        QueueClient().push("tests.noop", {}, priorty=5)


def test_client_arguments_are_checked(queue, job_factory):
    job_factory()
    client = QueueClient()
    with pytest.raises(ValueError, match="worker_id"):
        client.pull(worker_id="")
    with pytest.raises(ValueError, match="limit"):
        client.pull_many(worker_id="w", limit=0)
    with pytest.raises(ValueError, match="visibility_timeout"):
        client.pull(worker_id="w", visibility_timeout=0)
    with pytest.raises(ValueError, match="queue name"):
        client.pull("bad queue", worker_id="w")
    claimed = client.pull(worker_id="w")
    with pytest.raises(ValueError, match="extension"):
        client.extend_visibility(claimed, worker_id="w", extension=-5)
    with pytest.raises(ValueError, match="Job or an integer id"):
        client.ack("1", worker_id="w")
    assert Job.objects.get().status == "running"
