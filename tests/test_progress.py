"""``ctx.progress()``: checked at the call, coalesced, fenced by the claim, kept, and shown in the admin."""

from __future__ import annotations

import threading
from collections.abc import Callable
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext
from django.urls import reverse
from django.utils import timezone

import tests.progress_jobs  # noqa: F401 - registers the jobs run in this process
from django_jobqueue import QueueClient
from django_jobqueue.models import DeadLetter, Job
from django_jobqueue.worker.run.context import JobContext
from django_jobqueue.worker.run.executor import Executor
from django_jobqueue.worker.run.outcomes import Outcome
from django_jobqueue.worker.run.progress import ProgressWriter
from tests.jobs_for_workers import events
from tests.worker_support import WorkerProcess, wait_until

WORKER = "progress-test"
JOBS = reverse("admin:django_jobqueue_job_changelist")
WORKER_MODULES = {"JOBQUEUE_MODULES": "tests.jobs_for_workers,tests.progress_jobs"}


def claimed(queue: QueueClient, name: str, payload: dict[str, Any] | None = None, **options: Any) -> Job:
    queue.push(name, payload or {}, **options)
    job = queue.pull(worker_id=WORKER)
    assert job is not None
    return job


def stored(job: Job) -> Any:
    return Job.objects.get(pk=job.pk).progress


def progress_writes(queries: CaptureQueriesContext) -> int:
    return sum("SET progress" in query["sql"] for query in queries.captured_queries)


def with_writer(queue: QueueClient) -> tuple[Executor, ProgressWriter]:
    """An executor whose reports go to a running ``ProgressWriter``, as under runworker."""
    executor = Executor(queue, WORKER)
    writer = ProgressWriter(queue, WORKER, executor.attempts)
    executor.progress = writer
    writer.start()
    return executor, writer


# -- checked at the call ------------------------------------------------------------


@pytest.mark.parametrize(
    ("args", "error"),
    [
        ((True,), TypeError),
        (("3",), TypeError),
        ((None,), TypeError),
        ((1, "10"), TypeError),
        ((1, 10, 42), TypeError),
        ((-1,), ValueError),
        ((float("nan"),), ValueError),
        ((float("inf"), 10), ValueError),
        ((1, 0), ValueError),
        ((1, -5), ValueError),
        ((1, float("inf")), ValueError),
        ((1, 10, "a\x00b"), ValueError),
        ((1, 10, "lone \ud800 surrogate"), ValueError),
        # Finite, but past what current / total and its percentage can be computed from.
        ((1e308, 1e-308), ValueError),
        ((1e300, 1e-10), ValueError),
        ((1e101,), ValueError),
        ((10**101, 10**102), ValueError),
        ((10**5000,), ValueError),
        ((1, 1e-101), ValueError),
        ((1, 5e-324), ValueError),
    ],
)
def test_a_bad_report_raises_at_the_call_and_writes_nothing(queue, args, error):
    job = claimed(queue, "progress.count_to", {"n": 1})
    ctx = JobContext(job, WORKER, queue)
    with pytest.raises(error, match="progress"):
        ctx.progress(*args)
    with pytest.raises(error, match="progress"):
        queue.record_progress(
            [(job, dict(zip(("current", "total", "message"), args, strict=False)))], worker_id=WORKER
        )
    assert stored(job) is None


@pytest.mark.parametrize(
    ("current", "total", "refused"),
    [(1e308, 1e-308, "current"), (1e300, 1e-10, "current"), (3.0, 1e-200, "total")],
)
def test_a_refused_report_raises_in_the_running_job_which_goes_on(queue, current, total, refused):
    job = claimed(queue, "progress.report_refused", {"current": repr(current), "total": repr(total)})
    assert Executor(queue, WORKER).run(job) is Outcome.DONE
    result = Job.objects.get(pk=job.pk).result
    bad = current if refused == "current" else total
    assert result.startswith(f"ValueError: progress {refused} must") and f"got {bad!r}" in result, result
    assert stored(job) == {"current": 1, "total": 2, "message": "after the refusal"}


def test_a_report_is_stored_as_current_total_and_message(queue):
    job = claimed(queue, "progress.count_to", {"n": 1})
    JobContext(job, WORKER, queue).progress(12, 10, "past an estimated total")
    assert stored(job) == {"current": 12, "total": 10, "message": "past an estimated total"}


def test_counts_may_be_floats_huge_ints_or_without_a_total(queue):
    job = claimed(queue, "progress.count_to", {"n": 1})
    for current, total in [(0.5, 2.25), (10**30, 10**31), (7, None), (10**100, 1e-100)]:
        assert queue.record_progress([(job, {"current": current, "total": total})], worker_id=WORKER)
        assert stored(job) == {"current": current, "total": total, "message": ""}


def test_a_long_message_is_cut_to_200_characters(queue):
    job = claimed(queue, "progress.count_to", {"n": 1})
    JobContext(job, WORKER, queue).progress(1, 2, "x" * 500)
    message = stored(job)["message"]
    assert len(message) == 200 and message.endswith("…")


# -- coalesced ------------------------------------------------------------------------


def test_ten_thousand_reports_outside_a_worker_make_a_handful_of_writes(queue):
    job = claimed(queue, "progress.count_to", {"n": 10_000})
    with CaptureQueriesContext(connection) as queries:
        outcome = Executor(queue, WORKER).run(job)
    assert outcome is Outcome.DONE
    # The first report, and the last once the job returned.
    assert 1 <= progress_writes(queries) <= 3, queries.captured_queries
    assert stored(job) == {"current": 10_000, "total": 10_000, "message": "item 10000"}


@pytest.mark.slow
def test_the_writer_writes_ten_thousand_reports_over_two_seconds_in_a_few_statements(queue):
    job = claimed(queue, "progress.count_to", {"n": 10_000, "seconds": 2.5})
    executor, writer = with_writer(queue)
    try:
        assert executor.run(job) is Outcome.DONE
    finally:
        writer.stop()
    # One per second while it ran, and the last report before its ack.
    assert 2 <= writer.statements <= 5
    assert stored(job) == {"current": 10_000, "total": 10_000, "message": "item 10000"}


# -- fenced by the claim ------------------------------------------------------------------


def test_a_stale_claims_report_is_refused_and_lends_nothing_to_the_current_one(queue):
    first = claimed(queue, "progress.count_to", {"n": 1})
    Job.objects.filter(pk=first.pk).update(locked_until=timezone.now() - timedelta(hours=1))
    assert queue.tick_timeouts() == 1
    second = queue.pull(worker_id=WORKER)
    assert second is not None and second.pk == first.pk and second.claim_token != first.claim_token

    assert queue.record_progress([(first, {"current": 9})], worker_id=WORKER) == set()
    assert stored(first) is None
    written = queue.record_progress(
        [(first, {"current": 9, "message": "stale"}), (second, {"current": 1, "message": "current"})],
        worker_id=WORKER,
    )
    assert written == {(second.pk, second.claim_token)}
    assert stored(second) == {"current": 1, "total": None, "message": "current"}
    # Another worker's, or a finished job's, report changes nothing either.
    assert queue.record_progress([(second, {"current": 2})], worker_id="someone-else") == set()
    assert queue.ack(second, worker_id=WORKER)
    assert queue.record_progress([(second, {"current": 3})], worker_id=WORKER) == set()
    assert stored(second)["current"] == 1


# -- written by the worker, not in the job's transaction -------------------------------------


def run_in_thread(executor: Executor, job: Job) -> tuple[threading.Thread, list[Outcome]]:
    outcomes: list[Outcome] = []

    def run() -> None:
        try:
            outcomes.append(executor.run(job))
        finally:
            connection.close()

    thread = threading.Thread(target=run)
    thread.start()
    return thread, outcomes


def test_a_report_inside_the_jobs_atomic_is_seen_at_once_and_survives_its_rollback(
    queue, tmp_path, row_locks
):
    path, release = str(tmp_path / "events"), tmp_path / "release"
    job = claimed(queue, "progress.inside_atomic", {"path": path, "release": str(release)})
    inside = {"current": 5, "total": 10, "message": "inside the job's transaction"}
    executor, writer = with_writer(queue)
    try:
        thread, outcomes = run_in_thread(executor, job)
        wait_until(lambda: events(path), message="the job reported")
        if row_locks:
            # On SQLite the job's (IMMEDIATE) transaction holds the one write lock until it ends.
            wait_until(lambda: stored(job) == inside, timeout=5, message="progress written while it runs")
        release.touch()
        thread.join(10)
    finally:
        writer.stop()
    assert outcomes == [Outcome.RETRY]
    wait_until(lambda: stored(job) == inside, timeout=5, message="progress kept through the rollback")


def test_outside_a_worker_a_report_inside_atomic_waits_until_the_job_returned(queue, tmp_path):
    path, release = str(tmp_path / "events"), tmp_path / "release"
    job = claimed(queue, "progress.inside_atomic", {"path": path, "release": str(release)})
    thread, outcomes = run_in_thread(Executor(queue, WORKER), job)
    wait_until(lambda: events(path), message="the job reported")
    # Written from inside, it would join the job's transaction and be rolled back with it.
    assert stored(job) is None
    release.touch()
    thread.join(10)
    assert outcomes == [Outcome.RETRY]
    assert stored(job) == {"current": 5, "total": 10, "message": "inside the job's transaction"}


# -- kept after the attempt ----------------------------------------------------------------


def test_a_retried_job_starts_from_its_last_attempts_progress(queue):
    job = claimed(queue, "progress.retry_once")
    assert Executor(queue, WORKER).run(job) is Outcome.RETRY
    first = {"current": 3, "total": 10, "message": "first attempt"}
    assert stored(job) == first
    again = queue.pull(worker_id=WORKER)
    assert again is not None and again.progress == first
    assert Executor(queue, WORKER).run(again) is Outcome.DONE
    assert Job.objects.get(pk=job.pk).result == first


def test_a_dead_letter_keeps_the_progress_and_a_retry_brings_it_back(queue):
    job = claimed(queue, "progress.fail_after", {"current": 37})
    assert Executor(queue, WORKER).run(job) is Outcome.DEAD
    expected = {"current": 37, "total": 100, "message": "about to fail"}
    letter = DeadLetter.objects.get(job_id=job.pk)
    assert letter.progress == expected
    assert queue.retry_dead_letter(letter).progress == expected


def test_a_batch_retry_of_dead_letters_brings_their_progress_back(queue):
    for current in (10, 20):
        assert Executor(queue, WORKER).run(claimed(queue, "progress.fail_after", {"current": current}))
    assert queue.retry_dead_letters(DeadLetter.objects.all()) == 2
    assert sorted(job.progress["current"] for job in Job.objects.all()) == [10, 20]


# -- real workers ---------------------------------------------------------------------------


def run_reporting_job(queue: QueueClient, worker: WorkerProcess, tmp_path: Path) -> None:
    path, release = str(tmp_path / "events"), tmp_path / "release"
    reporting = queue.push(
        "progress.report_and_wait",
        {"path": path, "release": str(release), "current": 42, "total": 100, "message": "copying <files>"},
    )
    counting = queue.push("progress.count_to", {"n": 10_000}, priority=-1)
    worker.wait_started(30)
    wait_until(lambda: events(path), timeout=30, message="the job reported")
    running = {"current": 42, "total": 100, "message": "copying <files>"}
    wait_until(lambda: stored(reporting) == running, timeout=5, message="its progress while it runs")
    assert Job.objects.get(pk=reporting.pk).status == "running"
    release.touch()
    wait_until(lambda: Job.objects.get(pk=counting.pk).status == "done", timeout=30, message="both done")
    assert stored(reporting) == {"current": 100, "total": 100, "message": "finished"}
    assert stored(counting) == {"current": 10_000, "total": 10_000, "message": "item 10000"}


@pytest.mark.slow
@pytest.mark.parametrize("pool", ["threads", "processes"])
def test_a_workers_running_job_shows_its_progress_and_ends_on_its_last_report(
    queue, start_worker, tmp_path, pool
):
    worker = start_worker("--pool", pool, "--concurrency", "1", "--poll-interval", "0.1", env=WORKER_MODULES)
    run_reporting_job(queue, worker, tmp_path)
    assert "Traceback" not in worker.log()


# -- the admin ---------------------------------------------------------------------------------

HOSTILE = '<script>alert("x")</script>'


def test_the_job_page_shows_a_bar_with_an_escaped_label(operator: Client, queue):
    job = claimed(queue, "progress.count_to", {"n": 1})
    queue.record_progress([(job, {"current": 42, "total": 100, "message": HOSTILE})], worker_id=WORKER)
    page = operator.get(reverse("admin:django_jobqueue_job_change", args=[job.pk])).content.decode()
    assert '<progress class="jq-progress" max="100" value="42"' in page
    label = "42 / 100 (42%) — &lt;script&gt;alert(&quot;x&quot;)&lt;/script&gt;"
    assert f'aria-label="{label}"' in page and f">{label}<" in page
    assert HOSTILE not in page


def test_the_job_page_of_a_finished_job_shows_its_last_progress(operator: Client, queue):
    job = claimed(queue, "progress.count_to", {"n": 3})
    assert Executor(queue, WORKER).run(job) is Outcome.DONE
    page = operator.get(reverse("admin:django_jobqueue_job_change", args=[job.pk])).content.decode()
    assert "3 / 3 (100%) — item 3" in page and "As its last attempt reported it." in page


def test_a_job_without_progress_shows_no_bar(operator: Client, queue):
    job = claimed(queue, "progress.count_to", {"n": 1})
    page = operator.get(reverse("admin:django_jobqueue_job_change", args=[job.pk])).content.decode()
    assert "jq-progress" not in page.replace("jq-progress-", "")


def test_the_job_list_shows_running_jobs_progress_without_a_query_per_row(
    operator: Client, queue, django_assert_max_num_queries: Callable[..., Any]
):
    def running_with_progress(current: int) -> None:
        job = claimed(queue, "progress.count_to", {"n": 1})
        queue.record_progress([(job, {"current": current, "total": 10})], worker_id=WORKER)

    running_with_progress(4)
    with CaptureQueriesContext(connection) as one:
        operator.get(JOBS)
    for current in (5, 6, 7, 8):
        running_with_progress(current)
    with django_assert_max_num_queries(len(one.captured_queries)):
        page = operator.get(JOBS).content.decode()
    for current in (4, 5, 6, 7, 8):
        assert f"{current} / 10 ({current}0%)" in page
    # A job that is not running shows none, even with a stored report.
    queue.push("progress.count_to", {"n": 1})
    Job.objects.filter(status="ready").update(progress={"current": 9, "total": 10, "message": ""})
    assert "9 / 10" not in operator.get(JOBS).content.decode()
