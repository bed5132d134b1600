"""Where the workflow parts meet: batch jobs waiting on others, and cancels that cascade (both databases)."""

from __future__ import annotations

from django_jobqueue import QueueClient, batch
from django_jobqueue.models import Batch, DeadLetter, Job, JobStatus
from tests import jobs_for_workers  # noqa: F401 - registers workers.batch_part and workers.batch_done

PART, DONE = "workers.batch_part", "workers.batch_done"
WORKER = "w1"


def callbacks() -> list[Job]:
    return list(Job.objects.filter(name=DONE).order_by("id"))


def run_one(queue: QueueClient) -> Job:
    """Claim the one due job of "parts" and ack it."""
    [job] = queue.pull_many("parts", worker_id=WORKER, limit=10)
    assert queue.ack(job, worker_id=WORKER)
    return job


def test_a_batch_does_not_finish_while_one_of_its_jobs_waits_on_a_dependency(queue: QueueClient) -> None:
    with batch(on_finish=DONE, payload={"path": "-"}) as opened:
        first = queue.push(PART, {"path": "-", "n": 1}, queue="parts")
        second = queue.push(PART, {"path": "-", "n": 2}, queue="parts", depends_on=[first])
    assert opened.total == 2
    assert Job.objects.get(pk=second.pk).batch_id == opened.id

    assert run_one(queue).pk == first.pk
    # The first is done and counted; the second was waiting until that ack, and is ready now.
    assert callbacks() == []
    assert Job.objects.get(pk=second.pk).status == JobStatus.READY
    assert run_one(queue).pk == second.pk

    [callback] = callbacks()
    assert (callback.payload["done"], callback.payload["failed"], callback.payload["cancelled"]) == (2, 0, 0)


def test_a_cancel_that_cascades_counts_the_dependents_as_cancelled_in_their_batch(queue: QueueClient) -> None:
    upstream = queue.push(PART, {"path": "-", "n": 0}, queue="parts")
    with batch(on_finish=DONE, payload={"path": "-"}) as opened:
        middle = queue.push(PART, {"path": "-", "n": 1}, queue="parts", depends_on=[upstream])
        queue.push(PART, {"path": "-", "n": 2}, queue="parts", depends_on=[middle])
    assert callbacks() == []

    changes = queue.cancel_jobs([upstream])
    assert len(changes) == 3  # upstream, and the two of the batch by cascade
    [callback] = callbacks()
    assert (callback.payload["done"], callback.payload["failed"], callback.payload["cancelled"]) == (0, 0, 2)
    row = Batch.objects.get(pk=opened.id)
    assert (row.total, row.cancelled) == (2, 2) and row.callback_job_id == callback.pk


def test_deleting_a_dead_letter_counts_its_dependents_cancelled_in_their_batch(queue: QueueClient) -> None:
    upstream = queue.push(PART, {"path": "-", "n": 0}, queue="parts", max_attempts=1)
    with batch(on_finish=DONE, payload={"path": "-"}):
        queue.push(PART, {"path": "-", "n": 1}, queue="parts", depends_on=[upstream])
    [claimed] = queue.pull_many("parts", worker_id=WORKER, limit=10)
    assert queue.fail(claimed, worker_id=WORKER, error="no")
    assert callbacks() == []  # the dependent waits while its dependency is a dead letter

    assert queue.delete_dead_letters(DeadLetter.objects.filter(job_id=upstream.pk)) == 1
    [callback] = callbacks()
    assert callback.payload["cancelled"] == 1


def test_a_batch_job_that_others_wait_on_releases_them_when_acked(queue: QueueClient) -> None:
    with batch(on_finish=DONE, payload={"path": "-"}):
        first = queue.push(PART, {"path": "-", "n": 1}, queue="parts")
    after = queue.push(PART, {"path": "-", "n": 2}, queue="parts", depends_on=[first])
    [claimed] = queue.pull_many("parts", worker_id=WORKER, limit=10)
    # Acked by id alone: the counted path, which must release the dependent too.
    assert queue.ack(claimed.pk, worker_id=WORKER)
    assert Job.objects.get(pk=after.pk).status == JobStatus.READY
    assert len(callbacks()) == 1
