"""The statements a worker adds to the queue: heartbeat, worker rows and the enqueue notification."""

from __future__ import annotations

import threading
import time
from datetime import timedelta
from typing import Any

import pytest
from django.db import connection, connections, transaction
from django.utils import timezone

from django_jobqueue import QueueClient
from django_jobqueue.exceptions import WorkerIdInUse
from django_jobqueue.models import Job, Worker
from django_jobqueue.queue import engine_for

from .conftest import received


def test_extend_claims_beats_every_held_claim_in_one_call(queue, job_factory):
    for _ in range(3):
        job_factory(visibility_timeout=5)
    jobs = queue.pull_many(worker_id="w", limit=3)

    held = queue.extend_claims(jobs, worker_id="w", visibility_timeout=600)

    assert held == {job.pk for job in jobs}
    for job in Job.objects.all():
        assert 590 < (job.locked_until - timezone.now()).total_seconds() < 610


def test_extend_claims_uses_each_jobs_own_timeout_by_default(queue, job_factory):
    job_factory(visibility_timeout=100)
    job_factory(visibility_timeout=300)
    jobs = queue.pull_many(worker_id="w", limit=2, visibility_timeout=1)

    queue.extend_claims(jobs, worker_id="w")

    left = sorted((job.locked_until - timezone.now()).total_seconds() for job in Job.objects.all())
    assert 95 < left[0] < 105 and 295 < left[1] < 305


def test_extend_claims_never_shortens_a_longer_deadline(queue, job_factory):
    job_factory(visibility_timeout=5)
    job = queue.pull(worker_id="w")
    assert queue.extend_visibility(job, worker_id="w", extension=3600)

    assert queue.extend_claims([job], worker_id="w") == {job.pk}

    assert (Job.objects.get(pk=job.pk).locked_until - timezone.now()).total_seconds() > 3500


def test_extend_claims_skips_claims_no_longer_held(queue, job_factory):
    job_factory()
    job_factory()
    job_factory()
    mine, stolen, cancelled = queue.pull_many(worker_id="w", limit=3)
    Job.objects.filter(pk=stolen.pk).update(locked_until=timezone.now() - timedelta(seconds=1))
    assert queue.tick_timeouts() == 1
    assert queue.pull(worker_id="w").pk == stolen.pk  # same worker id, a newer claim token
    assert queue.cancel(cancelled)

    assert queue.extend_claims([mine, stolen, cancelled], worker_id="w") == {mine.pk}
    assert queue.extend_claims([mine], worker_id="other") == set()


def test_worker_rows_register_beat_prune_and_unregister(queue):
    queue.register_worker("w-1", hostname="host", pid=42, queues=["a", "b"], concurrency=3)
    with pytest.raises(WorkerIdInUse, match="'w-1' is held by a live worker .*pid 42"):
        queue.register_worker("w-1", hostname="host", pid=43, queues=[], concurrency=1)
    Worker.objects.update(last_heartbeat=timezone.now() - timedelta(minutes=10))
    queue.register_worker("w-1", hostname="host", pid=43, queues=[], concurrency=1)  # a restart
    row = Worker.objects.get()
    assert (row.worker_id, row.pid, row.queues, row.concurrency) == ("w-1", 43, [], 1)
    assert abs((row.last_heartbeat - timezone.now()).total_seconds()) < 5

    Worker.objects.update(last_heartbeat=timezone.now() - timedelta(minutes=10))
    assert queue.worker_heartbeat("w-1")
    assert queue.prune_workers(60) == 0
    Worker.objects.update(last_heartbeat=timezone.now() - timedelta(minutes=10))
    assert queue.prune_workers(60) == 1
    assert not queue.worker_heartbeat("w-1")
    assert not queue.unregister_worker("w-1")
    queue.register_worker("w-2", hostname="host", pid=1, queues=[], concurrency=1)
    assert queue.unregister_worker("w-2")
    with pytest.raises(ValueError):
        queue.register_worker("w-3", hostname="host", pid=1, queues=["no spaces"], concurrency=1)


def test_an_enqueue_notifies_each_queue_once_per_transaction_on_commit(queue, listener):
    with transaction.atomic():
        for _ in range(3):
            queue.push("tests.noop", {}, queue="emails")
        queue.push_many([("tests.noop", {}, {"queue": "emails"}), ("tests.noop", {}, {"queue": "sms"})])
        assert received(listener) == [], "nothing before the commit"
    assert received(listener) == ["emails", "sms"]


def test_a_rolled_back_enqueue_notifies_nobody(queue, listener):
    with pytest.raises(RuntimeError), transaction.atomic():
        queue.push("tests.noop", {}, queue="emails")
        raise RuntimeError("roll back")
    assert received(listener) == []


def test_an_enqueue_that_inserts_nothing_notifies_nobody(queue, listener):
    first = queue.push("tests.noop", {}, unique_key="k")
    assert received(listener) == ["default"]
    assert queue.push("tests.noop", {}, unique_key="k").pk == first.pk
    assert received(listener) == []


def test_a_claim_held_up_by_another_transaction_is_kept_not_handed_back(queue, job_factory, row_locks_only):
    """An operator's cancel holds a running job's row past its deadline, then rolls back.

    The worker's beats pass the row over and name it on the worker's row, so
    the tick leaves the expired claim to its living owner: after the rollback
    the next beat renews it, and the job was never handed out twice.
    """
    queue.register_worker("w", hostname="h", pid=1, queues=[], concurrency=1)
    job = job_factory(visibility_timeout=1)
    claimed = queue.pull(worker_id="w")
    assert claimed is not None and claimed.pk == job.pk
    beats: list[Any] = []

    def beat() -> None:
        try:
            beats.append(QueueClient().beat([claimed], worker_id="w"))
        finally:
            connections.close_all()

    with pytest.raises(RolledBack), transaction.atomic():
        assert QueueClient().cancel_jobs([job.pk])
        time.sleep(1.1)  # the claim's deadline passes while the cancel holds the row
        thread = threading.Thread(target=beat)
        thread.start()
        thread.join(10)
        assert not thread.is_alive(), "the beat waited on the cancel's row"
        raise RolledBack
    assert beats[0].renewed == set() and beats[0].held_up == {job.pk} and beats[0].registered
    assert Job.objects.get(pk=job.pk).locked_until < timezone.now(), "expired, and not renewed"
    assert queue.tick_timeouts() == 0, "the claim its owner keeps was not handed back"
    assert queue.beat([claimed], worker_id="w").renewed == {job.pk}
    assert queue.ack(claimed, worker_id="w")


class RolledBack(Exception):
    pass


def test_a_batch_of_acks_waits_on_a_held_row_briefly_then_passes_it_over(queue, job_factory, row_locks_only):
    """The round's fast path takes no lock of its own per ack: a held row costs it one brief wait.

    Then it writes the batch again passing over the held row, and so does
    every batch of that client for a while: no second wait. On MySQL each ack
    is a locking read that passes over held rows (``SKIP LOCKED``) before the
    change by id: no wait at all, where a bounded one would last a second.
    """
    held_job, free_one, free_two = (job_factory() for _ in range(3))
    claimed = {job.pk: job for job in queue.pull_many(worker_id="w", limit=3)}
    client = QueueClient()
    timings: list[float] = []
    results: list[Any] = []

    def ack(pks: list[int]) -> None:
        try:
            started = time.monotonic()
            results.append(client.ack_many([(claimed[pk], None) for pk in pks], worker_id="w"))
            timings.append(time.monotonic() - started)
        finally:
            connections.close_all()

    with transaction.atomic():
        assert QueueClient().cancel_jobs([held_job.pk])  # holds the row, uncommitted
        for pks in ([held_job.pk, free_one.pk], [held_job.pk, free_two.pk]):
            thread = threading.Thread(target=ack, args=(pks,))
            thread.start()
            thread.join(10)
            assert not thread.is_alive()
        transaction.set_rollback(True)
    assert results == [{(free_one.pk, claimed[free_one.pk].claim_token)}, {(free_two.pk, 1)}]
    if engine_for(connection).lock_timeout_sql is None:
        assert timings[0] < 0.15 and timings[1] < 0.15, timings
    else:
        assert 0.15 < timings[0] < 5 and timings[1] < 0.15, timings
