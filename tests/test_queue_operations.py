"""The operator's statements: retry now, cancel, retry and delete dead letters in batches."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

from django_jobqueue import QueueClient
from django_jobqueue.models import DeadLetter, Job
from tests.faults.row_locks import race
from tests.test_queue_concurrency import run_threads

from .conftest import received


def fetch(job: Job) -> Job:
    return Job.objects.get(pk=job.pk)


def make_dead(client: QueueClient, /, name: str = "tests.noop", **options) -> DeadLetter:
    """A dead letter made the real way: a claimed job that failed for good."""
    payload = options.pop("payload", {"n": DeadLetter.objects.count()})
    job = client.push(name, payload, **options)
    Job.objects.filter(pk=job.pk).update(status="running", locked_by="w", attempts=1)
    assert client.fail(job.pk, worker_id="w", error=f"boom {job.pk}", traceback="Traceback ...")
    return DeadLetter.objects.get(job_id=job.pk)


# -- retry now -------------------------------------------------------------------


def test_retry_now_makes_a_scheduled_job_due_and_keeps_a_due_job_in_place(queue, job_factory):
    later = job_factory(delay=3600)
    due = job_factory(run_at=timezone.now() - timedelta(minutes=5))
    changed = queue.retry_jobs_now([later, due.pk])
    assert sorted(change.job_id for change in changed) == [later.pk, due.pk]
    assert fetch(later).run_at <= timezone.now()
    assert fetch(due).run_at == due.run_at, "an already-due job keeps its place in line"
    assert queue.pull(worker_id="w").pk == due.pk


def test_retry_now_puts_a_cancelled_job_back_with_attempts_reset(queue, job_factory):
    job = job_factory()
    claimed = queue.pull(worker_id="w")
    assert queue.cancel(job)
    row = fetch(job)
    assert (row.status, row.attempts) == ("cancelled", 1)
    assert [c.job_id for c in queue.retry_jobs_now([job])] == [job.pk]
    row = fetch(job)
    assert (row.status, row.attempts, row.locked_by, row.finished_at) == ("ready", 0, None, None)
    assert not queue.ack(claimed, worker_id="w"), "the old claim stays refused"
    again = queue.pull(worker_id="w2")
    assert again.pk == job.pk and again.attempts == 1


def test_retry_now_leaves_running_done_and_missing_jobs_alone(queue, job_factory):
    running, done = job_factory(), job_factory()
    claimed = queue.pull_many(worker_id="w", limit=2)
    assert queue.ack(next(j for j in claimed if j.pk == done.pk), worker_id="w")
    assert queue.retry_jobs_now([running, done, 10**12]) == []
    assert fetch(running).status == "running" and fetch(done).status == "done"


def test_retry_now_skips_a_cancelled_job_whose_unique_key_a_live_job_holds(queue, job_factory):
    old = job_factory(unique_key="otp:42")
    queue.cancel(old)
    holder = job_factory(unique_key="otp:42")
    assert holder.pk != old.pk
    assert queue.retry_jobs_now([old]) == []
    assert fetch(old).status == "cancelled"


def test_retry_now_of_two_cancelled_jobs_of_one_key_brings_back_one(queue, job_factory):
    first = job_factory(unique_key="k")
    queue.cancel(first)
    second = job_factory(unique_key="k")
    queue.cancel(second)
    other = job_factory(delay=60)
    changed = queue.retry_jobs_now([first, second, other])
    assert sorted(c.job_id for c in changed) == [first.pk, other.pk]
    assert fetch(second).status == "cancelled"
    assert Job.objects.filter(unique_key="k", status="ready").count() == 1


def test_retry_now_wakes_the_workers_of_the_queue(queue, job_factory, listener):
    job = job_factory(queue="emails", delay=3600)
    received(listener)
    queue.retry_jobs_now([job])
    assert received(listener) == ["emails"]


# -- cancel ----------------------------------------------------------------------


def test_cancel_jobs_cancels_ready_and_running_and_refuses_the_workers_ack(queue, job_factory):
    ready, running, done = job_factory(delay=60), job_factory(), job_factory()
    claimed = {j.pk: j for j in queue.pull_many(worker_id="w", limit=5)}
    assert queue.ack(claimed[done.pk], worker_id="w")
    changed = queue.cancel_jobs([ready, running.pk, done, 10**12])
    assert sorted(c.job_id for c in changed) == [ready.pk, running.pk]
    assert {j.status for j in Job.objects.filter(pk__in=[ready.pk, running.pk])} == {"cancelled"}
    assert fetch(done).status == "done"
    assert not queue.ack(claimed[running.pk], worker_id="w")
    assert queue.cancel_jobs([]) == []


def test_bulk_changes_validate_ids_before_any_sql(queue):
    with pytest.raises(ValueError):
        queue.cancel_jobs(["1"])
    with pytest.raises(ValueError):
        queue.retry_jobs_now([True])


# -- dead letters ----------------------------------------------------------------


def test_retry_dead_letters_in_batches_keeps_what_a_replay_needs(queue):
    letters = [make_dead(queue, queue="emails", priority=7, payload={"user": i}) for i in range(5)]
    other = make_dead(queue, queue="sms")
    batches = []
    retried = queue.retry_dead_letters(
        DeadLetter.objects.filter(queue="emails"), batch_size=2, on_batch=batches.append
    )
    assert retried == 5 and [len(b) for b in batches] == [2, 2, 1]
    assert list(DeadLetter.objects.values_list("pk", flat=True)) == [other.pk]
    for letter, entry in zip(letters, [e for b in batches for e in b], strict=True):
        assert (entry.dead_letter_id, entry.old_job_id, entry.queue) == (letter.pk, letter.job_id, "emails")
        job = Job.objects.get(pk=entry.job_id)
        assert job.payload == letter.payload, "each dead letter pairs with the job made from it"
        assert (job.status, job.attempts, job.max_attempts, job.priority) == ("ready", 0, 5, 7)
        assert job.last_error == letter.error and job.created_at == letter.enqueued_at
        assert job.unique_key is None


def test_a_dead_letter_retried_twice_makes_one_job(queue):
    letter = make_dead(queue)
    assert queue.retry_dead_letters([letter]) == 1
    assert queue.retry_dead_letters([letter.pk]) == 0
    with pytest.raises(DeadLetter.DoesNotExist):
        queue.retry_dead_letter(letter)
    assert Job.objects.count() == 1


def test_operators_retrying_the_same_dead_letters_at_once_make_one_job_each(queue):
    for i in range(60):
        make_dead(queue, payload={"i": i})
    counts = run_threads(
        4, lambda _: QueueClient().retry_dead_letters(DeadLetter.objects.all(), batch_size=7)
    )
    assert sum(counts) == 60
    assert Job.objects.count() == 60 and not DeadLetter.objects.exists()
    assert sorted(job.payload["i"] for job in Job.objects.all()) == list(range(60))


def test_delete_dead_letters_by_queryset_and_by_id(queue):
    keep = make_dead(queue, queue="keep")
    for _ in range(5):
        make_dead(queue, queue="drop")
    batches = []
    assert queue.delete_dead_letters(
        DeadLetter.objects.filter(queue="drop"), batch_size=2, on_batch=batches.append
    )
    assert [len(b) for b in batches] == [2, 2, 1]
    assert list(DeadLetter.objects.all()) == [keep]
    assert queue.delete_dead_letters([keep.pk, 10**12]) == 1
    assert queue.delete_dead_letters([keep]) == 0
    assert not Job.objects.exists(), "deleting dead letters makes no job"


def test_dead_letter_selections_that_match_nothing_or_are_wrong(queue):
    assert queue.retry_dead_letters([]) == 0
    assert queue.retry_dead_letters(DeadLetter.objects.none()) == 0
    assert queue.delete_dead_letters(DeadLetter.objects.filter(queue="nothing")) == 0
    with pytest.raises(TypeError):
        queue.retry_dead_letters(Job.objects.all())
    with pytest.raises(ValueError):
        queue.retry_dead_letters([1], batch_size=0)
    with pytest.raises(ValueError):
        queue.delete_dead_letters(["1"])


def test_retried_dead_letters_wake_the_workers_of_their_queues(queue, listener):
    make_dead(queue, queue="emails")
    make_dead(queue, queue="sms")
    received(listener)
    queue.retry_dead_letters(DeadLetter.objects.all())
    assert received(listener) == ["emails", "sms"]


# -- races: an operator's statement against a transition that holds the row --------
# ``race`` runs the operator's statement while the other transaction is
# uncommitted (PostgreSQL; SQLite serialises writers, so there it runs after).


def test_cancel_leaves_done_a_job_whose_ack_is_committing(queue, job_factory, row_locks):
    job_factory()
    claimed = queue.pull(worker_id="w")

    raced = race(lambda: queue.ack(claimed, worker_id="w"), lambda: QueueClient().cancel_jobs([claimed]))

    assert raced.result == []
    assert fetch(claimed).status == "done"
    assert raced.blocked == row_locks


def test_retry_now_leaves_running_a_job_whose_claim_is_committing(queue, job_factory, row_locks):
    job = job_factory()
    claimed: list[Job] = []

    raced = race(
        lambda: claimed.extend(queue.pull_many(worker_id="w", limit=1)),
        lambda: QueueClient().retry_jobs_now([job]),
    )

    assert raced.result == [] and [j.pk for j in claimed] == [job.pk]
    row = fetch(job)
    assert (row.status, row.locked_by, row.attempts) == ("running", "w", 1)
    assert raced.blocked == row_locks


def test_retry_now_of_a_key_another_retry_now_is_reviving_brings_back_one(queue, job_factory, row_locks):
    first = job_factory(unique_key="k")
    queue.cancel(first)
    second = job_factory(unique_key="k")
    queue.cancel(second)

    raced = race(lambda: queue.retry_jobs_now([first]), lambda: QueueClient().retry_jobs_now([second]))

    assert raced.result == []
    assert fetch(first).status == "ready" and fetch(second).status == "cancelled"
    assert raced.blocked == row_locks


def test_deleting_a_dead_letter_that_a_retry_is_committing_deletes_nothing(queue, row_locks):
    letter = make_dead(queue)

    raced = race(
        lambda: queue.retry_dead_letters([letter]), lambda: QueueClient().delete_dead_letters([letter])
    )

    assert raced.result == 0
    assert Job.objects.count() == 1 and not DeadLetter.objects.exists()
    assert raced.blocked == row_locks


def test_retrying_a_dead_letter_that_a_delete_is_committing_makes_no_job(queue, row_locks):
    letter = make_dead(queue)
    Job.objects.all().delete()

    raced = race(
        lambda: queue.delete_dead_letters([letter]), lambda: QueueClient().retry_dead_letters([letter])
    )

    assert raced.result == 0
    assert not Job.objects.exists() and not DeadLetter.objects.exists()
    assert raced.blocked == row_locks
