"""Every attempt that did not end in done leaves an entry in its job's history, in the statement
that records its outcome: retries, moves to the dead letters, rescued claims, cancels, timeouts.

Claims are taken and expired for real on committed transactions; the timeout
runs in a real ``runworker``; the admin is read through Django's test client.
"""

from __future__ import annotations

from datetime import timedelta
from importlib.util import find_spec
from typing import Any

import pytest
from django.db import connection
from django.urls import reverse
from django.utils import timezone
from django.utils.dateparse import parse_datetime

from django_jobqueue import QueueClient
from django_jobqueue.models import DeadLetter, Job
from django_jobqueue.queue.engines import ENGINES
from django_jobqueue.queue.ops import MAX_HISTORY, MAX_HISTORY_ERROR_CHARS
from django_jobqueue.queue.ops.history import pushed_entry
from django_jobqueue.queue.validation import MAX_ERROR_CHARS
from tests.worker_support import wait_until

NAME = "tests.history.flaky"


def history_of(job: Job | int) -> list[dict[str, Any]]:
    return Job.objects.get(pk=job if isinstance(job, int) else job.pk).attempt_history


def expire(job: Job) -> None:
    """Put ``job``'s claim deadline in the past, as a worker that stopped beating leaves it."""
    Job.objects.filter(pk=job.pk).update(locked_until=timezone.now() - timedelta(seconds=5))


def assert_entry(entry: dict[str, Any], claim: Job, outcome: str, error: str) -> None:
    """``entry`` is ``claim``'s attempt: its number, worker, start (the claim's) and outcome."""
    assert set(entry) == {"attempt", "worker", "started_at", "duration", "outcome", "error"}
    assert (entry["attempt"], entry["worker"], entry["outcome"], entry["error"]) == (
        claim.attempts,
        claim.locked_by,
        outcome,
        error,
    )
    assert parse_datetime(entry["started_at"]) == claim.last_attempted_at
    assert isinstance(entry["duration"], int | float) and 0 <= entry["duration"] < 60


# -- the statements that write an entry ---------------------------------------------------


def test_two_retries_then_done_leave_two_entries_and_the_row_tells_the_done_one(queue: QueueClient):
    made = queue.push(NAME, {}, max_attempts=5)
    first = queue.pull(worker_id="web-1:1")
    assert queue.nack(first, worker_id="web-1:1", error="ValueError: one", delay=0)
    second = queue.pull(worker_id="web-2:2")
    assert queue.nack(second, worker_id="web-2:2", error="ValueError: two", delay=0)
    third = queue.pull(worker_id="web-3:3")
    assert queue.ack(third, worker_id="web-3:3", result=1)

    done = Job.objects.get(pk=made.pk)
    assert done.status == "done"
    one, two = done.attempt_history
    assert_entry(one, first, "retry", "ValueError: one")
    assert_entry(two, second, "retry", "ValueError: two")
    # The done attempt is the row itself.
    assert (done.attempts, done.locked_by, done.last_attempted_at) == (3, "web-3:3", third.last_attempted_at)


def test_nacks_until_dead_move_every_entry_and_a_retry_from_the_dead_letters_goes_on(queue: QueueClient):
    made = queue.push(NAME, {}, max_attempts=3)
    claims = []
    for attempt in (1, 2, 3):
        claim = queue.pull(worker_id="w:1")
        assert queue.nack(claim, worker_id="w:1", error=f"KeyError: {attempt}", delay=0)
        claims.append(claim)

    dead = DeadLetter.objects.get(job_id=made.pk)
    assert [entry["outcome"] for entry in dead.attempt_history] == ["retry", "retry", "dead"]
    for entry, claim, attempt in zip(dead.attempt_history, claims, (1, 2, 3), strict=True):
        assert_entry(entry, claim, "dead" if attempt == 3 else "retry", f"KeyError: {attempt}")

    revived = queue.retry_dead_letter(dead)
    assert history_of(revived) == dead.attempt_history
    again = queue.pull(worker_id="w:2")
    assert queue.fail(again, worker_id="w:2", error="Fail: for good")
    final = DeadLetter.objects.get(job_id=revived.pk).attempt_history
    assert final[:3] == dead.attempt_history
    # Attempts start again at 1 after a retry from the dead letters; the start times keep the order.
    assert_entry(final[3], again, "dead", "Fail: for good")


def test_the_batch_retry_of_dead_letters_keeps_each_ones_history(queue: QueueClient):
    letters = []
    for n in range(3):
        made = queue.push(NAME, {"n": n}, max_attempts=1)
        claim = queue.pull(worker_id="w:1")
        assert queue.fail(claim, worker_id="w:1", error=f"Fail: {n}")
        letters.append(DeadLetter.objects.get(job_id=made.pk))

    batches: list[Any] = []
    assert queue.retry_dead_letters(DeadLetter.objects.all(), batch_size=2, on_batch=batches.append) == 3
    retried = sorted((change for batch in batches for change in batch), key=lambda r: r.dead_letter_id)
    for change, letter in zip(retried, letters, strict=True):
        assert history_of(change.job_id) == letter.attempt_history
        assert history_of(change.job_id)[0]["error"] == f"Fail: {letter.payload['n']}"


def test_a_rescued_expired_claim_adds_a_lost_entry_and_a_buried_one_another(queue: QueueClient):
    made = queue.push(NAME, {}, max_attempts=2)
    first = queue.pull(worker_id="gone:1")
    expire(first)
    assert queue.tick_timeouts() == 1

    [lost] = history_of(made)
    assert_entry(lost, first, "lost", Job.objects.get(pk=made.pk).last_error)
    assert lost["error"].startswith("claim expired: worker gone:1 stopped without finishing attempt 1")

    second = queue.pull(worker_id="gone:2")
    expire(second)
    assert queue.tick_timeouts() == 1
    dead = DeadLetter.objects.get(job_id=made.pk)
    assert dead.attempt_history[0] == lost
    assert_entry(dead.attempt_history[1], second, "lost", dead.error)


def test_a_cancel_of_a_running_job_adds_an_entry_and_of_a_ready_one_none(queue: QueueClient):
    running = queue.push(NAME, {"n": 1})
    ready = queue.push(NAME, {"n": 2}, delay=3600)
    claim = queue.pull(worker_id="w:1")
    assert claim.pk == running.pk

    assert len(queue.cancel_jobs([running, ready])) == 2
    [cancelled] = history_of(running)
    assert_entry(cancelled, claim, "cancelled", "")
    assert history_of(ready) == []


def test_an_attempt_handed_back_unrun_adds_nothing(queue: QueueClient):
    made = queue.push(NAME, {})
    claim = queue.pull(worker_id="stopping:1")
    assert queue.release(claim, worker_id="stopping:1")
    assert history_of(made) == []


def test_a_stale_workers_nack_and_fail_are_refused_and_add_nothing(queue: QueueClient):
    made = queue.push(NAME, {}, max_attempts=5)
    stale = queue.pull(worker_id="slow:1")
    expire(stale)
    assert queue.tick_timeouts() == 1
    current = queue.pull(worker_id="fresh:2")
    before = history_of(made)
    assert [entry["outcome"] for entry in before] == ["lost"]

    assert not queue.nack(stale, worker_id="slow:1", error="ValueError: too late", delay=0)
    assert not queue.fail(stale, worker_id="slow:1", error="Fail: too late")
    # Same owner, old claim token: the fence is the claim, not the worker's name.
    Job.objects.filter(pk=made.pk).update(locked_by="slow:1")
    assert not queue.nack(stale, worker_id="slow:1", error="ValueError: too late", delay=0)
    assert history_of(made) == before
    assert Job.objects.get(pk=made.pk).claim_token == current.claim_token


# -- the bound --------------------------------------------------------------------------------


def test_the_history_keeps_the_first_entry_and_the_newest_after_it(queue: QueueClient):
    failures = MAX_HISTORY + 5
    made = queue.push(NAME, {}, max_attempts=failures + 1)
    for attempt in range(1, failures + 1):
        claim = queue.pull(worker_id="w:1")
        assert queue.nack(claim, worker_id="w:1", error=f"ValueError: {attempt}", delay=0)

    kept = history_of(made)
    assert len(kept) == MAX_HISTORY
    expected = [1, *range(failures - MAX_HISTORY + 2, failures + 1)]
    assert [entry["attempt"] for entry in kept] == expected
    assert [entry["error"] for entry in kept] == [f"ValueError: {n}" for n in expected]


def test_a_megabyte_error_is_cut_in_the_history_and_kept_longer_on_the_row(queue: QueueClient):
    made = queue.push(NAME, {}, max_attempts=2)
    huge = "MemoryError: " + "é" * 1_000_000
    claim = queue.pull(worker_id="w:1")
    assert queue.nack(claim, worker_id="w:1", error=huge, delay=0)

    row = Job.objects.get(pk=made.pk)
    [entry] = row.attempt_history
    assert entry["error"] == huge[:MAX_HISTORY_ERROR_CHARS]
    # The row's own bound is longer, and says what it cut.
    assert row.last_error.startswith(huge[: MAX_ERROR_CHARS // 2]) and len(row.last_error) <= MAX_ERROR_CHARS

    claim = queue.pull(worker_id="w:1")
    assert queue.fail(claim, worker_id="w:1", error=huge)
    assert [len(e["error"]) for e in DeadLetter.objects.get(job_id=made.pk).attempt_history] == [2000, 2000]


def test_an_unknown_outcome_is_refused_before_any_sql():
    with pytest.raises(ValueError, match="unknown attempt outcome 'done'"):
        pushed_entry(ENGINES[connection.vendor], "done", "%s")


# -- a real worker's timeout ------------------------------------------------------------------


def test_a_timed_out_attempt_in_runworker_leaves_timeout_entries(queue, start_worker, events_path):
    stuck = queue.push("workers.spin", {"path": events_path, "seconds": 30.0}, timeout=1, max_attempts=2)
    start_worker(
        "--concurrency",
        "1",
        "--poll-interval",
        "0.05",
        "--cancel-grace",
        "1",
        env={"JOBQUEUE_BACKOFF_BASE": "0.2", "JOBQUEUE_BACKOFF_MAX": "0.2"},
    )
    dead = wait_until(lambda: DeadLetter.objects.filter(job_id=stuck.pk).first(), 30, "the dead letter")

    assert [entry["outcome"] for entry in dead.attempt_history] == ["timeout", "timeout"]
    assert [entry["attempt"] for entry in dead.attempt_history] == [1, 2]
    for entry in dead.attempt_history:
        assert entry["worker"] == dead.worker_id
        assert entry["error"].startswith("JobTimeout: timed out after 1 s")
        # Measured by the database from the claim: the time limit, and less than the grace on top.
        assert 0.9 <= entry["duration"] < 5, entry
    assert parse_datetime(dead.attempt_history[1]["started_at"]) == dead.last_attempted_at


# -- the admin ----------------------------------------------------------------------------------

HOSTILE = '<script>alert("x")</script> & <b>bold</b>'


def test_the_admin_shows_the_timeline_escaped_on_the_job_and_dead_letter_pages(queue: QueueClient, operator):
    made = queue.push(NAME, {}, max_attempts=2)
    hostile_worker = "<img src=x onerror=alert(1)>"
    claim = queue.pull(worker_id=hostile_worker)
    assert queue.nack(claim, worker_id=hostile_worker, error=f"ValueError: {HOSTILE}", delay=0)
    queue.pull(worker_id="web-9:9")

    page = operator.get(reverse("admin:django_jobqueue_job_change", args=[made.pk])).content.decode()
    assert "jq-attempts" in page
    assert "&lt;script&gt;alert(&quot;x&quot;)&lt;/script&gt; &amp; &lt;b&gt;bold&lt;/b&gt;" in page
    assert "<script>alert" not in page and "<b>bold</b>" not in page
    assert "&lt;img src=x onerror=alert(1)&gt;" in page and "<img src=x" not in page
    assert ">retry</span>" in page
    # The attempt running now comes from the row.
    assert ">running</span>" in page and "web-9:9" in page

    claim = Job.objects.get(pk=made.pk)
    assert queue.nack(claim, worker_id="web-9:9", error="Fail: <i>last</i>")
    letter = DeadLetter.objects.get(job_id=made.pk)
    page = operator.get(reverse("admin:django_jobqueue_deadletter_change", args=[letter.pk])).content.decode()
    assert "&lt;script&gt;alert(&quot;x&quot;)" in page and "<script>alert" not in page
    assert "Fail: &lt;i&gt;last&lt;/i&gt;" in page
    assert ">dead</span>" in page


# -- the Django Tasks backend ---------------------------------------------------------------------

tasks_framework = pytest.mark.skipif(
    find_spec("django.tasks") is None and find_spec("django_tasks") is None,
    reason="needs Django's Tasks framework (Django 6, or django-tasks on 5.2)",
)


@tasks_framework
def test_a_task_results_errors_list_every_attempt_oldest_first(queue: QueueClient):
    from tests import tasks_for_workers as tasks

    result = tasks.add.enqueue(1, 2)
    first = queue.pull(worker_id="w:1")
    assert queue.nack(first, worker_id="w:1", error="ValueError: one", traceback="Traceback one", delay=0)
    second = queue.pull(worker_id="w:2")
    assert queue.nack(second, worker_id="w:2", error="KeyError: two", traceback="Traceback two", delay=0)

    result.refresh()
    assert [(e.exception_class_path, e.traceback) for e in result.errors] == [
        ("builtins.ValueError", "ValueError: one"),
        ("builtins.KeyError", "Traceback two"),
    ]

    third = queue.pull(worker_id="w:3")
    expire(third)
    assert queue.tick_timeouts() == 1
    result.refresh()
    paths = [e.exception_class_path for e in result.errors]
    assert paths == ["builtins.ValueError", "builtins.KeyError", "django_jobqueue.exceptions.JobQueueError"]
    # A rescued claim's traceback would be the earlier attempt's: it gets its own error text.
    assert result.errors[-1].traceback.startswith("claim expired: worker w:3")

    last = queue.pull(worker_id="w:4")
    boom = "tests.tasks_for_workers.TaskBoomError: no"
    assert queue.fail(last, worker_id="w:4", error=boom, traceback="tb4")
    dead_result = tasks.add.get_result(result.id)
    assert len(dead_result.errors) == 4
    assert dead_result.errors[-1].exception_class is tasks.TaskBoomError
    assert dead_result.errors[-1].traceback == "tb4"
    assert dead_result.errors[0].traceback == "ValueError: one"
