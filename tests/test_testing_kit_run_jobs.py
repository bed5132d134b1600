"""``run_jobs``: the queue's own claim, run and ack inside the test's transaction, on either database.

Every test here runs inside a transaction that is rolled back at its end (the
``db`` fixture, or ``django.test.TestCase``): nothing run_jobs does commits.
"""

from __future__ import annotations

import time
import traceback
from datetime import timedelta
from importlib.util import find_spec

import pytest
from django.contrib.auth.models import User
from django.db import connection, transaction
from django.test import TestCase

from django_jobqueue import JobContext, Retry, batch, enqueue, job
from django_jobqueue.exceptions import JobTimeout
from django_jobqueue.models import DeadLetter, Job
from django_jobqueue.testing.runner import TooManyJobs, run_jobs, run_schedule

# What the jobs below did, in the order they ran.
RAN: list[str] = []


@pytest.fixture(autouse=True)
def forget_runs() -> None:
    RAN.clear()


@job(name="kit_run.add")
def add(a: int, b: int) -> int:
    RAN.append(f"add {a}+{b}")
    return a + b


@job(name="kit_run.pair")
def pair(a: int) -> tuple[int, int]:
    return (a, a)


@job(name="kit_run.count_users")
def count_users(username: str) -> int:
    """Reads a row the test wrote and never committed."""
    RAN.append("count_users")
    return User.objects.filter(username=username).count()


@job(name="kit_run.boom", max_attempts=3)
def boom() -> None:
    RAN.append("boom")
    raise ValueError("boom")


@job(name="kit_run.retry_once", takes_context=True)
def retry_once(ctx: JobContext) -> str:
    RAN.append(f"retry_once attempt {ctx.attempt}")
    if ctx.attempt == 1:
        raise Retry(delay=3600)
    return "second time"


@job(name="kit_run.chain")
def chain(left: int) -> None:
    RAN.append(f"chain {left}")
    if left:
        chain.enqueue(left=left - 1)


@job(name="kit_run.forever")
def forever() -> None:
    forever.enqueue()


@job(name="kit_run.step")
def step(label: str) -> str:
    RAN.append(label)
    return label


@job(name="kit_run.finished")
def finished(batch_id: int, done: int, failed: int, cancelled: int) -> None:
    RAN.append(f"finished done={done} failed={failed}")


@job(name="kit_run.write_user", atomic=True)
def write_user(username: str) -> int:
    RAN.append(f"write_user {username}")
    user = User.objects.create(username=username)
    return user.pk


@job(name="kit_run.halfway", takes_context=True)
def halfway(ctx: JobContext) -> None:
    ctx.progress(1, 2, "half")


@job(name="kit_run.slow", timeout=0.2, max_attempts=1)
def slow() -> None:
    RAN.append("slow")
    for _ in range(100):
        time.sleep(0.02)
    RAN.append("slow finished")


@job(name="kit_run.on_commit")
def on_commit_job() -> None:
    transaction.on_commit(lambda: RAN.append("committed"))


# -- the transaction ---------------------------------------------------------------


def test_due_jobs_run_and_are_acked_inside_the_tests_transaction(db):
    assert connection.in_atomic_block, "the db fixture's transaction is open"
    jobs = [add.enqueue(a=n, b=1) for n in range(3)]

    report = run_jobs()

    assert [j.pk for j in report.done] == [j.pk for j in jobs]
    assert [j.status for j in report.done] == ["done"] * 3
    assert report.results == {jobs[0].pk: 1, jobs[1].pk: 2, jobs[2].pk: 3}
    assert (report.retried, report.dead, report.cancelled) == ([], [], [])
    assert Job.objects.filter(status="done").count() == 3
    assert connection.in_atomic_block and not connection.needs_rollback, "the test's transaction goes on"


def test_a_job_sees_the_rows_the_test_wrote_and_did_not_commit(db):
    User.objects.create(username="ada")
    count_users.enqueue(username="ada")

    report = run_jobs()

    assert list(report.results.values()) == [1]


def test_an_atomic_job_writes_in_a_savepoint_of_the_test(db):
    write_user.enqueue(username="grace")

    report = run_jobs()

    [done] = report.done
    assert User.objects.get(username="grace").pk == report.results[done.pk]


def test_the_result_is_read_back_as_stored(db):
    queued = pair.enqueue(a=4)
    assert run_jobs().results == {queued.pk: [4, 4]}, "a tuple is stored as a JSON list"


def test_progress_and_the_attempt_history_are_written_as_a_worker_writes_them(db):
    reported = halfway.enqueue()
    failing = boom.enqueue()

    run_jobs(raise_errors=False)

    reported.refresh_from_db()
    assert reported.progress == {"current": 1, "total": 2, "message": "half"}
    dead = DeadLetter.objects.get(job_id=failing.pk)
    assert [entry["outcome"] for entry in dead.attempt_history] == ["retry", "retry", "dead"]


# -- failures ------------------------------------------------------------------------


def test_a_failing_job_raises_in_the_test_after_its_attempt_is_recorded(db):
    queued = boom.enqueue()

    with pytest.raises(ValueError, match="^boom$") as raised:
        run_jobs()

    frames = [frame.name for frame in traceback.extract_tb(raised.value.__traceback__)]
    assert "boom" in frames, "the job's own traceback reaches the test"
    queued.refresh_from_db()
    assert (queued.status, queued.attempts) == ("ready", 1), "its retry is written"
    assert "ValueError: boom" in queued.last_error


def test_without_raise_errors_a_failing_job_is_retried_at_once_then_dead_lettered(db):
    queued = boom.enqueue()

    report = run_jobs(raise_errors=False)

    assert RAN == ["boom"] * 3
    assert [j.pk for j in report.retried] == [queued.pk] * 2
    assert [j.pk for j in report.dead] == [queued.pk]
    assert DeadLetter.objects.filter(job_id=queued.pk).exists()


def test_a_job_that_enqueues_itself_for_ever_stops_at_the_limit(db):
    forever.enqueue()

    with pytest.raises(TooManyJobs, match="ran 5 jobs and kit_run.forever .* still due"):
        run_jobs(limit=5)


def test_time_limits_are_kept_when_asked(db):
    slow.enqueue()
    with pytest.raises(JobTimeout, match="timed out after 0.2 s"):
        run_jobs(time_limits=True)
    assert RAN == ["slow"], "interrupted in the job's own code"
    assert DeadLetter.objects.get().error.startswith("JobTimeout")


# -- what jobs start -----------------------------------------------------------------


def test_jobs_enqueued_by_jobs_run_in_the_same_call(db):
    chain.enqueue(left=2)

    report = run_jobs()

    assert RAN == ["chain 2", "chain 1", "chain 0"]
    assert len(report.done) == 3


def test_dependents_and_a_batch_callback_run_after_what_they_wait_for(db):
    with batch(finished) as group:
        first = step.enqueue(label="first")
        step.using(depends_on=[first]).enqueue(label="second")
    assert group.id

    run_jobs()

    assert RAN == ["first", "second", "finished done=2 failed=0"]


# -- what runs -------------------------------------------------------------------------


def test_jobs_due_later_run_only_when_scheduled(db):
    later = step.using(delay=timedelta(hours=1)).enqueue(label="later")

    assert run_jobs().ran == 0
    report = run_jobs(scheduled=True)

    assert [j.pk for j in report.done] == [later.pk]


def test_a_retry_waits_for_its_backoff_unless_scheduled(db):
    queued = enqueue("kit_run.retry_once")

    first = run_jobs()
    second = run_jobs(scheduled=True)

    assert ([j.pk for j in first.retried], second.results) == ([queued.pk], {queued.pk: "second time"})


def test_names_and_queue_choose_the_jobs_and_leave_the_others_as_they_were(db):
    other = add.enqueue(a=1, b=1)
    mail = step.using(queue="mail").enqueue(label="mail")
    named = step.enqueue(label="named")

    by_name = run_jobs(names=[step], queue="default")
    by_queue = run_jobs(queue="mail")

    assert [j.pk for j in by_name.done] == [named.pk]
    assert [j.pk for j in by_queue.done] == [mail.pk]
    other.refresh_from_db()
    assert (other.status, other.attempts, other.locked_by) == ("ready", 0, None)
    assert (other.started_at, other.last_attempted_at) == (None, None), "as it was: never started"


def test_a_schedule_fires_in_the_test_with_its_payload_and_options(db, settings):
    settings.JOBQUEUE = {
        "SCHEDULES": {
            "nightly": {"job": "kit_run.step", "every": 86400, "payload": {"label": "night"}, "queue": "mail"}
        }
    }

    report = run_schedule("nightly")

    [done] = report.done
    assert (RAN, done.queue, done.payload) == (["night"], "mail", {"label": "night"})
    with pytest.raises(LookupError, match="no schedule is declared as 'daily'; declared: nightly"):
        run_schedule("daily")


def test_one_name_alone_is_a_name_and_a_bad_limit_is_refused(db):
    named = step.enqueue(label="alone")
    add.enqueue(a=1, b=2)

    assert [j.pk for j in run_jobs(names="kit_run.step").done] == [named.pk]
    with pytest.raises(TypeError, match="name must be a job's name or its @job function, not int"):
        run_jobs(names=[123])
    for limit in (0, -1, 1.5, True, "10"):
        with pytest.raises(ValueError, match="limit must be a positive int"):
            run_jobs(limit=limit)


# -- django.test.TestCase ----------------------------------------------------------------


class RunJobsInATestCase(TestCase):
    def test_jobs_run_and_the_failures_raise(self) -> None:
        done = add.enqueue(a=2, b=2)
        failing = boom.enqueue()

        with self.assertRaisesMessage(ValueError, "boom"):
            run_jobs()
        report = run_jobs(scheduled=True, raise_errors=False)  # its backoff skipped

        self.assertEqual(Job.objects.get(pk=done.pk).status, "done")
        self.assertEqual([j.pk for j in report.dead], [failing.pk])

    def test_on_commit_callbacks_of_a_job_wait_for_the_tests_commit(self) -> None:
        with self.captureOnCommitCallbacks(execute=True) as callbacks:
            on_commit_job.enqueue()
            run_jobs()
            self.assertEqual(RAN, [])
        self.assertEqual((len(callbacks), RAN), (1, ["committed"]))


# -- Django's Tasks framework ----------------------------------------------------------------

needs_tasks = pytest.mark.skipif(
    find_spec("django.tasks") is None and find_spec("django_tasks") is None,
    reason="needs Django's Tasks framework (Django 6, or django-tasks on 5.2)",
)


@needs_tasks
def test_tasks_enqueued_through_the_backend_run_and_their_results_show(db):
    from tests import tasks_for_workers as tasks

    result = tasks.add.enqueue(2, 3)

    report = run_jobs()

    result.refresh()
    assert ([int(j.pk) for j in report.done], result.status, result.return_value) == (
        [int(result.id)],
        "SUCCESSFUL",
        5,
    )


@needs_tasks
def test_a_coroutine_task_is_awaited(db):
    from tests import tasks_for_workers as tasks

    result = tasks.async_add.enqueue(2, 5)

    run_jobs()

    result.refresh()
    assert (result.status, result.return_value) == ("SUCCESSFUL", 7)


def test_a_coroutine_job_is_awaited_its_queries_in_the_tests_transaction(db):
    from django.contrib.auth.models import Group

    from tests.jobs_for_testing_kit import coroutine

    queued = coroutine.enqueue(value=3)

    report = run_jobs()

    assert [int(j.pk) for j in report.done] == [queued.pk]
    assert Job.objects.get(pk=queued.pk).result == 4
    assert Group.objects.filter(name="coroutine-3").exists()
