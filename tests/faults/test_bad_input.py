"""Bad input where tests/test_queue_validation.py does not reach: exceptions raised inside a
real worker, ``@job``'s options, ``.using()``'s options, and runworker's command line."""

from __future__ import annotations

import math
from datetime import timedelta

import pytest
from django.contrib.auth.models import Group
from django.core.management import CommandError, call_command
from django.db import connection, transaction
from django.test.utils import CaptureQueriesContext

from django_jobqueue import enqueue, job, registry
from django_jobqueue.models import DeadLetter, Job, Worker
from django_jobqueue.queue.validation import MAX_ERROR_CHARS, MAX_TRACEBACK_CHARS
from tests.test_queue_validation import BAD_OPTIONS, BAD_PAYLOADS

from .jobs import work


def test_exceptions_with_nul_characters_or_5_mb_of_text_are_stored_cleaned(queue, fault_worker):
    nul = queue.push("faults.raise_text", {"kind": "nul"})
    huge = queue.push("faults.raise_text", {"kind": "huge"})
    unprintable = queue.push("faults.unprintable", {})
    failed = queue.push("faults.raise_text", {"kind": "fail-nul"})
    retried = queue.push("faults.raise_text", {"kind": "retry-huge"})
    after = queue.push("faults.work", {"n": 1})

    worker = fault_worker("--burst", "--concurrency", "1")

    assert worker.wait(30) == 0, worker.log()[-5000:]
    assert DeadLetter.objects.get(job_id=nul.pk).error == r"ValueError: before\x00after\x00"
    dead = DeadLetter.objects.get(job_id=huge.pk)
    assert dead.error.startswith("ValueError: xxx") and "characters cut" in dead.error
    assert len(dead.error) <= MAX_ERROR_CHARS and len(dead.traceback) <= MAX_TRACEBACK_CHARS
    assert dead.traceback.rstrip().endswith("END"), "a traceback keeps its tail"
    assert DeadLetter.objects.get(job_id=unprintable.pk).error == "Unprintable: <exception str() failed>"
    assert DeadLetter.objects.get(job_id=failed.pk).error == r"Fail: no\x00thanks"
    assert len(DeadLetter.objects.get(job_id=retried.pk).error) <= MAX_ERROR_CHARS
    assert Job.objects.get(pk=after.pk).status == "done", "the worker went on, on its one slot"
    assert max(len(line) for line in worker.log().splitlines()) < 1_000, "no 5 MB log line"


def assert_transaction_survives(payload: object, options: dict[str, object], message: str) -> None:
    with transaction.atomic():
        Group.objects.create(name="before")
        with pytest.raises(ValueError, match=message):
            enqueue("faults.work", payload, **options)
        enqueue("faults.work", {"n": 1})
        Group.objects.create(name="after")
    assert (Job.objects.count(), Group.objects.count()) == (1, 2)


@pytest.mark.parametrize(("payload", "message"), BAD_PAYLOADS)
def test_the_callers_transaction_stays_usable_after_each_bad_payload(queue, payload, message):
    assert_transaction_survives(payload, {}, message)


@pytest.mark.parametrize(("options", "message"), BAD_OPTIONS)
def test_the_callers_transaction_stays_usable_after_each_bad_option(queue, options, message):
    assert_transaction_survives({}, options, message)


BAD_JOB_OPTIONS = [
    pytest.param({"priority": True}, "priority must be an integer", id="priority-bool"),
    pytest.param({"priority": "5"}, "priority must be an integer", id="priority-str"),
    pytest.param({"priority": 1.5}, "priority must be an integer", id="priority-float"),
    pytest.param({"priority": 10**9}, "from -100 to 100", id="priority-huge"),
    pytest.param({"queue": 'say "hi"'}, "may hold only", id="queue-quotes"),
    pytest.param({"queue": "x'; DROP TABLE django_jobqueue_job; --"}, "may hold only", id="queue-sql"),
    pytest.param({"queue": "a\x00b"}, "may hold only", id="queue-nul"),
    pytest.param({"queue": "q" * 300}, "1 to 63 characters", id="queue-300"),
    pytest.param({"max_attempts": 0}, "max_attempts must be from 1", id="max-attempts-0"),
    pytest.param({"max_attempts": True}, "max_attempts must be an integer", id="max-attempts-bool"),
    pytest.param({"visibility_timeout": -1}, "0 seconds or more", id="timeout-negative"),
    pytest.param({"visibility_timeout": 0}, "more than 0 seconds", id="timeout-zero"),
    pytest.param({"visibility_timeout": 0.05}, "at least 1 second", id="timeout-below-the-floor"),
    pytest.param({"visibility_timeout": 1e-9}, "at least 1 second", id="timeout-1e-9"),
    pytest.param({"name": "send_otp\u200b"}, "ZERO WIDTH SPACE", id="name-zero-width"),
    pytest.param({"visibility_timeout": math.nan}, "0 seconds or more", id="timeout-nan"),
    pytest.param({"visibility_timeout": timedelta(days=365 * 8000)}, "100 years", id="timeout-year-9999"),
    pytest.param({"name": "bad\x00name"}, "control characters", id="name-nul"),
    pytest.param({"name": "n" * 300}, "1 to 200 characters", id="name-300"),
]


@pytest.mark.parametrize(("options", "message"), BAD_JOB_OPTIONS)
def test_bad_job_decorator_options_raise_at_definition_and_register_nothing(options, message):
    before = registry.registered_names()

    with pytest.raises(ValueError, match=message):

        @job(**options)
        def never_registered() -> None: ...

    assert registry.registered_names() == before


BAD_USING_OPTIONS = [
    pytest.param({"priority": True}, "priority must be an integer", id="priority-bool"),
    pytest.param({"priority": "5"}, "priority must be an integer", id="priority-str"),
    pytest.param({"priority": 1.5}, "priority must be an integer", id="priority-float"),
    pytest.param({"priority": 10**9}, "from -100 to 100", id="priority-huge"),
    pytest.param({"queue": "x'; DROP TABLE django_jobqueue_job; --"}, "may hold only", id="queue-sql"),
    pytest.param({"queue": "a\x00b"}, "may hold only", id="queue-nul"),
    pytest.param({"queue": "q" * 300}, "1 to 63 characters", id="queue-300"),
    pytest.param({"delay": -5}, "0 seconds or more", id="delay-negative"),
    pytest.param({"delay": timedelta(days=365 * 8000)}, "100 years", id="delay-year-9999"),
    pytest.param({"unique_key": "k\x00"}, "NUL", id="unique-key-nul"),
]


@pytest.mark.parametrize(("options", "message"), BAD_USING_OPTIONS)
def test_bad_using_options_raise_write_nothing_and_keep_the_transaction(queue, options, message):
    with transaction.atomic():
        with CaptureQueriesContext(connection) as queries, pytest.raises(ValueError, match=message):
            work.using(**options).enqueue(n=1)
        assert queries.captured_queries == []
        work.enqueue(n=2)  # the caller's transaction is still usable
    assert list(Job.objects.values_list("payload", flat=True)) == [{"n": 2}]


BAD_COMMAND_LINES = [
    pytest.param(["--queue", "x'; DROP TABLE django_jobqueue_job; --"], "may hold only", id="queue-sql"),
    pytest.param(["--queue", 'say "hi"'], "may hold only", id="queue-quotes"),
    pytest.param(["--queue", "q" * 300], "1 to 63 characters", id="queue-300"),
    pytest.param(["--queue", "ok:0"], "weight", id="weight-0"),
    pytest.param(["--concurrency", "0"], "must be 1 or more", id="concurrency-0"),
    pytest.param(["--concurrency", "-3"], "must be 1 or more", id="concurrency-negative"),
    pytest.param(["--concurrency", "many"], "invalid positive_int value", id="concurrency-word"),
    pytest.param(["--max-jobs", "0"], "must be 1 or more", id="max-jobs-0"),
    pytest.param(["--visibility-timeout", "0"], "more than 0", id="timeout-0"),
    pytest.param(["--visibility-timeout", "-1"], "more than 0", id="timeout-negative"),
    pytest.param(["--visibility-timeout", "nan"], "more than 0", id="timeout-nan"),
    pytest.param(["--visibility-timeout", "inf"], "more than 0", id="timeout-inf"),
    pytest.param(["--shutdown-timeout", "-1"], "0 or more", id="shutdown-negative"),
    pytest.param(["--poll-interval", "0"], "more than 0", id="poll-0"),
    pytest.param(["--worker-id", "line\nbreak"], "control characters", id="worker-id-newline"),
    pytest.param(["--worker-id", "w" * 300], "1 to 255 characters", id="worker-id-300"),
    pytest.param(["--database", "nowhere"], "not a key of DATABASES", id="database-unknown"),
]


@pytest.mark.parametrize(("args", "message"), BAD_COMMAND_LINES)
def test_bad_runworker_arguments_are_refused_before_anything_runs(queue, args, message):
    # --burst: were the arguments accepted after all, the worker would exit rather than hang.
    with CaptureQueriesContext(connection) as queries, pytest.raises(CommandError, match=message):
        call_command("runworker", "--burst", *args)
    assert queries.captured_queries == []
    assert not Worker.objects.exists()
