"""Django Tasks run by real ``runworker`` processes, next to ``@job`` jobs."""

from __future__ import annotations

import re
from importlib.util import find_spec

import pytest

if find_spec("django.tasks") is None and find_spec("django_tasks") is None:
    pytest.skip("needs Django's Tasks framework (Django 6, or django-tasks on 5.2)", allow_module_level=True)

from django_jobqueue.backends import TaskResultStatus
from django_jobqueue.models import DeadLetter, Job
from django_jobqueue.queue import QueueClient
from tests import tasks_for_workers as tasks
from tests.jobs_for_workers import events
from tests.worker_support import wait_until

FAST_BACKOFF = {"JOBQUEUE_BACKOFF_BASE": "0.05", "JOBQUEUE_BACKOFF_MAX": "0.2"}


def marked_job(name: str, payload: dict, **options) -> Job:
    """A row marked as a task whatever its name says: what a worker must be careful with."""
    return QueueClient().push_task("default", name, payload, **options)


def test_tasks_run_next_to_jobs_and_their_results_are_read_back(queue, start_worker, events_path, tmp_path):
    signals_path = str(tmp_path / "signals.jsonl")
    added = tasks.add.enqueue(2, 3)
    shouted = tasks.shout.enqueue("hi", times=2)
    awaited = tasks.async_add.enqueue(20, 22)
    described = tasks.describe.enqueue(events_path)
    plain = queue.push("workers.record", {"path": events_path, "value": "job"})

    worker = start_worker("--burst", "--worker-id", "tasker", env={"TASK_SIGNALS_PATH": signals_path})

    assert worker.wait() == 0, worker.log()
    for result, value in [(added, 5), (shouted, "HI!HI!"), (awaited, 42)]:
        result.refresh()
        assert (result.status, result.return_value, result.worker_ids) == (
            TaskResultStatus.SUCCESSFUL,
            value,
            ["tasker"],
        ), worker.log()
        assert result.enqueued_at <= result.started_at <= result.finished_at
    described.refresh()
    assert described.return_value == {
        "attempt": 1,
        "result_id": described.id,
        "worker_ids": ["tasker"],
        "status": "RUNNING",
    }
    assert Job.objects.get(pk=plain.pk).result == "job"
    log = worker.log()
    assert re.search(rf"job tests\.tasks_for_workers\.add id={added.id} attempt=1/5 .* outcome=done", log)
    signals = [(e["event"], e["result_id"], e["status"], e["sender"]) for e in events(signals_path)]
    assert signals.count(("task_started", added.id, "RUNNING", "JobQueueBackend")) == 1
    assert signals.count(("task_finished", added.id, "SUCCESSFUL", "JobQueueBackend")) == 1
    assert len(signals) == 8, "a started and a finished signal per task, none for the @job job"


def test_retries_count_attempts_and_a_context_sees_each(queue, start_worker, events_path, tmp_path):
    signals_path = str(tmp_path / "signals.jsonl")
    result = tasks.flaky.enqueue(events_path, failures=2)

    worker = start_worker(
        "--worker-id",
        "flaky-worker",
        "--poll-interval",
        "0.05",
        env={**FAST_BACKOFF, "TASK_SIGNALS_PATH": signals_path},
    )

    wait_until(lambda: Job.objects.filter(pk=int(result.id), status="done").exists(), 15, "the third attempt")
    result.refresh()
    assert (result.status, result.return_value, result.attempts) == (TaskResultStatus.SUCCESSFUL, 3, 3)
    assert result.worker_ids == ["flaky-worker"] * 3
    assert [e["attempt"] for e in events(events_path)] == [1, 2, 3]
    # One error per failed attempt, oldest first; the latest with its traceback.
    assert [error.exception_class for error in result.errors] == [tasks.TaskBoomError] * 2
    assert result.errors[0].traceback == "tests.tasks_for_workers.TaskBoomError: attempt 1 failed"
    assert "attempt 2 failed" in result.errors[1].traceback
    assert "Traceback (most recent call last)" in result.errors[1].traceback
    # task_finished is sent once the ack has committed, a moment after the row reads done.
    wait_until(lambda: len(events(signals_path)) == 4, 10, "the finished signal")
    signals = [(e["event"], e["status"], e["attempts"]) for e in events(signals_path)]
    assert signals == [
        ("task_started", "RUNNING", 1),
        ("task_started", "RUNNING", 2),
        ("task_started", "RUNNING", 3),
        ("task_finished", "SUCCESSFUL", 3),
    ], worker.log()


def test_a_task_out_of_attempts_is_dead_and_failed(queue, start_worker, tmp_path):
    signals_path = str(tmp_path / "signals.jsonl")
    result = tasks.always_fails.enqueue("out of luck")
    Job.objects.filter(pk=int(result.id)).update(max_attempts=2)

    start_worker("--poll-interval", "0.05", env={**FAST_BACKOFF, "TASK_SIGNALS_PATH": signals_path})

    dead = wait_until(lambda: DeadLetter.objects.filter(job_id=int(result.id)).first(), 15, "the dead letter")
    assert dead.error == "tests.tasks_for_workers.TaskBoomError: out of luck"
    result.refresh()
    assert (result.status, result.attempts, result.finished_at) == (
        TaskResultStatus.FAILED,
        2,
        dead.failed_at,
    )
    first, error = result.errors
    assert first.exception_class_path == error.exception_class_path == "tests.tasks_for_workers.TaskBoomError"
    assert "raise TaskBoomError(message)" in error.traceback
    wait_until(lambda: len(events(signals_path)) == 3, 10, "the finished signal")
    assert events(signals_path)[-1]["event"] == "task_finished"
    assert events(signals_path)[-1]["status"] == "FAILED"


@pytest.mark.skipif(not tasks.TASK_OPTIONS_SUPPORTED, reason="@task options need Django 6.1 or the backport")
def test_task_options_max_attempts_reach_the_worker(queue, start_worker):
    result = tasks.twice_then_dead.enqueue("twice")

    start_worker("--poll-interval", "0.05", env=FAST_BACKOFF)

    dead = wait_until(lambda: DeadLetter.objects.filter(job_id=int(result.id)).first(), 15, "the dead letter")
    assert (dead.attempts, dead.max_attempts) == (2, 2)


def test_refresh_follows_a_running_task(queue, start_worker, events_path, tmp_path):
    release = tmp_path / "release"
    result = tasks.gate.enqueue(events_path, str(release))

    worker = start_worker("--worker-id", "gatekeeper", "--poll-interval", "0.05")
    wait_until(lambda: events(events_path), 15, "the task to start")

    result.refresh()
    assert (result.status, result.worker_ids, result.attempts) == (
        TaskResultStatus.RUNNING,
        ["gatekeeper"],
        1,
    )
    assert result.started_at is not None and result.finished_at is None
    release.touch()
    wait_until(lambda: (result.refresh(), result.is_finished)[1], 15, "the task to finish")
    assert (result.status, result.return_value) == (TaskResultStatus.SUCCESSFUL, "released"), worker.log()


def test_what_is_not_a_task_is_refused_and_never_called(queue, start_worker, tmp_path):
    called = tmp_path / "called"
    plain = marked_job(
        "tests.tasks_for_workers.plain_function", {"args": [str(called)], "kwargs": {}}, max_attempts=3
    )
    missing = marked_job("testproject.demo.no_such_module.f", {"args": [], "kwargs": {}}, max_attempts=3)

    worker = start_worker("--burst")

    assert worker.wait() == 0, worker.log()
    dead = DeadLetter.objects.get(job_id=plain.pk)
    assert dead.error == f"Fail: refused to run {plain.name!r}: it is a function, not a Task"
    assert dead.attempts == 1 and dead.task_backend == "default"
    assert not called.exists(), "a function that is not a Task was called"
    missing.refresh_from_db()
    assert (missing.status, missing.attempts) == ("ready", 1), "retried: a deploy may bring the module"
    assert "no module 'testproject.demo.no_such_module'" in missing.last_error


def test_a_task_row_outside_the_allowed_modules_is_refused_before_any_import(queue, start_worker, tmp_path):
    touched = tmp_path / "os-system-ran"
    canary = tmp_path / "canary"
    system = marked_job("os.system", {"args": [f"touch {touched}"], "kwargs": {}}, max_attempts=3)
    imported = marked_job("tests.canary_module.run", {"args": [], "kwargs": {}}, max_attempts=3)

    worker = start_worker("--burst", env={"JOBQUEUE_CANARY": str(canary)})

    assert worker.wait() == 0, worker.log()
    for job, module in [(system, "os"), (imported, "tests.canary_module")]:
        dead = DeadLetter.objects.get(job_id=job.pk)
        assert dead.error == (
            f"Fail: refused to import {module!r} for task {job.name!r}: it is not a module of an "
            "installed app nor listed in JOBQUEUE['TASK_MODULES']"
        )
        assert dead.attempts == 1, "dead-lettered at once: no retry imports it later"
    assert not canary.exists(), "a task row's name made the worker import a module of its choosing"
    assert not touched.exists(), "os.system ran"


def test_a_task_whose_result_cannot_be_stored_fails_after_one_run(queue, start_worker, events_path):
    result = tasks.returns_object.enqueue(events_path)

    assert start_worker("--burst").wait() == 0

    dead = DeadLetter.objects.get(job_id=int(result.id))
    assert (dead.attempts, dead.max_attempts) == (1, 5)
    assert dead.error.startswith("TypeError: Unsupported type: <class 'object'>"), dead.error
    assert len(events(events_path)) == 1, "its effect happened once"
    result.refresh()
    assert (result.status, result.attempts) == (TaskResultStatus.FAILED, 1)
