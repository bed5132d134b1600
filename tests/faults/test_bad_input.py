"""Bad input where tests/test_queue_validation.py does not reach: exceptions raised inside a
real worker, ``@job``'s options, ``.using()``'s options, and runworker's command line."""

from __future__ import annotations

import math
import os
import subprocess
import sys
from datetime import timedelta

import pytest
from django.conf import settings
from django.contrib.auth.models import Group
from django.core.management import CommandError, call_command
from django.db import connection, transaction
from django.test.utils import CaptureQueriesContext

from django_jobqueue import enqueue, job, registry
from django_jobqueue.management.arguments import queue_and_weight
from django_jobqueue.models import DeadLetter, Job, Worker
from django_jobqueue.queue.validation import MAX_ERROR_CHARS, MAX_TRACEBACK_CHARS
from tests.test_queue_validation import BAD_OPTIONS, BAD_PAYLOADS
from tests.worker_support import ROOT, database_url

from .conftest import FAULT_JOBS
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


def test_a_retry_delay_too_large_for_a_float_falls_back_to_the_backoff(queue, fault_worker):
    never = queue.push("faults.raise_text", {"kind": "retry-never"}, max_attempts=2)
    after = queue.push("faults.work", {"n": 1})

    worker = fault_worker("--burst", "--concurrency", "1")

    assert worker.wait(30) == 0, worker.log()[-5000:]
    never.refresh_from_db()
    assert (never.status, never.attempts) == ("ready", 1)
    assert never.last_error == (
        "Retry with a bad delay, backoff used instead: Retry's delay of 401 digits is more than 100 years"
    )
    assert never.run_at - never.created_at < timedelta(hours=1), "the backoff's delay, not the job's"
    assert Job.objects.get(pk=after.pk).status == "done", "the worker went on, on its one slot"


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


# What @job and .using() both take, refused alike.
BAD_PRIORITY_AND_QUEUE = [
    pytest.param({"priority": True}, "priority must be an integer", id="priority-bool"),
    pytest.param({"priority": "5"}, "priority must be an integer", id="priority-str"),
    pytest.param({"priority": 1.5}, "priority must be an integer", id="priority-float"),
    pytest.param({"priority": 10**9}, "from -100 to 100", id="priority-huge"),
    pytest.param({"queue": "x'; DROP TABLE django_jobqueue_job; --"}, "may hold only", id="queue-sql"),
    pytest.param({"queue": "a\x00b"}, "may hold only", id="queue-nul"),
    pytest.param({"queue": "q" * 300}, "1 to 63 characters", id="queue-300"),
]
BAD_JOB_OPTIONS = [
    *BAD_PRIORITY_AND_QUEUE,
    pytest.param({"queue": 'say "hi"'}, "may hold only", id="queue-quotes"),
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
    *BAD_PRIORITY_AND_QUEUE,
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
    pytest.param(["--queue", "a:-1"], "weight of queue 'a' must be a whole number", id="weight-negative"),
    pytest.param(["--queue", "a:abc"], "weight of queue 'a' must be a whole number", id="weight-word"),
    pytest.param(["--queue", "a:2.5"], "weight of queue 'a' must be a whole number", id="weight-fraction"),
    pytest.param(["--queue", "a:"], "weight of queue 'a' must be a whole number", id="weight-empty"),
    pytest.param(
        ["--queue", "a:\u0663"], "weight of queue 'a' must be a whole number", id="weight-arabic-digit"
    ),
    pytest.param(["--concurrency", "0"], "must be 1 or more", id="concurrency-0"),
    pytest.param(["--concurrency", "-3"], "must be 1 or more", id="concurrency-negative"),
    pytest.param(["--concurrency", "many"], "must be a whole number, got 'many'", id="concurrency-word"),
    pytest.param(["--concurrency", "3000000000"], "must be at most 1000", id="concurrency-3e9"),
    pytest.param(["--max-jobs", "0"], "must be 1 or more", id="max-jobs-0"),
    pytest.param(["--visibility-timeout", "0"], "more than 0", id="timeout-0"),
    pytest.param(["--visibility-timeout", "-1"], "0 seconds or more", id="timeout-negative"),
    pytest.param(["--visibility-timeout", "nan"], "0 seconds or more", id="timeout-nan"),
    pytest.param(["--visibility-timeout", "inf"], "0 seconds or more", id="timeout-inf"),
    pytest.param(["--visibility-timeout", "0.05"], "at least 1 second", id="timeout-below-the-floor"),
    pytest.param(["--visibility-timeout", "1e10"], "more than 100 years", id="timeout-1e10"),
    pytest.param(["--visibility-timeout", "soon"], "a number of seconds, got 'soon'", id="timeout-word"),
    pytest.param(["--shutdown-timeout", "-1"], "from 0 to 86400 seconds", id="shutdown-negative"),
    pytest.param(["--shutdown-timeout", "1e10"], "from 0 to 86400 seconds", id="shutdown-1e10"),
    pytest.param(["--shutdown-timeout", "nan"], "from 0 to 86400 seconds", id="shutdown-nan"),
    pytest.param(["--poll-interval", "0"], "from 0.01 to 86400 seconds", id="poll-0"),
    pytest.param(["--poll-interval", "1e-9"], "from 0.01 to 86400 seconds", id="poll-1e-9"),
    pytest.param(["--poll-interval", "1e10"], "from 0.01 to 86400 seconds", id="poll-1e10"),
    pytest.param(["--worker-id", "line\nbreak"], "control characters", id="worker-id-newline"),
    pytest.param(["--worker-id", "w" * 300], "1 to 255 characters", id="worker-id-300"),
    pytest.param(["--worker-id", "w\ud800"], "lone surrogate", id="worker-id-surrogate"),
    pytest.param(["--database", "nowhere"], "not a key of DATABASES", id="database-unknown"),
]


@pytest.mark.parametrize(("args", "message"), BAD_COMMAND_LINES)
def test_bad_runworker_arguments_are_refused_before_anything_runs(queue, args, message):
    # --burst: were the arguments accepted after all, the worker would exit rather than hang.
    with CaptureQueriesContext(connection) as queries, pytest.raises(CommandError, match=message):
        call_command("runworker", "--burst", *args)
    assert queries.captured_queries == []
    assert not Worker.objects.exists()


@pytest.mark.parametrize(
    ("text", "parsed"),
    [("a", ("a", 1)), ("a:3", ("a", 3)), ("a:b:1", ("a:b", 1)), ("tenant:42", ("tenant", 42))],
)
def test_a_queue_weight_is_the_text_after_the_last_colon(text, parsed):
    assert queue_and_weight(text) == parsed


def run_command(*args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "DATABASE_URL": database_url(), "JOBQUEUE_MODULES": FAULT_JOBS}
    return subprocess.run(
        [sys.executable, "manage.py", *args], cwd=ROOT, env=env, capture_output=True, text=True, timeout=60
    )


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--concurrency", "3000000000"], "argument --concurrency: must be at most 1000, got 3000000000"),
        (
            ["--visibility-timeout", "1e10"],
            "visibility-timeout of 10000000000 seconds is more than 100 years",
        ),
        (["--poll-interval", "1e-9"], "--poll-interval must be from 0.01 to 86400 seconds, got 1e-09"),
        (["--queue", "a:abc"], "the weight of queue 'a' must be a whole number of 1 or more, got 'abc'"),
    ],
)
def test_runworker_refuses_bad_arguments_at_start_without_a_traceback(queue, args, message):
    done = run_command("runworker", "--burst", *args)

    assert done.returncode != 0
    assert message in done.stderr
    assert "Traceback" not in done.stderr
    assert not Worker.objects.exists()


def test_jobqueue_names_an_unknown_database_in_one_line(queue):
    done = run_command("jobqueue", "status", "--database", "nope")

    assert done.returncode == 2, "a bad argument, as docs/commands.md says"
    known = ", ".join(map(repr, settings.DATABASES))  # 'default', and 'listen' on PostgreSQL
    assert done.stderr.splitlines()[-1].endswith(
        f"argument --database: 'nope' is not a key of DATABASES (known: {known})"
    )
    assert "Traceback" not in done.stderr
