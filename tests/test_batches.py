"""``batch()``: its jobs counted as they finish, and exactly one callback once all have (both databases)."""

from __future__ import annotations

import threading
import time
from functools import partial
from typing import Any

import pytest
from django.db import transaction
from django.test import override_settings
from django.urls import reverse

from django_jobqueue import JobPayloadError, QueueClient, UnknownJobError, batch
from django_jobqueue.models import Batch, BatchCount, DeadLetter, Job
from django_jobqueue.queue import ops
from tests import jobs_for_workers  # noqa: F401 - registers workers.batch_part and workers.batch_done
from tests.conftest import count_jobs
from tests.faults.row_locks import race
from tests.racing import run_together

PART, DONE = "workers.batch_part", "workers.batch_done"
WORKER = "w1"


def callbacks() -> list[Job]:
    return list(Job.objects.filter(name=DONE).order_by("id"))


def parts(queue: QueueClient, count: int, payload: dict[str, Any] | None = None) -> tuple[Any, list[Job]]:
    """A batch of ``count`` parts, its callback's payload ``payload``; return it and its jobs."""
    with batch(on_finish=DONE, payload={"path": "-", **(payload or {})}) as opened:
        jobs = [queue.push(PART, {"path": "-", "n": n}, queue="parts") for n in range(count)]
    return opened, jobs


def claim_all(queue: QueueClient, worker: str = WORKER) -> list[Job]:
    return queue.pull_many("parts", worker_id=worker, limit=100)


# -- the block -------------------------------------------------------------------


def test_jobs_of_the_block_belong_to_the_batch_and_the_counts_reach_the_callback(queue):
    opened, jobs = parts(queue, 5, {"import": 9})
    assert opened.total == 5
    assert set(Job.objects.filter(batch_id=opened.id).values_list("id", flat=True)) == {j.pk for j in jobs}
    claimed = {job.pk: job for job in claim_all(queue)}
    assert all(job.batch_id == opened.id for job in claimed.values())
    first, second, third, fourth, fifth = (claimed[job.pk] for job in jobs)

    assert queue.ack(first, worker_id=WORKER)  # one ack alone
    assert queue.ack_many([(second, None)], worker_id=WORKER) == {(second.pk, second.claim_token)}
    acked, _ = queue.ack_and_claim([(third, 3)], worker_id=WORKER, queue_limits=None, limit=5)
    assert acked == {(third.pk, third.claim_token)}
    assert queue.fail(fourth, worker_id=WORKER, error="no")
    assert callbacks() == []
    assert queue.cancel(fifth)

    [callback] = callbacks()
    assert callback.payload == {
        "path": "-", "import": 9, "batch_id": opened.id, "done": 3, "failed": 1, "cancelled": 1
    }  # fmt: skip
    assert callback.batch_id is None and callback.status == "ready"
    row = Batch.objects.get(pk=opened.id)
    assert (row.total, row.done, row.failed, row.cancelled) == (5, 3, 1, 1)
    assert row.callback_job_id == callback.pk and row.finished_at is not None
    assert DeadLetter.objects.get(job_id=fourth.pk).batch_id == opened.id


def test_an_empty_batch_finishes_at_once(queue):
    with batch(on_finish=DONE, payload={"path": "-"}) as opened:
        pass
    [callback] = callbacks()
    assert callback.payload == {"path": "-", "batch_id": opened.id, "done": 0, "failed": 0, "cancelled": 0}


def test_no_job_of_the_batch_is_seen_before_the_block_ends(queue, other_connection):
    with batch(on_finish=DONE, payload={"path": "-"}):
        queue.push(PART, {"path": "-", "n": 1})
        assert count_jobs(other_connection) == 0
    assert count_jobs(other_connection) == 1


def test_a_block_that_raises_leaves_nothing(queue):
    with pytest.raises(ZeroDivisionError), batch(on_finish=DONE, payload={"path": "-"}):
        queue.push(PART, {"path": "-", "n": 1})
        raise ZeroDivisionError
    assert Job.objects.count() == 0 and Batch.objects.count() == 0


def test_a_batch_rolled_back_with_its_outer_transaction_leaves_nothing(queue):
    with pytest.raises(RuntimeError, match="outer"), transaction.atomic():
        with batch(on_finish=DONE, payload={"path": "-"}):
            queue.push(PART, {"path": "-", "n": 1})
        raise RuntimeError("outer")
    assert Job.objects.count() == 0 and Batch.objects.count() == 0


def test_batches_do_not_nest(queue):
    with batch(on_finish=DONE, payload={"path": "-"}) as outer:
        with pytest.raises(RuntimeError, match="do not nest"), batch(on_finish=DONE, payload={"path": "-"}):
            pass
        queue.push(PART, {"path": "-", "n": 1})
    assert outer.total == 1 and Batch.objects.count() == 1


@pytest.mark.parametrize(
    ("on_finish", "payload", "error", "match"),
    [
        ("nobody.registered", {"path": "-"}, UnknownJobError, "nobody.registered"),
        (DONE, {"path": "-", "done": 1}, JobPayloadError, "done"),
        (DONE, {"path": object()}, JobPayloadError, "JSON"),
        (DONE, {}, JobPayloadError, "path"),  # the callback's function needs it
        (DONE, ["path"], JobPayloadError, "mapping"),
        (42, {}, TypeError, "on_finish"),
    ],
)
def test_bad_input_is_refused_before_anything_is_written(queue, on_finish, payload, error, match):
    with pytest.raises(error, match=match), batch(on_finish=on_finish, payload=payload):
        pytest.fail("the block must not run")
    assert Job.objects.count() == 0 and Batch.objects.count() == 0


def test_a_job_function_names_its_callback(queue):
    with batch(on_finish=jobs_for_workers.batch_done, payload={"path": "-"}):
        pass
    assert len(callbacks()) == 1


def test_jobs_of_the_block_go_to_its_database(queue):
    with pytest.raises(ValueError, match="database"), batch(on_finish=DONE, payload={"path": "-"}):
        QueueClient("other").push(PART, {"path": "-", "n": 1})
    assert Job.objects.count() == 0


def test_enqueue_many_joins_and_a_unique_key_held_by_a_ready_job_joins_once(queue):
    held = queue.push(PART, {"path": "-", "n": 0}, unique_key="k")
    with batch(on_finish=DONE, payload={"path": "-"}) as opened:
        queue.push_many([(PART, {"path": "-", "n": n}, {}) for n in range(3)])
        assert queue.push(PART, {"path": "-", "n": 9}, unique_key="k").pk == held.pk
    assert opened.total == 4
    assert Job.objects.get(pk=held.pk).batch_id == opened.id


# -- outcomes ------------------------------------------------------------------------


@override_settings(JOBQUEUE={"KEEP_COMPLETED": 0})
def test_done_jobs_deleted_at_their_ack_are_still_counted(queue):
    opened, _ = parts(queue, 3)
    claimed = claim_all(queue)
    queue.ack_and_claim([(job, None) for job in claimed], worker_id=WORKER, queue_limits=None, limit=5)
    assert not Job.objects.filter(batch_id=opened.id).exists()
    [callback] = callbacks()
    assert (callback.payload["done"], callback.payload["failed"]) == (3, 0)


def test_a_retried_job_is_not_finished_and_an_ack_by_id_is_counted(queue):
    opened, [job] = parts(queue, 1)
    claimed = claim_all(queue)[0]
    assert queue.nack(claimed, worker_id=WORKER, error="again", delay=0)
    assert callbacks() == []
    again = claim_all(queue)[0]
    assert queue.ack(again.pk, worker_id=WORKER)  # by id: the batch is read from the row
    assert callbacks()[0].payload["done"] == 1


def test_a_dead_letter_retried_before_the_batch_finishes_is_outstanding_again(queue):
    opened, _ = parts(queue, 2)
    first, second = claim_all(queue)
    queue.fail(first, worker_id=WORKER, error="no")
    assert Batch.objects.get(pk=opened.id).failed == 1
    revived = queue.retry_dead_letter(DeadLetter.objects.get())
    assert revived.batch_id == opened.id
    assert Batch.objects.get(pk=opened.id).failed == 0
    queue.ack(second, worker_id=WORKER)
    assert callbacks() == []
    queue.ack(claim_all(queue)[0], worker_id=WORKER)
    [callback] = callbacks()
    assert (callback.payload["done"], callback.payload["failed"]) == (2, 0)


def test_after_the_batch_finished_a_retry_runs_on_its_own(queue):
    opened, _ = parts(queue, 2)
    first, second = claim_all(queue)
    queue.fail(first, worker_id=WORKER, error="no")
    queue.cancel(second)
    assert len(callbacks()) == 1
    assert queue.retry_dead_letters(DeadLetter.objects.all()) == 1
    assert [change.job_id for change in queue.retry_jobs_now([second])] == [second.pk]
    for job in claim_all(queue):
        if job.name == PART:
            queue.ack(job, worker_id=WORKER)
    row = Batch.objects.get(pk=opened.id)
    assert (row.done, row.failed, row.cancelled) == (0, 1, 1)  # as its callback saw them
    assert len(callbacks()) == 1


def test_a_cancelled_job_run_again_before_the_batch_finishes_is_outstanding_again(queue):
    opened, [first, second] = parts(queue, 2)
    queue.cancel(first)
    assert Batch.objects.get(pk=opened.id).cancelled == 1
    queue.retry_jobs_now([first])
    assert Batch.objects.get(pk=opened.id).cancelled == 0
    queue.cancel_jobs([first, second])
    [callback] = callbacks()
    assert callback.payload["cancelled"] == 2


def test_an_expired_claim_with_its_attempts_spent_counts_as_failed(queue):
    opened, [job] = parts(queue, 1)
    Job.objects.filter(pk=job.pk).update(max_attempts=1)
    queue.pull("parts", worker_id=WORKER, visibility_timeout=0.001)
    time.sleep(0.05)  # past the claim's deadline, on the database's clock
    assert queue.tick_timeouts() == 1
    [callback] = callbacks()
    assert callback.payload["failed"] == 1


def test_the_repair_pass_finishes_a_batch_whose_job_left_uncounted(queue):
    opened, [job] = parts(queue, 1)
    Job.objects.filter(pk=job.pk).delete()  # not a way the queue ends a job: nothing counts it
    assert callbacks() == []
    assert queue.finish_batches() == [opened.id]
    assert queue.finish_batches() == []
    [callback] = callbacks()
    assert callback.payload["done"] == 0


# -- races ---------------------------------------------------------------------------


def ack(job: Job) -> None:
    QueueClient().ack_many([(job, None)], worker_id=WORKER)


def test_two_last_acks_at_the_same_instant_enqueue_one_callback(queue, row_locks_only, monkeypatch):
    """Both acks' job rows written, neither committed, when both ask for the batch row."""
    real = ops.record_outcomes
    both_acked = threading.Barrier(2)

    def after_both_acks(using: str, outcomes: Any) -> list[int]:
        both_acked.wait(10)  # each transaction holds its ack, uncommitted, here
        return real(using, outcomes)

    monkeypatch.setattr(ops, "record_outcomes", after_both_acks)
    for _round in range(5):
        both_acked.reset()
        opened, _ = parts(queue, 2)
        first, second = claim_all(queue)
        run_together([partial(ack, first), partial(ack, second)], timeout=20)
        row = Batch.objects.get(pk=opened.id)
        assert row.done == 2 and row.callback_job_id is not None
        assert Job.objects.filter(name=DONE, payload__batch_id=opened.id).count() == 1


def test_last_acks_racing_freely_enqueue_one_callback(queue):
    """Many threads with their own connections ack the jobs of one batch at once (both databases)."""
    opened, _ = parts(queue, 8)
    claimed = claim_all(queue)
    run_together([partial(ack, job) for job in claimed], timeout=30)
    [callback] = callbacks()
    assert callback.payload["done"] == 8


def test_a_dead_letter_retried_while_the_last_job_is_acked_is_counted_once(queue, row_locks_only):
    """The retry and the last ack serialise on the batch row: either the callback counts the dead
    letter as failed and the retry runs on its own, or it waits for the retried job."""
    opened, _ = parts(queue, 2)
    first, second = claim_all(queue)
    queue.fail(first, worker_id=WORKER, error="no")
    dead = DeadLetter.objects.get()
    run_together([partial(ack, second), lambda: QueueClient().retry_dead_letter(dead)], timeout=20)
    row = Batch.objects.get(pk=opened.id)
    if row.callback_job_id is None:  # the retry came first: the batch waits for the revived job
        assert row.failed == 0
        queue.ack(claim_all(queue)[0], worker_id=WORKER)
        row.refresh_from_db()
        assert (row.done, row.failed) == (2, 0)
    else:
        assert (row.done, row.failed) == (1, 1)
    assert len(callbacks()) == 1


def test_an_operators_open_cancel_holds_up_no_ack_of_the_batch(queue):
    """A cancel of one job of a batch, its transaction left open, beside acks of the batch's others.

    The acks commit at once (the cancel counts in ``BatchCount``, not on the
    batch's row); once the cancel commits, the batch takes its count and
    finishes: one callback, with every count.
    """
    opened, jobs = parts(queue, 3)
    claimed = {job.pk: job for job in queue.pull_many("parts", worker_id=WORKER, limit=2)}
    [left] = [job for job in jobs if job.pk not in claimed]
    raced = race(
        lambda: queue.cancel(left),
        lambda: QueueClient().ack_many([(job, None) for job in claimed.values()], worker_id=WORKER),
    )
    assert not raced.blocked, "the acks waited on the cancel's transaction"
    assert raced.result == {(job.pk, job.claim_token) for job in claimed.values()}
    [callback] = callbacks()
    assert callback.payload == {"path": "-", "batch_id": opened.id, "done": 2, "failed": 0, "cancelled": 1}
    row = Batch.objects.get(pk=opened.id)
    assert (row.done, row.cancelled, row.callback_job_id) == (2, 1, callback.pk)
    assert not BatchCount.objects.exists()


def test_counts_an_operator_left_pending_are_taken_by_the_tick(queue):
    """The operator's process stopped between its commit and adding its counts: the tick adds them."""
    opened, jobs = parts(queue, 2)
    with transaction.atomic():
        Job.objects.filter(pk=jobs[0].pk).update(status="cancelled")
        BatchCount.objects.create(batch_id=opened.id, cancelled=1)
    assert queue.finish_batches() == []
    row = Batch.objects.get(pk=opened.id)
    assert (row.cancelled, row.finished_at) == (1, None) and not BatchCount.objects.exists()
    assert queue.ack(claim_all(queue)[0], worker_id=WORKER)
    [callback] = callbacks()
    assert (callback.payload["done"], callback.payload["cancelled"]) == (1, 1)


# -- admin ---------------------------------------------------------------------------


def test_the_batch_pages_show_progress_counts_and_the_callback(queue, login):
    client = login("viewer", "view_batch", "view_job")
    opened, _ = parts(queue, 4)
    first, second, *rest = claim_all(queue)
    queue.ack(first, worker_id=WORKER)
    queue.fail(second, worker_id=WORKER, error="no")
    listing = client.get(reverse("admin:django_jobqueue_batch_changelist"))
    assert listing.status_code == 200
    assert "2 of 4 finished (50%), running" in listing.content.decode()
    page = client.get(reverse("admin:django_jobqueue_batch_change", args=[opened.id])).content.decode()
    assert "2 of 4 finished (50%), running" in page and "not yet" in page
    queue.cancel_jobs(rest)
    callback = Batch.objects.get(pk=opened.id).callback_job_id
    page = client.get(reverse("admin:django_jobqueue_batch_change", args=[opened.id])).content.decode()
    assert "4 of 4 finished (100%), finished" in page
    assert reverse("admin:django_jobqueue_job_change", args=[callback]) in page
    assert f"{DONE} job #{callback}" in page
