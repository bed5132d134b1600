"""Payloads checked against the registered function's signature at enqueue, and ``@job(fail_on=…)``."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from django_jobqueue import JobContext, JobPayloadError, Retry, enqueue, enqueue_many, job, registry
from django_jobqueue.decorators import JobFunction
from django_jobqueue.models import Job


@pytest.fixture
def defined() -> Iterator[list[str]]:
    """Names of the jobs a test registers; unregistered at teardown."""
    names: list[str] = []
    yield names
    for name in names:
        registry.unregister(name)


@pytest.fixture
def send_otp(defined: list[str]) -> JobFunction:
    @job(name="signature.send_otp", takes_context=True)
    def send(ctx: JobContext, user_id: str, channel: str = "sms", *, urgent: bool = False) -> None: ...

    defined.append(send.name)
    return send


@contextmanager
def refused(match: str) -> Iterator[None]:
    """Expect ``JobPayloadError`` matching ``match``, and not one query on the way."""
    with CaptureQueriesContext(connection) as queries, pytest.raises(JobPayloadError, match=match):
        yield
    assert len(queries) == 0, "the payload is refused before any SQL"


@pytest.mark.parametrize(
    ("payload", "match"),
    [
        (
            {},
            r"job 'signature.send_otp': payload does not fit .*send\(ctx, user_id.*"
            r": missing argument\(s\) 'user_id'",
        ),
        ({"user_id": "1", "sms": True}, r"unexpected argument\(s\) 'sms'"),
        ({"user_id": "1", "ctx": 2}, r"unexpected argument\(s\) 'ctx'"),
        (
            {"channel": "mail", "extra": 1},
            r"missing argument\(s\) 'user_id'; unexpected argument\(s\) 'extra'",
        ),
    ],
)
def test_a_payload_that_does_not_fit_is_refused_before_any_sql(queue, send_otp, payload, match):
    with refused(match):
        send_otp.enqueue(**payload)
    with refused(match):
        send_otp.using(queue="urgent", priority=5).enqueue(**payload)
    with refused(match):
        enqueue("signature.send_otp", payload)
    assert not Job.objects.exists()


def test_payloads_that_fit_are_enqueued(queue, send_otp):
    send_otp.enqueue(user_id="1")
    enqueue("signature.send_otp", {"user_id": "2", "channel": "mail", "urgent": True})
    assert Job.objects.count() == 2


def test_enqueue_many_names_the_item_that_does_not_fit_and_writes_nothing(queue, send_otp):
    good = ("signature.send_otp", {"user_id": "1"})
    # The first items take the per-name fast path; the bad one must not slip through it.
    items = [good, good, ("signature.send_otp", {"user": "3"}), good]
    with refused(r"item 2: job 'signature.send_otp': .*missing argument\(s\) 'user_id'"):
        enqueue_many(items)
    with refused(r"item 1: .*unexpected argument\(s\) 'when'"):
        enqueue_many([good, ("signature.send_otp", {"user_id": "1", "when": 1}, {"priority": 3})])
    assert not Job.objects.exists()


def test_keyword_catch_alls_and_unregistered_names_are_not_checked(queue, defined):
    @job(name="signature.anything")
    def anything(**fields: Any) -> None: ...

    defined.append(anything.name)
    anything.enqueue(whatever=1, at_all=2)
    enqueue("signature.not_registered_here", {"any": "payload"})  # a worker elsewhere may have it
    assert Job.objects.count() == 2


def test_a_function_no_payload_can_call_is_refused(queue, defined):
    @job(name="signature.positional")
    def positional(user_id: str, /) -> None: ...

    @job(name="signature.no_room_for_context", takes_context=True)
    def no_context(*, user_id: str) -> None: ...

    defined.extend([positional.name, no_context.name])
    with refused(r"parameter 'user_id' is positional-only"):
        positional.enqueue(user_id="1")
    with refused(r"takes_context=True, but it has no positional parameter for the context"):
        no_context.enqueue(user_id="1")


@pytest.mark.parametrize(
    ("fail_on", "error", "match"),
    [
        ("KeyError", TypeError, r"fail_on must be an exception class or a tuple of them, not str"),
        (KeyError("x"), TypeError, r"fail_on must be an exception class or a tuple of them, not KeyError"),
        ((KeyError, int), TypeError, r"fail_on must hold exception classes; <class 'int'> is not one"),
        ([ValueError, "OSError"], TypeError, r"'OSError' is not one"),
        ((Retry,), ValueError, r"fail_on cannot hold Retry"),
    ],
)
def test_fail_on_takes_exception_classes_only(fail_on, error, match):
    with pytest.raises(error, match=match):

        @job(name="signature.bad_fail_on", fail_on=fail_on)
        def bad() -> None: ...

    assert registry.lookup("signature.bad_fail_on") is None, "nothing registered"


def test_fail_on_is_the_functions_own(defined):
    @job(name="signature.one", fail_on=LookupError)
    def one() -> None: ...

    @job(name="signature.several", fail_on=[LookupError, OSError])
    def several() -> None: ...

    defined.extend([one.name, several.name])
    assert registry.lookup("signature.one").fail_on == (LookupError,)
    assert registry.lookup("signature.several").fail_on == (LookupError, OSError)


def test_a_large_batch_with_one_bad_payload_writes_nothing(queue, send_otp):
    # Large enough to stream through COPY on PostgreSQL: the bad item aborts the batch.
    items = [("signature.send_otp", {"user_id": str(i)}) for i in range(40)]
    items[37] = ("signature.send_otp", {"user_id": "37", "channel": "sms", "urgnet": True})
    with pytest.raises(JobPayloadError, match=r"item 37: .*unexpected argument\(s\) 'urgnet'"):
        enqueue_many(items)
    assert not Job.objects.exists()
    assert len(enqueue_many(items[:37])) == 37
