"""Every transition of QueueClient, including each way a stale worker is refused."""

from __future__ import annotations

import time
from datetime import timedelta

import pytest
from django.test.utils import override_settings
from django.utils import timezone

from django_jobqueue import QueueClient
from django_jobqueue.models import DeadLetter, Job, Worker
from tests.faults.row_locks import race


def fetch(job: Job) -> Job:
    return Job.objects.get(pk=job.pk)


def expire_claims() -> None:
    """Move every running claim's deadline into the past, as if its worker had stopped."""
    Job.objects.filter(status="running").update(locked_until=timezone.now() - timedelta(seconds=5))


# -- claim ---------------------------------------------------------------------


def test_pull_claims_with_owner_token_deadline_and_attempt(queue, job_factory):
    job_factory(visibility_timeout=40)
    claimed = queue.pull(worker_id="server-c")
    row = fetch(claimed)
    assert (row.status, row.locked_by, row.attempts, row.claim_token) == ("running", "server-c", 1, 1)
    assert claimed.claim_token == row.claim_token and claimed.locked_until == row.locked_until
    assert 35 < (row.locked_until - timezone.now()).total_seconds() < 45


def fields(job: Job) -> dict[str, object]:
    return {field.attname: getattr(job, field.attname) for field in Job._meta.concrete_fields}


@pytest.mark.parametrize("queues", [(), ("one", "two")], ids=["any queue", "named queues"])
def test_the_jobs_a_claim_returns_are_the_rows_it_wrote(queue, job_factory, queues):
    # Where the claim cannot return its rows (MySQL), the jobs are the picked rows as the claim
    # changes them, not read again: every field must still be what the database holds.
    plain = job_factory(queue="one", visibility_timeout=40)
    task = job_factory(queue="two", priority=5)
    Job.objects.filter(pk=task.pk).update(task_backend="default", worker_ids=["earlier"])
    again = job_factory(queue="one")
    first = queue.pull("one", worker_id="before")
    assert first is not None and first.pk == plain.pk
    assert queue.release(first, worker_id="before")
    claimed = queue.pull_many(*queues, worker_id="server-c", limit=5)
    assert sorted(job.pk for job in claimed) == sorted([plain.pk, task.pk, again.pk])
    for job in claimed:
        assert fields(job) == fields(fetch(job)), job.pk
    by_id = {job.pk: job for job in claimed}
    assert by_id[task.pk].worker_ids == ["earlier", "server-c"]
    assert by_id[first.pk].started_at == first.started_at  # its first claim's, kept


def test_pull_visibility_timeout_overrides_the_jobs_own(queue, job_factory):
    job_factory(visibility_timeout=40)
    claimed = queue.pull(worker_id="w", visibility_timeout=timedelta(minutes=10))
    assert 590 < (claimed.locked_until - timezone.now()).total_seconds() < 610


@pytest.mark.parametrize("priorities", [1, 2, 5], ids=lambda n: f"{n} priorities")
@pytest.mark.parametrize("queues", [(), ("one", "two")], ids=["any queue", "named queues"])
def test_a_claim_takes_the_highest_priorities_of_many(queue, job_factory, priorities, queues):
    # MySQL reads the ranks in use first: two at once, all of them where there are two.
    expected = []
    for priority in range(priorities):
        for queue_name in ("one", "two"):
            expected.append(job_factory(queue=queue_name, priority=priority * 10).pk)
    job_factory(queue="one", priority=priorities * 10, delay=60)  # not due: passed over
    limit = priorities + 1
    first = queue.pull_many(*queues, worker_id="w", limit=limit)
    by_priority = sorted(expected, key=lambda pk: -fetch_priority(pk))
    assert sorted(job.pk for job in first) == sorted(by_priority[:limit])
    assert [job.priority for job in first] == sorted((job.priority for job in first), reverse=True)
    rest = queue.pull_many(*queues, worker_id="w", limit=100)
    assert sorted(job.pk for job in [*first, *rest]) == sorted(expected)


def fetch_priority(pk: int) -> int:
    return Job.objects.values_list("priority", flat=True).get(pk=pk)


def test_pull_returns_none_when_nothing_is_due(queue, job_factory):
    job_factory(delay=60)
    assert queue.pull(worker_id="w") is None
    assert queue.pull_many(worker_id="w") == []


def test_order_is_priority_then_oldest_run_at_then_id(queue, job_factory):
    now = timezone.now()
    low_old = job_factory(priority=-5, run_at=now - timedelta(hours=1))
    high_new = job_factory(priority=50, run_at=now - timedelta(seconds=1))
    mid_b = job_factory(run_at=now - timedelta(minutes=1))
    mid_a = job_factory(run_at=now - timedelta(minutes=2))
    mid_tie_1 = job_factory(run_at=now - timedelta(seconds=30))
    mid_tie_2 = job_factory(run_at=mid_tie_1.run_at)
    order = [j.pk for j in queue.pull_many(worker_id="w", limit=10)]
    assert order == [high_new.pk, mid_a.pk, mid_b.pk, mid_tie_1.pk, mid_tie_2.pk, low_old.pk]
    # One at a time gives the same order.
    Job.objects.update(status="ready", locked_by=None, locked_until=None)
    singles = [queue.pull(worker_id="w").pk for _ in range(6)]
    assert singles == order


def test_queues_partition_the_work(queue, job_factory):
    emails = job_factory(queue="emails")
    reports = job_factory(queue="reports", priority=100)
    other = job_factory(queue="other")
    assert queue.pull("emails", worker_id="w").pk == emails.pk
    assert queue.pull("emails", worker_id="w") is None
    assert [j.pk for j in queue.pull_many("other", "reports", worker_id="w")] == [reports.pk, other.pk]


def test_pull_without_queue_names_takes_from_every_queue(queue, job_factory):
    made = [job_factory(queue=f"q{i}") for i in range(4)]
    assert sorted(j.pk for j in queue.pull_many(worker_id="w", limit=10)) == [m.pk for m in made]


def test_pull_many_respects_the_limit_across_queues(queue, job_factory):
    for i in range(5):
        job_factory(queue="a", priority=i)
        job_factory(queue="b", priority=10 + i)
    got = queue.pull_many("a", "b", worker_id="w", limit=3)
    assert [j.priority for j in got] == [14, 13, 12]
    assert Job.objects.filter(status="running").count() == 3


def test_claim_with_per_queue_limits_takes_at_most_each_limit(queue, job_factory):
    for _ in range(5):
        job_factory(queue="big")
        job_factory(queue="small")
    got = queue.claim("w", [("big", 3), ("small", 1)], limit=None)
    assert sorted(j.queue for j in got) == ["big", "big", "big", "small"]


# -- ack -----------------------------------------------------------------------


def test_ack_completes_and_keeps_the_result(queue, job_factory):
    claimed = queue.pull(worker_id="w") if job_factory() else None
    assert queue.ack(claimed, worker_id="w", result={"sent": True})
    row = fetch(claimed)
    assert (row.status, row.result, row.locked_until) == ("done", {"sent": True}, None)
    assert row.finished_at is not None
    assert not queue.ack(claimed, worker_id="w"), "a second ack changes nothing"


@override_settings(JOBQUEUE={"KEEP_COMPLETED": 0})
def test_ack_deletes_the_job_when_completed_jobs_are_not_kept(queue, job_factory):
    job_factory()
    claimed = queue.pull(worker_id="w")
    assert queue.ack(claimed, worker_id="w", result={"ignored": 1})
    assert not Job.objects.exists()
    assert not queue.ack(claimed, worker_id="w")


def test_ack_by_bare_id_is_fenced_by_worker_id(queue, job_factory):
    job = job_factory()
    queue.pull(worker_id="a")
    assert not queue.ack(job.pk, worker_id="b")
    assert fetch(job).status == "running"
    assert queue.ack(job.pk, worker_id="a")


def test_ack_of_a_ready_job_is_refused(queue, job_factory):
    job = job_factory()
    assert not queue.ack(job, worker_id="w")
    assert not queue.ack(job.pk, worker_id="w")
    assert fetch(job).status == "ready"


def test_result_that_is_not_json_raises_before_writing(queue, job_factory):
    job_factory()
    claimed = queue.pull(worker_id="w")
    with pytest.raises(ValueError, match="result"):
        queue.ack(claimed, worker_id="w", result={"when": timezone.now()})
    assert fetch(claimed).status == "running"


# -- stale workers -------------------------------------------------------------


def _all_completions_refused(queue, stale: Job | int, worker_id: str) -> None:
    assert not queue.ack(stale, worker_id=worker_id)
    assert not queue.nack(stale, worker_id=worker_id, error="late")
    assert not queue.fail(stale, worker_id=worker_id, error="late")
    assert not queue.extend_visibility(stale, worker_id=worker_id, extension=60)
    assert not queue.release(stale, worker_id=worker_id)


def test_a_stale_worker_cannot_touch_a_job_reclaimed_by_another(queue, job_factory):
    job_factory(max_attempts=5)
    stale = queue.pull(worker_id="a")
    expire_claims()
    assert queue.tick_timeouts() == 1
    fresh = queue.pull(worker_id="b")
    before = fetch(fresh)
    _all_completions_refused(queue, stale, "a")
    _all_completions_refused(queue, stale.pk, "a")
    after = fetch(fresh)
    assert (after.status, after.locked_by, after.locked_until, after.claim_token) == (
        before.status,
        before.locked_by,
        before.locked_until,
        before.claim_token,
    )
    assert not DeadLetter.objects.exists()
    assert queue.ack(fresh, worker_id="b")


def test_the_same_worker_id_cannot_complete_its_own_older_claim(queue, job_factory):
    job_factory()
    older = queue.pull(worker_id="server-c")
    expire_claims()
    queue.tick_timeouts()
    newer = queue.pull(worker_id="server-c")
    assert newer.claim_token == older.claim_token + 1
    _all_completions_refused(queue, older, "server-c")
    assert fetch(newer).status == "running"
    assert queue.ack(newer, worker_id="server-c")


def test_completions_of_a_cancelled_job_are_refused(queue, job_factory):
    job_factory()
    claimed = queue.pull(worker_id="w")
    assert queue.cancel(claimed)
    _all_completions_refused(queue, claimed, "w")
    assert fetch(claimed).status == "cancelled"
    assert not queue.cancel(claimed), "a finished job cannot be cancelled"


def test_completions_of_a_vanished_job_are_refused(queue, job_factory):
    job_factory()
    claimed = queue.pull(worker_id="w")
    Job.objects.all().delete()
    _all_completions_refused(queue, claimed, "w")
    assert not DeadLetter.objects.exists()


def test_an_expired_claim_not_yet_rescued_can_still_be_acked_by_its_owner(queue, job_factory):
    job_factory()
    claimed = queue.pull(worker_id="w")
    expire_claims()
    assert queue.ack(claimed, worker_id="w")
    assert queue.tick_timeouts() == 0


# -- nack, backoff, dead letters -----------------------------------------------


@override_settings(JOBQUEUE={"BACKOFF_BASE": 10, "BACKOFF_MAX": 25})
def test_nack_retries_after_an_exponential_capped_backoff(queue, job_factory):
    job = job_factory(max_attempts=10)
    waits = []
    for attempt in range(1, 5):
        Job.objects.filter(pk=job.pk).update(run_at=timezone.now() - timedelta(seconds=1))
        claimed = queue.pull(worker_id="w")
        assert claimed.attempts == attempt
        assert queue.nack(claimed, worker_id="w", error=f"boom {attempt}", traceback="Traceback ...")
        row = fetch(job)
        assert (row.status, row.locked_by, row.last_error) == ("ready", None, f"boom {attempt}")
        assert row.last_traceback == "Traceback ..."
        waits.append((row.run_at - timezone.now()).total_seconds())
    # Ceilings 10, 20, 25 (capped), 25; jitter keeps each in [ceiling / 2, ceiling].
    for wait, ceiling in zip(waits, [10, 20, 25, 25], strict=True):
        assert ceiling / 2 - 1 <= wait <= ceiling + 0.5


def test_nack_with_an_explicit_delay(queue, job_factory):
    job_factory()
    claimed = queue.pull(worker_id="w")
    assert queue.nack(claimed, worker_id="w", error="later", delay=timedelta(seconds=120))
    wait = (fetch(claimed).run_at - timezone.now()).total_seconds()
    assert 115 < wait <= 120.5


def test_nack_when_attempts_are_spent_moves_the_job_to_the_dead_letters(queue, job_factory):
    job = job_factory(name="tests.flaky", payload={"user_id": "42"}, priority=7, max_attempts=2)
    for attempt in (1, 2):
        Job.objects.filter(pk=job.pk).update(run_at=timezone.now() - timedelta(seconds=1))
        claimed = queue.pull(worker_id="server-c")
        assert queue.nack(claimed.pk, worker_id="server-c", error=f"err {attempt}", traceback=f"tb {attempt}")
    assert not Job.objects.filter(pk=job.pk).exists()
    dead = DeadLetter.objects.get()
    assert (dead.job_id, dead.name, dead.queue, dead.payload, dead.priority) == (
        job.pk,
        "tests.flaky",
        "default",
        {"user_id": "42"},
        7,
    )
    assert (dead.attempts, dead.max_attempts, dead.worker_id) == (2, 2, "server-c")
    assert (dead.error, dead.traceback) == ("err 2", "tb 2")
    assert dead.enqueued_at == job.created_at
    assert dead.failed_at >= dead.enqueued_at


def test_fail_dead_letters_at_once(queue, job_factory):
    job_factory(max_attempts=5)
    claimed = queue.pull(worker_id="w")
    assert queue.fail(claimed, worker_id="w", error="number not on WhatsApp")
    assert not Job.objects.exists()
    dead = DeadLetter.objects.get()
    assert (dead.attempts, dead.error) == (1, "number not on WhatsApp")
    assert not queue.fail(claimed, worker_id="w", error="again")
    assert DeadLetter.objects.count() == 1


def test_odd_and_huge_error_texts_never_break_the_bookkeeping(queue, job_factory):
    job_factory(max_attempts=1)
    job_factory(max_attempts=5)
    first, second = queue.pull_many(worker_id="w", limit=2)
    huge = "x" * 5_000_000
    odd = "nul\x00 byte, lone surrogate \ud800, emoji 🎉"
    assert queue.nack(second, worker_id="w", error=odd, traceback=huge)
    assert queue.fail(first, worker_id="w", error=huge, traceback=odd)
    row = fetch(second)
    assert "\x00" not in row.last_error and "emoji 🎉" in row.last_error
    assert len(row.last_traceback) <= 50_000
    dead = DeadLetter.objects.get()
    assert len(dead.error) <= 10_000 and "characters cut" in dead.error


# -- extend, release, cancel ---------------------------------------------------


def test_extend_visibility_sets_the_deadline_from_now(queue, job_factory):
    job_factory(visibility_timeout=5)
    claimed = queue.pull(worker_id="w")
    assert queue.extend_visibility(claimed, worker_id="w", extension=timedelta(minutes=5))
    remaining = (fetch(claimed).locked_until - timezone.now()).total_seconds()
    assert 295 < remaining <= 301
    assert queue.extend_visibility(claimed.pk, worker_id="w", extension=1)
    assert fetch(claimed).locked_until < claimed.locked_until


def test_release_hands_the_job_back_without_counting_the_attempt(queue, job_factory):
    job_factory()
    claimed = queue.pull(worker_id="w")
    assert queue.release(claimed, worker_id="w")
    row = fetch(claimed)
    assert (row.status, row.attempts, row.locked_by) == ("ready", 0, None)
    again = queue.pull(worker_id="w2")
    assert again.attempts == 1 and again.claim_token == claimed.claim_token + 1


def test_cancel_a_ready_job(queue, job_factory):
    job = job_factory()
    assert queue.cancel(job.pk)
    assert fetch(job).status == "cancelled"
    assert queue.pull(worker_id="w") is None


# -- tick_timeouts -------------------------------------------------------------


def test_tick_timeouts_rescues_expired_claims_only(queue, job_factory):
    for _ in range(3):
        job_factory(max_attempts=3)
    expired, alive, _ = queue.pull_many(worker_id="w", limit=3)
    Job.objects.filter(pk=expired.pk).update(locked_until=timezone.now() - timedelta(seconds=1))
    assert queue.tick_timeouts() == 1
    row = fetch(expired)
    assert (row.status, row.locked_by, row.locked_until, row.attempts) == ("ready", None, None, 1)
    assert "claim expired: worker w" in row.last_error
    assert fetch(alive).status == "running"
    assert queue.tick_timeouts() == 0


def test_a_job_that_kills_its_worker_every_time_ends_in_the_dead_letters(queue, job_factory):
    job = job_factory(max_attempts=3)
    for attempt in (1, 2, 3):
        claimed = queue.pull(worker_id=f"doomed-{attempt}")
        assert claimed.attempts == attempt
        expire_claims()  # the worker died without a word
        assert queue.tick_timeouts() == 1
    assert queue.pull(worker_id="w") is None
    dead = DeadLetter.objects.get()
    assert (dead.job_id, dead.attempts, dead.worker_id) == (job.pk, 3, "doomed-3")
    assert "claim expired: worker doomed-3" in dead.error


def test_tick_timeouts_with_a_real_short_claim(queue, job_factory):
    job_factory()
    # pull's own timeout has no floor: a custom worker that claims this way keeps its claims itself.
    claimed = queue.pull(worker_id="w", visibility_timeout=0.2)
    assert queue.tick_timeouts() == 0
    time.sleep(0.4)
    assert queue.tick_timeouts() == 1
    assert fetch(claimed).status == "ready"
    assert not queue.ack(claimed, worker_id="w"), "a rescued claim is no longer current"


# -- dead letters back to the queue --------------------------------------------


def test_retry_dead_letter_puts_it_back_with_attempts_reset(queue, job_factory):
    original = job_factory(name="tests.flaky", payload={"a": 1}, queue="emails", priority=3, max_attempts=4)
    claimed = queue.pull(worker_id="w")
    queue.fail(claimed, worker_id="w", error="down", traceback="tb")
    dead = DeadLetter.objects.get()
    revived = queue.retry_dead_letter(dead)
    assert not DeadLetter.objects.exists()
    row = fetch(revived)
    assert (row.name, row.queue, row.payload, row.priority) == ("tests.flaky", "emails", {"a": 1}, 3)
    assert (row.status, row.attempts, row.max_attempts) == ("ready", 0, 4)
    assert row.created_at == original.created_at
    assert queue.pull(worker_id="w").pk == revived.pk


def test_retrying_a_dead_letter_twice_makes_one_job(queue, job_factory):
    job_factory()
    queue.fail(queue.pull(worker_id="w"), worker_id="w", error="x")
    dead = DeadLetter.objects.get()
    queue.retry_dead_letter(dead.pk)
    with pytest.raises(DeadLetter.DoesNotExist):
        queue.retry_dead_letter(dead.pk)
    assert Job.objects.count() == 1


def test_prune_removes_old_finished_jobs_only(queue, job_factory):
    done, cancelled, ready = job_factory(), job_factory(), job_factory()
    queue.ack(queue.pull(worker_id="w"), worker_id="w")
    queue.cancel(cancelled.pk)
    assert queue.prune(older_than=3600) == 0
    Job.objects.filter(pk__in=[done.pk, cancelled.pk]).update(finished_at=timezone.now() - timedelta(hours=2))
    assert queue.prune(older_than=3600) == 2
    assert list(Job.objects.values_list("pk", flat=True)) == [ready.pk]


def test_claim_arguments_edge_cases(queue, job_factory):
    job_factory(queue="a")
    assert queue.claim("w", [], limit=5) == []
    with pytest.raises(ValueError, match="needs a limit"):
        queue.claim("w", None, limit=None)
    with pytest.raises(ValueError, match="queue name"):
        queue.claim("w", [("bad queue", 1)], limit=None)
    with pytest.raises(ValueError, match="limit"):
        queue.claim("w", [("a", 0)], limit=None)
    claimed = queue.claim("w", None, limit=5)
    assert len(claimed) == 1 and isinstance(claimed[0].visibility_timeout, float)


def test_a_dead_letter_from_an_expired_claim_labels_the_earlier_traceback(queue, job_factory):
    job_factory(max_attempts=2)
    first = queue.pull(worker_id="w")
    queue.nack(first, worker_id="w", error="ValueError: bad", traceback="Traceback: line 1", delay=0)
    queue.pull(worker_id="w2")
    expire_claims()
    assert queue.tick_timeouts() == 1
    dead = DeadLetter.objects.get()
    assert dead.error.startswith("claim expired: worker w2")
    assert dead.traceback == "Traceback of an earlier attempt (ValueError: bad):\nTraceback: line 1"


# -- races: upkeep against a transition that holds the row ------------------------
# Each statement below picks rows in a subquery and acts on them in an outer
# statement, or re-reads a row another transaction is changing. ``race`` runs
# it while that transaction is uncommitted (PostgreSQL; SQLite serialises them).


@pytest.mark.parametrize("max_attempts", [5, 1], ids=["rescue", "bury"])
def test_tick_timeouts_leaves_alone_an_expired_claim_whose_ack_is_committing(
    queue, job_factory, row_locks, max_attempts
):
    job_factory(max_attempts=max_attempts)
    claimed = queue.pull(worker_id="w")
    expire_claims()

    raced = race(lambda: queue.ack(claimed, worker_id="w"), lambda: QueueClient().tick_timeouts())

    assert raced.result == 0
    assert fetch(claimed).status == "done" and not DeadLetter.objects.exists()
    # SKIP LOCKED: a ticker passes over a row another transaction holds, never waits on it.
    assert not raced.blocked and raced.overlapped == row_locks


def test_prune_leaves_alone_a_cancelled_job_that_retry_now_is_making_live(queue, job_factory, row_locks):
    job = job_factory()
    queue.cancel(job.pk)
    Job.objects.update(finished_at=timezone.now() - timedelta(hours=1))

    raced = race(lambda: queue.retry_jobs_now([job]), lambda: QueueClient().prune(older_than=0))

    assert raced.result == 0
    assert fetch(job).status == "ready"
    assert not raced.blocked and raced.overlapped == row_locks
    assert queue.prune(older_than=0) == 0, "a live job is never pruned later either"


def test_prune_workers_spares_a_worker_whose_heartbeat_is_committing(queue, row_locks):
    queue.register_worker("w", hostname="h", pid=1, queues=[], concurrency=1)
    Worker.objects.update(last_heartbeat=timezone.now() - timedelta(hours=1))

    raced = race(lambda: queue.worker_heartbeat("w"), lambda: QueueClient().prune_workers(60))

    assert raced.result == 0 and Worker.objects.filter(worker_id="w").exists()
    # One statement: it waits for the beat, then re-checks its own WHERE on the new row.
    assert raced.blocked == row_locks


@pytest.mark.parametrize("queues", [(), ("default",)], ids=["every-queue", "by-queue"])
def test_a_claim_never_takes_a_job_whose_cancel_is_committing(queue, job_factory, row_locks, queues):
    job = job_factory()

    raced = race(lambda: queue.cancel(job.pk), lambda: QueueClient().pull(*queues, worker_id="w"))

    assert raced.result is None
    row = fetch(job)
    assert (row.status, row.attempts, row.locked_by) == ("cancelled", 0, None)
    assert not raced.blocked and raced.overlapped == row_locks
