"""Runs that can never succeed go to the dead letters at once; a job that ran is never run again."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from django_jobqueue import enqueue, registry
from django_jobqueue.models import DeadLetter, Job
from tests.jobs_for_workers import events, picky
from tests.worker_support import wait_until

FAST_BACKOFF = {"JOBQUEUE_BACKOFF_BASE": "0.05", "JOBQUEUE_BACKOFF_MAX": "0.2"}


def starts(path: str, job: Job) -> int:
    return sum(e["event"] == "start" and e["job"] == job.pk for e in events(path))


def test_a_result_that_cannot_be_stored_is_dead_lettered_after_one_run(queue, start_worker, events_path):
    job = queue.push("workers.returns_datetime", {"path": events_path})

    worker = start_worker("--burst")

    assert worker.wait() == 0, worker.log()
    dead = DeadLetter.objects.get(job_id=job.pk)
    assert (dead.attempts, dead.max_attempts) == (1, 5)
    assert dead.error.startswith("JobPayloadError: result is a datetime"), dead.error
    assert "it is not run again for its return value" in dead.error
    assert starts(events_path, job) == 1, "its effect happened once"
    assert f"id={job.pk} attempt=1/5 " in worker.log()
    assert "outcome=dead moved_to=dead_letters error='JobPayloadError: result is a datetime" in worker.log()


def test_fail_on_exceptions_go_to_the_dead_letters_at_once(queue, start_worker, events_path):
    # fail_on belongs to the function: it holds however the job was enqueued.
    by_name = enqueue("workers.picky", {"path": events_path, "error": "key"})
    bound = picky.using(queue="other", priority=5).enqueue(path=events_path, error="key")
    other_error = queue.push("workers.picky", {"path": events_path, "error": "value"}, max_attempts=2)

    worker = start_worker("--poll-interval", "0.05", env=FAST_BACKOFF)

    wait_until(lambda: DeadLetter.objects.count() == 3, 15, "three dead letters")
    for job in (by_name, bound):
        dead = DeadLetter.objects.get(job_id=job.pk)
        assert (dead.attempts, dead.error) == (1, "KeyError: 'picky about key'")
        assert "raise {" in dead.traceback
        assert starts(events_path, job) == 1
        worker.wait_for_log(rf"id={job.pk} attempt=1/5 .* outcome=dead moved_to=dead_letters error=.KeyError")
    assert DeadLetter.objects.get(job_id=other_error.pk).attempts == 2, "other exceptions are retried"
    assert starts(events_path, other_error) == 2


@pytest.fixture
def keyword_only_unknown_here() -> Iterator[None]:
    """Enqueue as a process would where ``workers.keyword_only`` is not registered (an older deploy)."""
    spec = registry.lookup("workers.keyword_only")
    assert spec is not None
    registry.unregister(spec.name)
    yield
    registry.register(spec)


def test_a_payload_that_does_not_fit_is_dead_lettered_without_retries(
    queue, start_worker, keyword_only_unknown_here
):
    job = enqueue("workers.keyword_only", {"unexpected": 1})

    worker = start_worker("--burst")

    assert worker.wait() == 0, worker.log()
    dead = DeadLetter.objects.get(job_id=job.pk)
    assert (dead.attempts, dead.max_attempts) == (1, 5)
    assert dead.error == (
        "JobPayloadError: payload does not fit keyword_only(expected): "
        "missing argument(s) 'expected'; unexpected argument(s) 'unexpected'"
    )
    assert f"id={job.pk} attempt=1/5 " in worker.log()
