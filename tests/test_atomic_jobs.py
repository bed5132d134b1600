"""``@job(atomic=True)``: the job's writes and its ack commit in one transaction, or neither does.

Run by an ``Executor`` in the test's own thread; what another connection sees
meanwhile is read from a thread of its own (Django gives each thread its own
connection).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from datetime import timedelta
from typing import Any

import pytest
from django.db import connections
from django.utils import timezone

from django_jobqueue import JobContext, QueueClient, job, registry
from django_jobqueue.models import DeadLetter, Job
from django_jobqueue.worker.run.executor import Executor
from django_jobqueue.worker.run.outcomes import Outcome

from . import atomic_jobs
from .atomic_jobs import PAUSES, effects


@pytest.fixture
def effects_table(queue: QueueClient) -> Iterator[None]:
    atomic_jobs.create_table()
    yield
    PAUSES.clear()
    atomic_jobs.drop_table()


def elsewhere(work: Callable[[], Any], timeout: float = 10.0) -> Any:
    """Run ``work`` on a connection of its own (a thread's), and return what it returned."""
    answer: list[Any] = []

    def run() -> None:
        try:
            answer.append(work())
        except BaseException as exc:  # noqa: B036 - handed to the test's thread
            answer.append(exc)
        finally:
            connections.close_all()

    thread = threading.Thread(target=run)
    thread.start()
    thread.join(timeout)
    assert not thread.is_alive(), "the other connection waited on the job's transaction"
    if isinstance(answer[0], BaseException):
        raise answer[0]
    return answer[0]


def run(
    queue: QueueClient, name: str, payload: dict[str, Any] | None = None, **options: Any
) -> tuple[Job, Outcome]:
    queue.push(name, payload or {}, **options)
    claimed = queue.pull(worker_id="w")
    assert claimed is not None
    return claimed, Executor(queue, "w").run(claimed)


def test_atomic_must_be_a_bool():
    with pytest.raises(TypeError, match="atomic must be True or False"):

        @job(name="tests.atomic_yes", atomic="yes")  # type: ignore[call-overload]
        def yes() -> None: ...

    assert registry.lookup("tests.atomic_yes") is None


def test_the_effects_and_the_ack_commit_together(queue, effects_table):
    seen: dict[str, Any] = {}

    def look(ctx: JobContext) -> None:
        # Inside the job's transaction: another connection sees neither its effect nor its ack.
        seen.update(
            elsewhere(lambda: {"effects": effects(), "status": Job.objects.get(pk=ctx.job.pk).status})
        )

    job_id = queue.push("atomic.credit", {"amount": 5}).pk
    PAUSES[job_id] = look
    claimed = queue.pull(worker_id="w")
    assert Executor(queue, "w").run(claimed) is Outcome.DONE
    assert seen == {"effects": {}, "status": "running"}
    row = Job.objects.get(pk=job_id)
    assert (row.status, row.result, row.attempts) == ("done", 5, 1)
    assert effects() == {job_id: 1}


def test_a_job_that_raises_is_rolled_back_then_retried(queue, effects_table):
    claimed, outcome = run(queue, "atomic.raises")
    assert outcome is Outcome.RETRY
    row = Job.objects.get(pk=claimed.pk)
    assert row.status == "ready" and "ValueError: the effect must not stay" in row.last_error
    assert effects() == {}
    # Its last attempt: rolled back too, then dead-lettered.
    # Due a second ago: SQLite's clock reads milliseconds, so a run_at of now, to the microsecond,
    # may still be ahead of it within the same millisecond.
    Job.objects.filter(pk=claimed.pk).update(run_at=timezone.now() - timedelta(seconds=1))
    again = queue.pull(worker_id="w")
    assert Executor(queue, "w").run(again) is Outcome.DEAD
    assert effects() == {}
    assert DeadLetter.objects.filter(job_id=claimed.pk).exists()


def test_fail_and_an_unstorable_result_roll_back_then_dead_letter(queue, effects_table):
    failed, outcome = run(queue, "atomic.fails")
    assert outcome is Outcome.DEAD
    unstorable, outcome = run(queue, "atomic.unstorable")
    assert outcome is Outcome.DEAD
    assert effects() == {}
    errors = dict(DeadLetter.objects.values_list("job_id", "error"))
    assert errors[failed.pk] == "Fail: no such account"
    assert "JobPayloadError" in errors[unstorable.pk]


def test_a_lost_claim_rolls_everything_back(queue, effects_table):
    queue.push("atomic.credit", {})
    stale = queue.pull(worker_id="w", visibility_timeout=1)
    assert stale is not None
    # The claim expires and another worker (the same id, even) claims the job again.
    Job.objects.filter(pk=stale.pk).update(locked_until=timezone.now() - timedelta(seconds=1))
    assert queue.tick_timeouts() == 1
    current = queue.pull(worker_id="w")
    assert current is not None and current.claim_token != stale.claim_token
    assert Executor(queue, "w").run(stale) is Outcome.LOST
    assert effects() == {}, "the stale run's effect was rolled back with its refused ack"
    assert Job.objects.get(pk=stale.pk).status == "running"
    assert Executor(queue, "w").run(current) is Outcome.DONE
    assert effects() == {stale.pk: 1}


def test_a_claim_lost_midway_rolls_back(queue, effects_table, row_locks_only):
    # PostgreSQL: the rescue and the new claim commit from another connection while the job runs.
    def rescue(ctx: JobContext) -> None:
        def steal() -> int | None:
            client = QueueClient()
            Job.objects.filter(pk=ctx.job.pk).update(locked_until=timezone.now() - timedelta(seconds=1))
            client.tick_timeouts()
            other = client.pull(worker_id="other")
            return None if other is None else other.pk

        assert elsewhere(steal) == ctx.job.pk

    job_id = queue.push("atomic.credit", {}).pk
    PAUSES[job_id] = rescue
    claimed = queue.pull(worker_id="w")
    assert Executor(queue, "w").run(claimed) is Outcome.LOST
    assert effects() == {}
    row = Job.objects.get(pk=job_id)
    assert (row.status, row.locked_by) == ("running", "other")


def test_the_heartbeat_and_a_cancel_do_not_wait_on_the_jobs_transaction(
    queue, effects_table, postgresql_only
):
    # The job's transaction holds no lock on its own row until its ack, its last statement.
    seen: dict[str, Any] = {}

    def beat_then_cancel(ctx: JobContext) -> None:
        seen["held"] = elsewhere(lambda: QueueClient().extend_claims([ctx.job], worker_id="w"))
        seen["cancelled"] = elsewhere(lambda: QueueClient().cancel(ctx.job.pk))

    job_id = queue.push("atomic.credit", {}).pk
    PAUSES[job_id] = beat_then_cancel
    claimed = queue.pull(worker_id="w")
    assert Executor(queue, "w").run(claimed) is Outcome.LOST  # no cancel watch here to say why
    assert seen == {"held": {job_id}, "cancelled": True}
    assert Job.objects.get(pk=job_id).status == "cancelled"
    assert effects() == {}, "the cancelled job's effect was rolled back"


def test_extend_visibility_inside_the_transaction_is_seen_at_once(queue, effects_table):
    seen: dict[str, Any] = {}

    def look(ctx: JobContext) -> None:
        seen["locked_until"] = elsewhere(lambda: Job.objects.get(pk=ctx.job.pk).locked_until)

    job_id = queue.push("atomic.extends", {}).pk
    PAUSES[job_id] = look
    claimed = queue.pull(worker_id="w", visibility_timeout=30)
    assert Executor(queue, "w").run(claimed) is Outcome.DONE
    assert Job.objects.get(pk=job_id).result is True
    # Within the job, the 600 s extension was committed already where others can write beside it.
    if connections["default"].vendor != "sqlite":
        assert seen["locked_until"] > timezone.now() + timedelta(seconds=300)
