"""Acks in batches (``ack_many``, ``ack_and_claim``) and the array insert behind ``enqueue_many``.

A batched ack is fenced exactly as a single one: by the job's id, its claim
token and the worker id, each pair on its own.
"""

from __future__ import annotations

from datetime import timedelta

from django.test import override_settings
from django.utils import timezone

from django_jobqueue.models import Job


def test_ack_many_acks_every_current_claim_and_keeps_results(queue, job_factory):
    for _ in range(3):
        job_factory()
    first, second, third = queue.pull_many(worker_id="w", limit=3)

    acked = queue.ack_many([(first, {"n": 1}), (second, None), (third, [3])], worker_id="w")

    assert acked == {(job.pk, job.claim_token) for job in (first, second, third)}
    rows = {row.pk: row for row in Job.objects.all()}
    assert [(rows[j.pk].status, rows[j.pk].result) for j in (first, second, third)] == [
        ("done", {"n": 1}),
        ("done", None),
        ("done", [3]),
    ]
    assert all(row.finished_at is not None and row.locked_until is None for row in rows.values())


def test_ack_many_refuses_each_stale_claim_on_its_own(queue, job_factory):
    for _ in range(4):
        job_factory()
    mine, reclaimed, cancelled, others = queue.pull_many(worker_id="w", limit=4)
    Job.objects.filter(pk=reclaimed.pk).update(locked_until=timezone.now() - timedelta(seconds=1))
    assert queue.tick_timeouts() == 1
    newer = queue.pull(worker_id="w")  # the same worker id, a newer claim token
    assert newer is not None and newer.pk == reclaimed.pk
    assert queue.cancel(cancelled)
    Job.objects.filter(pk=others.pk).update(locked_by="someone-else")

    acked = queue.ack_many(
        [(mine, None), (reclaimed, None), (cancelled, None), (others, None)], worker_id="w"
    )

    assert acked == {(mine.pk, mine.claim_token)}
    statuses = dict(Job.objects.values_list("pk", "status"))
    assert statuses == {
        mine.pk: "done",
        reclaimed.pk: "running",
        cancelled.pk: "cancelled",
        others.pk: "running",
    }
    # The newer claim is still there to be acked.
    assert queue.ack_many([(newer, None)], worker_id="w") == {(newer.pk, newer.claim_token)}


@override_settings(JOBQUEUE={"KEEP_COMPLETED": 0})
def test_ack_many_deletes_when_nothing_is_kept(queue, job_factory):
    job_factory()
    job_factory()
    first, second = queue.pull_many(worker_id="w", limit=2)
    Job.objects.filter(pk=second.pk).update(claim_token=second.claim_token + 1)

    assert queue.ack_many([(first, {"ignored": True}), (second, None)], worker_id="w") == {
        (first.pk, first.claim_token)
    }
    assert list(Job.objects.values_list("pk", flat=True)) == [second.pk]


def test_ack_and_claim_acks_then_claims_in_one_call(queue, job_factory):
    for _ in range(3):
        job_factory()
    first = queue.pull(worker_id="w")
    assert first is not None

    acked, claimed = queue.ack_and_claim(
        [(first, "ok")], worker_id="w", queue_limits=None, limit=5, visibility_timeout=60
    )

    assert acked == {(first.pk, first.claim_token)}
    assert len(claimed) == 2 and first.pk not in {job.pk for job in claimed}
    assert Job.objects.get(pk=first.pk).status == "done"
    assert sorted(Job.objects.filter(status="running").values_list("pk", flat=True)) == sorted(
        job.pk for job in claimed
    )


def test_ack_and_claim_with_no_room_only_acks(queue, job_factory):
    job_factory()
    job_factory()
    first = queue.pull(worker_id="w")
    assert first is not None

    acked, claimed = queue.ack_and_claim([(first, None)], worker_id="w", queue_limits=None, limit=0)

    assert acked == {(first.pk, first.claim_token)} and claimed == []
    assert Job.objects.filter(status="ready").count() == 1


def test_enqueue_many_returns_each_job_as_stored_in_order(queue):
    run_at = timezone.now() + timedelta(hours=1)
    items = [
        ("tests.a", {"i": 0}, {}),
        ("tests.b", {"i": 1, "nested": {"x": [1, 2]}}, {"priority": 5, "queue": "other"}),
        ("tests.c", {}, {"run_at": run_at, "max_attempts": 2}),
        ("tests.d", {"s": "é"}, {"delay": 60, "unique_key": "k"}),
    ]

    jobs = queue.push_many(items)

    assert [job.name for job in jobs] == ["tests.a", "tests.b", "tests.c", "tests.d"]
    assert [job.pk for job in jobs] == sorted(job.pk for job in jobs)
    for job in jobs:
        row = Job.objects.get(pk=job.pk)
        for field in ("name", "queue", "payload", "priority", "status", "attempts", "max_attempts"):
            assert getattr(job, field) == getattr(row, field), field
        for field in ("visibility_timeout", "run_at", "created_at", "unique_key", "claim_token"):
            assert getattr(job, field) == getattr(row, field), field
    assert jobs[2].run_at == run_at
    assert 55 < (jobs[3].run_at - jobs[3].created_at).total_seconds() < 65


def test_enqueue_many_returns_the_live_job_for_a_taken_key(queue):
    holder = queue.push("tests.a", {"first": True}, unique_key="k")

    jobs = queue.push_many(
        [("tests.b", {"i": 1}, {}), ("tests.a", {"second": True}, {"unique_key": "k"}), ("tests.c", {}, {})]
    )

    assert jobs[1].pk == holder.pk and jobs[1].payload == {"first": True}
    assert [job.name for job in jobs] == ["tests.b", "tests.a", "tests.c"]
    assert Job.objects.count() == 3


def test_a_stale_ack_in_the_same_batch_lends_nothing_to_the_current_one(queue, job_factory):
    job_factory()
    old = queue.pull(worker_id="w")
    assert old is not None
    Job.objects.filter(pk=old.pk).update(locked_until=timezone.now() - timedelta(seconds=1))
    assert queue.tick_timeouts() == 1
    new = queue.pull(worker_id="w")
    assert new is not None and new.pk == old.pk

    acked = queue.ack_many([(old, "from the stale claim"), (new, "from the current claim")], worker_id="w")

    assert acked == {(new.pk, new.claim_token)}
    assert Job.objects.get(pk=new.pk).result == "from the current claim"


# -- the claiming loop's wait for the acks of running jobs ---------------------


def test_the_wait_for_acks_ends_with_the_last_one_it_waits_for():
    import threading
    import time

    from django_jobqueue.worker.completer import Completer

    completer = Completer(None, "w", lambda: None, lambda jobs: None)  # type: ignore[arg-type]
    completer.submit(Job(pk=1, claim_token=1), None, lambda outcome, error: None)
    arrived = threading.Timer(0.05, completer.submit, (Job(pk=2, claim_token=1), None, lambda o, e: None))
    arrived.start()

    started = time.monotonic()
    completer.wait_for(2, timeout=5.0)
    waited = time.monotonic() - started

    assert 0.04 < waited < 2.0  # ended by the second ack, not by the timeout
    assert [pending.job.pk for pending in completer.take()] == [1, 2]
    started = time.monotonic()
    completer.wait_for(1, timeout=0.05)  # nothing comes: the timeout ends it
    assert time.monotonic() - started >= 0.04


def test_the_reporter_holds_the_lines_of_a_round_until_the_loop_waits_on_the_database():
    from django_jobqueue.worker.completer import PendingAck, Reporter
    from django_jobqueue.worker.run.outcomes import Outcome

    told: list[tuple[int, Outcome]] = []
    reporter = Reporter()  # not started: it tells in the caller's thread

    def pending(job_id: int) -> PendingAck:
        job = Job(pk=job_id, claim_token=1)
        return PendingAck(job, None, lambda outcome, error: told.append((job.pk, outcome)))

    reporter.hold()
    reporter.report([pending(1), pending(2)], {(1, 1)}, None)
    assert told == []
    reporter.release()
    assert told == [(1, Outcome.DONE), (2, Outcome.LOST)]
    reporter.report([pending(3)], {(3, 1)}, None)
    assert told[2:] == []
    reporter.stop_holding()
    reporter.report([pending(4)], {(4, 1)}, None)
    assert told[2:] == [(3, Outcome.DONE), (4, Outcome.DONE)]
