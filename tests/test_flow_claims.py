"""The limited claim: concurrency keys, queue caps, rate limits and pauses, claim by claim.

Keyed jobs are made here by setting the two columns on enqueued jobs, so that
these tests speak only of the claim (the enqueue options have tests of their
own). Every test runs on SQLite and on PostgreSQL.
"""

from __future__ import annotations

import time
from collections import Counter
from datetime import timedelta
from typing import Any

import pytest
from django.test.utils import override_settings
from django.utils import timezone

from django_jobqueue import QueueClient, enqueue_many
from django_jobqueue.models import Job, QueueStart, QueueState
from django_jobqueue.queue.ops.limited import window_size


def keyed(key: str | None, count: int, limit: int | None = 1, **options: Any) -> list[int]:
    """``count`` ready jobs with concurrency key ``key`` (and ``limit``); return their ids."""
    jobs = enqueue_many([("tests.noop", {"i": i}, dict(options)) for i in range(count)])
    ids = [job.pk for job in jobs]
    if key is not None:
        Job.objects.filter(pk__in=ids).update(concurrency_key=key, concurrency_limit=limit)
    return ids


def keys_of(jobs: list[Job]) -> Counter[str | None]:
    return Counter(job.concurrency_key for job in jobs)


def running(key: str) -> int:
    return Job.objects.filter(status="running", concurrency_key=key).count()


def test_a_key_runs_at_most_its_limit(queue):
    keyed("tenant:1", 5, limit=2)
    first = queue.pull_many(worker_id="w", limit=10)
    assert keys_of(first) == {"tenant:1": 2}
    assert queue.pull_many(worker_id="w", limit=10) == []
    assert queue.ack(first[0], worker_id="w")
    again = queue.pull_many(worker_id="w", limit=10)
    assert len(again) == 1 and running("tenant:1") == 2


def test_the_key_limit_holds_in_claim_order(queue):
    ids = keyed("tenant:1", 3, limit=1)
    Job.objects.filter(pk=ids[2]).update(priority=50)
    assert [job.pk for job in queue.pull_many(worker_id="w", limit=10)] == [ids[2]]


def test_jobs_without_a_key_are_not_held_by_keys(queue):
    keyed("tenant:1", 3, limit=1)
    plain = keyed(None, 3)
    claimed = queue.pull_many(worker_id="w", limit=10)
    assert keys_of(claimed) == {"tenant:1": 1, None: 3}
    assert {job.pk for job in claimed} >= set(plain)


def test_a_backlog_of_one_key_does_not_hold_another_keys_job(queue):
    keyed("tenant:big", 200, limit=1)
    [small] = keyed("tenant:small", 1, limit=1)
    seen: list[Job] = []
    # The first round's window is full of the big tenant's jobs; the next walks the keys.
    for _round in range(2):
        seen += queue.pull_many(worker_id="w", limit=4)
    assert small in {job.pk for job in seen}
    assert running("tenant:big") == 1


def test_the_walk_visits_every_key_and_starts_again(queue):
    # More held keys than one walk visits: each key's first job is still reached.
    size = window_size(1)
    for n in range(size + 5):
        keyed(f"k{n:03}", 3, limit=1)
    claimed: set[str] = set()
    for _round in range(12):
        claimed |= {job.concurrency_key for job in queue.pull_many(worker_id="w", limit=1)}
    assert len(claimed) >= 6
    assert all(running(key) <= 1 for key in claimed)


def test_an_expired_claim_frees_its_keys_slot(queue):
    keyed("tenant:1", 2, limit=1)
    [first] = queue.pull_many(worker_id="w", limit=5)
    assert queue.pull_many(worker_id="w", limit=5) == []
    Job.objects.filter(pk=first.pk).update(locked_until=timezone.now() - timedelta(seconds=1))
    [second] = queue.pull_many(worker_id="w2", limit=5)
    assert second.pk != first.pk


def test_each_job_has_its_own_limit(queue):
    keyed("tenant:1", 1, limit=1)
    keyed("tenant:1", 2, limit=3, priority=-1)
    # The first (limit 1) runs; the others allow three with the key, so both start too.
    assert len(queue.pull_many(worker_id="w", limit=10)) == 3
    keyed("tenant:2", 1, limit=3, priority=5)
    keyed("tenant:2", 2, limit=1)
    # The first (limit 3) runs; the others allow only one with the key, and one runs.
    assert keys_of(queue.pull_many(worker_id="w", limit=10)) == {"tenant:2": 1}


def test_a_scheduled_keyed_job_waits_for_its_time(queue):
    keyed("tenant:1", 1, limit=1, delay=3600)
    assert queue.pull_many(worker_id="w", limit=5) == []


def test_acks_of_the_same_round_free_their_keys_slots(queue):
    keyed("tenant:1", 3, limit=1)
    [first] = queue.pull_many(worker_id="w", limit=5)
    acked, claimed = queue.ack_and_claim([(first, None)], worker_id="w", queue_limits=None, limit=5)
    assert acked == {(first.pk, first.claim_token)}
    assert len(claimed) == 1 and running("tenant:1") == 1


def test_a_cancelled_keyed_job_is_never_claimed(queue):
    ids = keyed("tenant:1", 2, limit=2)
    queue.cancel(ids[0])
    assert [job.pk for job in queue.pull_many(worker_id="w", limit=5)] == [ids[1]]


def test_queues_are_claimed_from_as_named(queue):
    keyed("tenant:1", 2, limit=5, queue="a")
    keyed("tenant:1", 2, limit=5, queue="b")
    assert {job.queue for job in queue.pull_many("a", worker_id="w", limit=5)} == {"a"}


@override_settings(JOBQUEUE={"QUEUES": {"capped": {"concurrency": 2}}})
def test_a_queue_cap_holds_with_and_without_keys(queue):
    keyed(None, 3, queue="capped")
    keyed("tenant:1", 3, limit=5, queue="capped")
    keyed(None, 2, queue="free")
    first = queue.pull_many(worker_id="w", limit=10)
    assert Counter(job.queue for job in first) == {"capped": 2, "free": 2}
    assert queue.pull_many("capped", worker_id="w", limit=10) == []
    queue.ack([job for job in first if job.queue == "capped"][0], worker_id="w")
    assert len(queue.pull_many("capped", worker_id="w", limit=10)) == 1


@override_settings(JOBQUEUE={"QUEUES": {"capped": {"concurrency": 1}}})
def test_a_queue_cap_counts_only_unexpired_claims(queue):
    keyed(None, 2, queue="capped")
    [first] = queue.pull_many(worker_id="w", limit=10)
    Job.objects.filter(pk=first.pk).update(locked_until=timezone.now() - timedelta(seconds=1))
    assert len(queue.pull_many(worker_id="w", limit=10)) == 1


@override_settings(JOBQUEUE={"QUEUES": {"rated": {"rate_limit": "3/s"}}})
def test_a_rate_limit_is_a_sliding_window(queue):
    keyed(None, 8, queue="rated")
    assert len(queue.pull_many(worker_id="w", limit=10)) == 3
    assert queue.pull_many(worker_id="w", limit=10) == []
    assert QueueStart.objects.filter(queue="rated").count() == 3
    time.sleep(1.1)
    assert len(queue.pull_many(worker_id="w", limit=10)) == 3
    # Starts older than the window are pruned by the claims that write new ones.
    assert QueueStart.objects.filter(queue="rated").count() <= 6


@override_settings(JOBQUEUE={"QUEUES": {"rated": {"rate_limit": "2/m"}}})
def test_a_rate_limit_counts_the_starts_of_every_claimer(queue):
    keyed(None, 5, queue="rated")
    assert len(QueueClient().pull_many(worker_id="a", limit=1)) == 1
    assert len(QueueClient().pull_many(worker_id="b", limit=5)) == 1
    assert QueueClient().pull_many(worker_id="c", limit=5) == []


@override_settings(JOBQUEUE={"QUEUES": {"both": {"concurrency": 5, "rate_limit": "2/h"}}})
def test_cap_and_rate_together_take_the_smaller_room(queue):
    keyed("tenant:1", 5, limit=5, queue="both")
    assert len(queue.pull_many(worker_id="w", limit=10)) == 2


def test_a_paused_queue_is_passed_over_and_resumed(queue):
    keyed(None, 2, queue="held")
    keyed("tenant:1", 2, limit=2, queue="held")
    keyed(None, 1, queue="other")
    QueueState.objects.create(queue="held", paused=True, updated_at=timezone.now())
    assert {job.queue for job in queue.pull_many(worker_id="w", limit=10)} == {"other"}
    assert queue.pull_many("held", worker_id="w", limit=10) == []
    QueueState.objects.filter(queue="held").update(paused=False)
    assert len(queue.pull_many(worker_id="w", limit=10)) == 4


def test_a_claimer_learns_that_keyed_jobs_wait(queue):
    keyed(None, 1)
    assert len(queue.pull_many(worker_id="w", limit=5)) == 1
    assert not queue.flow.keyed_waiting
    keyed("tenant:1", 2, limit=1)
    # A plain round sees them waiting; the next one claims them.
    queue.pull_many(worker_id="w", limit=5)
    assert queue.flow.keyed_waiting
    claimed = queue.pull_many(worker_id="w", limit=5) + queue.pull_many(worker_id="w", limit=5)
    assert running("tenant:1") == 1 and len(claimed) <= 1
    assert queue.flow.held == 1


@pytest.mark.parametrize("inside_atomic", [False, True])
def test_a_limited_round_inside_a_transaction_is_the_callers(queue, inside_atomic):
    from django.db import transaction

    keyed("tenant:1", 2, limit=1)
    queue.flow.keyed_waiting = True
    if inside_atomic:
        with transaction.atomic():
            assert len(queue.pull_many(worker_id="w", limit=5)) == 1
            transaction.set_rollback(True)
        assert running("tenant:1") == 0
    else:
        assert len(queue.pull_many(worker_id="w", limit=5)) == 1
        assert running("tenant:1") == 1


def test_an_expired_claim_of_a_keyed_job_is_not_renewed(queue):
    keyed("tenant:1", 2, limit=1)
    [first] = queue.pull_many(worker_id="w", limit=5)
    Job.objects.filter(pk=first.pk).update(locked_until=timezone.now() - timedelta(seconds=1))
    [second] = queue.pull_many(worker_id="w2", limit=5)
    # The first worker's heartbeat comes too late: its slot went to the second job.
    assert queue.extend_claims([first], worker_id="w") == set()
    assert not queue.extend_visibility(first, worker_id="w", extension=60)
    assert queue.extend_visibility(second, worker_id="w2", extension=60)


def test_prune_deletes_starts_older_than_every_window(queue):
    from django_jobqueue.queue import ops

    old = timezone.now() - timedelta(hours=2)
    QueueStart.objects.create(queue="gone", started_at=old)
    QueueStart.objects.create(queue="gone", started_at=timezone.now())
    ops.prune("default", 86400)
    assert list(QueueStart.objects.values_list("started_at", flat=True)) != [old]
    assert QueueStart.objects.count() == 1
