"""The Django Tasks backend in-process: enqueue, validation, results read off the rows."""

from __future__ import annotations

import sys
from datetime import timedelta
from importlib.util import find_spec

import pytest

if find_spec("django.tasks") is None and find_spec("django_tasks") is None:
    pytest.skip("needs Django's Tasks framework (Django 6, or django-tasks on 5.2)", allow_module_level=True)

from asgiref.sync import async_to_sync
from django.core.checks import run_checks
from django.db import transaction
from django.utils import timezone

from django_jobqueue.backends import (
    InvalidTask,
    JobQueueBackend,
    TaskResultDoesNotExist,
    TaskResultStatus,
    task_enqueued,
)
from django_jobqueue.exceptions import JobPayloadError
from django_jobqueue.models import DeadLetter, Job
from django_jobqueue.queue import QueueClient
from tests import tasks_for_workers as tasks
from tests.conftest import count_jobs

BACKEND = "django_jobqueue.backends.JobQueueBackend"


def tasks_setting(**extra):
    return {"default": {"BACKEND": BACKEND, "QUEUES": ["default", "tasks", "tasks-urgent"], **extra}}


def test_the_backend_says_what_it_supports(queue):
    backend = tasks.add.get_backend()
    assert isinstance(backend, JobQueueBackend)
    assert backend.supports_defer and backend.supports_priority
    assert backend.supports_get_result and backend.supports_async_task


def test_enqueue_inserts_a_job_marked_as_a_task(queue):
    result = tasks.shout.enqueue("hi", times=2)

    job = Job.objects.get(pk=int(result.id))
    assert (job.name, job.task_backend, job.queue, job.priority) == (
        "tests.tasks_for_workers.shout",
        "default",
        "tasks",
        7,
    )
    assert job.payload == {"args": ["hi"], "kwargs": {"times": 2}}
    assert (job.status, job.attempts, job.max_attempts, job.worker_ids) == ("ready", 0, 5, [])
    assert result.status == TaskResultStatus.READY
    assert (result.args, result.kwargs, result.backend) == (["hi"], {"times": 2}, "default")
    assert result.enqueued_at == job.created_at
    assert (result.started_at, result.finished_at, result.last_attempted_at) == (None, None, None)
    assert (result.errors, result.worker_ids, result.attempts) == ([], [], 0)
    assert result.task.func is tasks.shout.func


def test_queue_name_priority_and_run_after_map_onto_the_job(queue):
    later = timezone.now() + timedelta(hours=1)

    result = tasks.add.using(queue_name="tasks-urgent", priority=-20, run_after=later).enqueue(1, 2)

    job = Job.objects.get(pk=int(result.id))
    assert (job.queue, job.priority, job.run_at) == ("tasks-urgent", -20, later)
    assert queue.pull(worker_id="w") is None, "not due before run_after"


def test_enqueue_joins_the_callers_transaction(queue, other_connection):
    with transaction.atomic():
        tasks.add.enqueue(1, 2)
        assert count_jobs(other_connection) == 0
    assert count_jobs(other_connection) == 1

    with pytest.raises(RuntimeError), transaction.atomic():
        tasks.add.enqueue(3, 4)
        raise RuntimeError("roll back")
    assert count_jobs(other_connection) == 1


def test_aenqueue_and_aget_result(queue):
    result = async_to_sync(tasks.add.aenqueue)(2, 3)

    assert Job.objects.get(pk=int(result.id)).payload == {"args": [2, 3], "kwargs": {}}
    fetched = async_to_sync(tasks.add.aget_result)(result.id)
    assert (fetched.id, fetched.status, fetched.args) == (result.id, TaskResultStatus.READY, [2, 3])


def test_task_enqueued_is_sent(queue):
    sent = []

    def receiver(sender, task_result, **kwargs):
        sent.append((sender, task_result.id, task_result.status))

    task_enqueued.connect(receiver)
    try:
        result = tasks.add.enqueue(1, 1)
    finally:
        task_enqueued.disconnect(receiver)
    assert sent == [(JobQueueBackend, result.id, TaskResultStatus.READY)]


def test_the_backends_queues_are_enforced(queue):
    with pytest.raises(InvalidTask, match="Queue 'elsewhere' is not valid for backend"):
        tasks.add.using(queue_name="elsewhere")
    assert not Job.objects.exists()


def test_validate_task_refuses_what_cannot_run(queue, settings):
    with pytest.raises(InvalidTask, match="must be a plain function of its module"):
        tasks.task(tasks.Holder.nested)
    settings.TASKS = tasks_setting(QUEUES=[])
    with pytest.raises(InvalidTask, match="queue name 'no spaces' may hold only"):
        tasks.add.using(queue_name="no spaces")
    settings.TASKS = tasks_setting(
        OPTIONS={"TASK_OPTIONS": {"tests.tasks_for_workers.add": {"max_attempts": 0}}}
    )
    with pytest.raises(InvalidTask, match="max_attempts must be from 1"):
        tasks.add.enqueue(1, 2)
    assert not Job.objects.exists()


def test_a_task_not_found_at_its_path_is_refused_at_enqueue(queue):
    not_findable = tasks.task(tasks.plain_function)  # the module's attribute stays the plain function

    with pytest.raises(InvalidTask, match="is not this Task: workers find a task by its module path"):
        not_findable.enqueue("/nowhere")
    assert not Job.objects.exists()


def test_arguments_json_cannot_carry_are_refused(queue):
    with pytest.raises(JobPayloadError, match="must be JSON"):
        tasks.add.enqueue(object(), 1)
    with pytest.raises(JobPayloadError, match="which JSON cannot carry"):
        tasks.add.enqueue(float("nan"), 1)
    assert not Job.objects.exists()


def test_get_result_raises_for_unknown_ids(queue, job_factory):
    plain_job = job_factory("tests.noop")
    backend = tasks.add.get_backend()

    for result_id in ["999999", "abc", "", "-1", str(plain_job.pk), "１２"]:
        with pytest.raises(TaskResultDoesNotExist):
            backend.get_result(result_id)


def test_a_result_follows_its_job_through_claims_retries_and_success(queue):
    result = tasks.add.enqueue(2, 3)
    job_id = int(result.id)

    first = queue.pull(worker_id="worker-a")
    result.refresh()
    assert (first.pk, result.status, result.worker_ids, result.attempts) == (
        job_id,
        TaskResultStatus.RUNNING,
        ["worker-a"],
        1,
    )
    assert result.started_at == result.last_attempted_at == first.started_at is not None
    with pytest.raises(ValueError, match="not finished"):
        _ = result.return_value

    queue.nack(first, worker_id="worker-a", error="ValueError: kaput", traceback="Traceback...kaput", delay=0)
    result.refresh()
    assert result.status == TaskResultStatus.READY
    [error] = result.errors
    assert (error.exception_class_path, error.exception_class, error.traceback) == (
        "builtins.ValueError",
        ValueError,
        "Traceback...kaput",
    )

    second = queue.pull(worker_id="worker-b")
    assert queue.ack(second, worker_id="worker-b", result=5)
    result.refresh()
    job = Job.objects.get(pk=job_id)
    assert (result.status, result.return_value, result.worker_ids, result.attempts) == (
        TaskResultStatus.SUCCESSFUL,
        5,
        ["worker-a", "worker-b"],
        2,
    )
    assert (result.finished_at, result.started_at, result.last_attempted_at) == (
        job.finished_at,
        first.started_at,
        second.last_attempted_at,
    )
    assert result.is_finished
    assert tasks.add.get_result(result.id).return_value == 5


def test_get_result_of_another_task_is_a_mismatch(queue):
    result = tasks.add.enqueue(1, 2)

    with pytest.raises(Exception, match="Task does not match") as info:
        tasks.shout.get_result(result.id)
    assert type(info.value).__name__ == "TaskResultMismatch"


def test_a_handed_back_attempt_leaves_worker_ids(queue):
    result = tasks.add.enqueue(1, 2)
    claimed = queue.pull(worker_id="stopping")
    assert queue.release(claimed, worker_id="stopping")

    queue.pull(worker_id="next")
    result.refresh()
    assert (result.worker_ids, result.attempts) == (["next"], 1)


def test_a_dead_lettered_task_is_failed_and_a_retry_stays_a_task(queue):
    result = tasks.always_fails.enqueue("no")
    job = queue.pull(worker_id="w1")
    queue.fail(job, worker_id="w1", error="tests.tasks_for_workers.TaskBoomError: no", traceback="tb")

    result.refresh()
    assert result.status == TaskResultStatus.FAILED
    assert (result.worker_ids, result.attempts, result.started_at) == (["w1"], 1, job.started_at)
    dead = DeadLetter.objects.get(job_id=job.pk)
    assert result.finished_at == dead.failed_at
    assert result.errors[0].exception_class is tasks.TaskBoomError
    with pytest.raises(ValueError, match="Task failed"):
        _ = result.return_value

    retried = queue.retry_dead_letter(dead)
    assert retried.task_backend == "default"
    with pytest.raises(TaskResultDoesNotExist):
        result.refresh()  # the retried job has an id of its own
    again = tasks.always_fails.get_result(str(retried.pk))
    assert (again.status, again.attempts, again.errors[0].traceback) == (TaskResultStatus.READY, 0, "tb")


def test_a_cancelled_task_is_failed(queue):
    result = tasks.add.enqueue(1, 2)
    queue.cancel(int(result.id))

    result.refresh()
    assert result.status == TaskResultStatus.FAILED
    assert result.finished_at is not None


def test_with_keep_completed_zero_a_finished_result_is_gone(queue, settings):
    settings.JOBQUEUE = {**settings.JOBQUEUE, "KEEP_COMPLETED": 0}
    result = tasks.add.enqueue(1, 2)
    job = queue.pull(worker_id="w")
    queue.ack(job, worker_id="w", result=3)

    with pytest.raises(TaskResultDoesNotExist):
        result.refresh()


def test_max_attempts_per_task_through_the_backends_options(queue, settings):
    settings.TASKS = tasks_setting(
        OPTIONS={
            "MAX_ATTEMPTS": 4,
            "VISIBILITY_TIMEOUT": 90,
            "TASK_OPTIONS": {"tests.tasks_for_workers.add": {"max_attempts": 9}},
        }
    )

    added = Job.objects.get(pk=int(tasks.add.enqueue(1, 2).id))
    shouted = Job.objects.get(pk=int(tasks.shout.enqueue("x").id))

    assert (added.max_attempts, added.visibility_timeout) == (9, 90.0)
    assert (shouted.max_attempts, shouted.visibility_timeout) == (4, 90.0)


@pytest.mark.skipif(not tasks.TASK_OPTIONS_SUPPORTED, reason="@task options need Django 6.1 or the backport")
def test_max_attempts_per_task_through_task_options(queue, settings):
    settings.TASKS = tasks_setting(OPTIONS={"MAX_ATTEMPTS": 4})

    job = Job.objects.get(pk=int(tasks.twice_then_dead.enqueue("x").id))

    assert job.max_attempts == 2
    assert tasks.twice_then_dead.using(priority=3).max_attempts == 2


def test_jobs_of_the_job_decorator_are_not_tasks(queue, job_factory):
    job = job_factory("tests.noop")
    claimed = queue.pull(worker_id="w")

    assert (job.task_backend, claimed.worker_ids) == ("", [])
    assert claimed.started_at is not None and claimed.last_attempted_at == claimed.started_at


def test_system_checks_report_bad_options(db, settings):
    settings.TASKS = {
        "default": {
            "BACKEND": BACKEND,
            "OPTIONS": {
                "DATABASE": "nope",
                "MAX_ATTEMPTS": 0,
                "COLOUR": "red",
                "TASK_OPTIONS": {"app.tasks.f": {"visibility_timeout": -1, "retries": 3}},
            },
        }
    }

    # databases=[]: the checks of Django 5.2's run_checks(); Django 6 would also check the
    # models against every alias, which opens a connection to each (no database here).
    ids = sorted(
        message.id for message in run_checks(databases=[]) if message.id.startswith("django_jobqueue.E1")
    )

    assert ids == [
        "django_jobqueue.E102",
        "django_jobqueue.E104",
        "django_jobqueue.E104",
        "django_jobqueue.E105",
        "django_jobqueue.E105",
    ]


def test_a_task_outside_the_allowed_modules_is_refused_at_enqueue(queue, settings):
    settings.JOBQUEUE = {**settings.JOBQUEUE, "TASK_MODULES": []}

    with pytest.raises(InvalidTask, match="refused to import 'tests.tasks_for_workers' for task"):
        tasks.add.enqueue(1, 2)
    assert not Job.objects.exists()


def test_get_result_never_imports_a_module_outside_the_allowed_ones(queue, monkeypatch, tmp_path):
    canary = tmp_path / "canary"
    monkeypatch.setenv("JOBQUEUE_CANARY", str(canary))
    monkeypatch.delitem(sys.modules, "tests.canary_module", raising=False)
    row = QueueClient().push_task("default", "tests.canary_module.run", {"args": [], "kwargs": {}})

    with pytest.raises(TaskResultDoesNotExist, match="refused to import 'tests.canary_module'"):
        tasks.add.get_backend().get_result(str(row.pk))
    assert "tests.canary_module" not in sys.modules
    assert not canary.exists()


def test_a_visibility_timeout_below_the_floor_is_refused(queue, settings):
    settings.TASKS = tasks_setting(OPTIONS={"VISIBILITY_TIMEOUT": 0.05})

    with pytest.raises(InvalidTask, match="visibility_timeout must be at least 1 second, got 0.05"):
        tasks.add.enqueue(1, 2)
    assert not Job.objects.exists()
    assert "django_jobqueue.E105" in [message.id for message in run_checks(databases=[])]


def test_push_task_writes_the_job_the_backend_writes(queue):
    pushed = queue.push_task(
        "default", "tests.tasks_for_workers.shout", {"args": ["hi"], "kwargs": {}}, priority=7
    )

    assert (pushed.name, pushed.task_backend, pushed.priority) == (
        "tests.tasks_for_workers.shout",
        "default",
        7,
    )
    result = tasks.shout.get_backend().get_result(str(pushed.pk))
    assert (result.status, result.args, result.task.func) == (
        TaskResultStatus.READY,
        ["hi"],
        tasks.shout.func,
    )


@pytest.mark.parametrize("alias", ["", "x" * 101, None])
def test_push_task_refuses_a_bad_alias_and_writes_nothing(queue, alias):
    with pytest.raises(ValueError, match=r"task backend alias must be 1 to 100 characters, got "):
        queue.push_task(alias, "tests.tasks_for_workers.add", {"args": [1, 2], "kwargs": {}})
    assert not Job.objects.exists()
