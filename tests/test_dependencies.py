"""depends_on: waiting jobs, their release at the last dependency's ack, and cancels that cascade."""

from __future__ import annotations

import threading
from typing import Any

import pytest
from django.conf import settings
from django.db import connection, connections, transaction
from django.test import override_settings
from django.test.utils import CaptureQueriesContext
from django.urls import reverse

from django_jobqueue import DependencyError, QueueClient, enqueue, enqueue_many, job
from django_jobqueue.models import DeadLetter, Dependency, Job
from django_jobqueue.queue import engine_for
from tests.faults.row_locks import race
from tests.worker_support import wait_until


@job(name="tests.deps.step")
def step(n: int = 0) -> int:
    return n


def status(job: Job | int) -> str:
    return Job.objects.get(pk=job.pk if isinstance(job, Job) else job).status


def run(queue: QueueClient, job: Job, worker_id: str = "w") -> bool:
    """Claim ``job`` (it must be the only ready one) and ack it."""
    claimed = queue.pull(worker_id=worker_id)
    assert claimed is not None and claimed.pk == job.pk, f"expected #{job.pk} to be claimed, got {claimed}"
    return queue.ack(claimed, worker_id=worker_id)


def bury(queue: QueueClient, job: Job) -> DeadLetter:
    claimed = queue.pull(worker_id="w")
    assert claimed is not None and claimed.pk == job.pk
    assert queue.fail(claimed, worker_id="w", error="boom")
    return DeadLetter.objects.get(job_id=job.pk)


# -- enqueue and release ---------------------------------------------------------


def test_a_job_waits_for_its_dependency_and_is_released_by_its_ack(queue):
    a = step.enqueue(n=1)
    b = step.using(depends_on=[a]).enqueue(n=2)
    assert b.status == "waiting" and status(b) == "waiting"
    assert list(Dependency.objects.values_list("dependent_id", "dependency_id")) == [(b.pk, a.pk)]
    assert Job.objects.get(pk=a.pk).has_dependents
    assert run(queue, a)
    assert status(b) == "ready"
    assert not Dependency.objects.exists(), "a done dependency leaves no edge behind"
    assert run(queue, b)
    assert queue.pull(worker_id="w") is None


def test_a_waiting_job_is_never_claimed(queue):
    a = step.enqueue()
    b = enqueue("tests.deps.step", {"n": 2}, depends_on=[a])
    claimed = queue.pull_many(worker_id="w", limit=10)
    assert [job.pk for job in claimed] == [a.pk], "only the dependency is claimed"
    assert status(b) == "waiting"


def test_fan_in_releases_only_at_the_last_dependency(queue):
    deps = [step.enqueue(n=n) for n in range(3)]
    last = step.using(depends_on=deps).enqueue()
    claimed = queue.pull_many(worker_id="w", limit=10)
    assert sorted(job.pk for job in claimed) == [job.pk for job in deps]
    for job_ in claimed[:2]:
        assert queue.ack(job_, worker_id="w")
        assert status(last) == "waiting"
    assert queue.ack(claimed[2], worker_id="w")
    assert status(last) == "ready"


def test_fan_out_releases_every_dependent_in_the_ack(queue):
    a = step.enqueue()
    dependents = enqueue_many([("tests.deps.step", {"n": n}, {"depends_on": [a]}) for n in range(50)])
    assert {job.status for job in dependents} == {"waiting"}
    assert run(queue, a)
    assert set(Job.objects.filter(pk__in=[j.pk for j in dependents]).values_list("status", flat=True)) == {
        "ready"
    }


def test_a_dependency_already_done_is_no_edge(queue):
    a = step.enqueue()
    assert run(queue, a)
    b = step.using(depends_on=[a.pk]).enqueue()
    assert b.status == "ready" and status(b) == "ready"
    assert not Dependency.objects.exists()


def test_depends_on_takes_jobs_ids_and_one_job_and_drops_repeats(queue):
    a, b = step.enqueue(), step.enqueue()
    c = step.using(depends_on=[a, b.pk, a]).enqueue()
    assert sorted(Dependency.objects.filter(dependent_id=c.pk).values_list("dependency_id", flat=True)) == [
        a.pk,
        b.pk,
    ]
    d = enqueue("tests.deps.step", depends_on=a)
    assert d.status == "waiting"


@pytest.mark.parametrize(
    ("depends_on", "message"),
    [
        ("12", "must be a list"),
        ([True], "is not a job"),
        ([0], "is not a job"),
        ([-3], "is not a job"),
        ([1.5], "is not a job"),
        ([None], "is not a job"),
    ],
)
def test_bad_depends_on_is_refused_before_anything_is_written(queue, depends_on, message):
    with pytest.raises(ValueError, match=message):
        enqueue("tests.deps.step", depends_on=depends_on)
    assert not Job.objects.exists()


def test_an_unknown_dependency_is_refused_and_nothing_is_enqueued(queue):
    a = step.enqueue()
    with pytest.raises(DependencyError, match=r"#999999 that are not in the queue"):
        enqueue_many(
            [
                ("tests.deps.step", {"n": 1}, {"depends_on": [a]}),
                ("tests.deps.step", {"n": 2}, {"depends_on": [a, 999999]}),
            ]
        )
    assert list(Job.objects.values_list("pk", flat=True)) == [a.pk], "nothing of the batch is written"
    assert not Dependency.objects.exists()
    assert not Job.objects.get(pk=a.pk).has_dependents, "the mark rolled back with the rest"


def test_a_cancelled_dependency_is_refused(queue):
    a = step.enqueue()
    assert queue.cancel(a)
    with pytest.raises(DependencyError, match="cancelled"):
        step.using(depends_on=[a]).enqueue()
    assert Job.objects.count() == 1


def test_depends_on_with_a_unique_key_is_refused(queue):
    a = step.enqueue()
    with pytest.raises(ValueError, match="depends_on or unique_key"):
        step.using(depends_on=[a], unique_key="k").enqueue()


@override_settings(JOBQUEUE={**settings.JOBQUEUE, "KEEP_COMPLETED": 0})
def test_release_works_when_done_jobs_are_deleted_on_ack(queue):
    a = step.enqueue()
    b = step.using(depends_on=[a]).enqueue()
    assert run(queue, a)
    assert not Job.objects.filter(pk=a.pk).exists()
    assert status(b) == "ready"


def test_a_chain_runs_in_order(queue):
    links = [step.enqueue(n=0)]
    for n in range(1, 6):
        links.append(step.using(depends_on=[links[-1]]).enqueue(n=n))
    for link in links:
        assert run(queue, link)
    assert queue.pull(worker_id="w") is None


# -- the ack paths ---------------------------------------------------------------


def test_a_plain_ack_is_still_one_statement(queue):
    a = step.enqueue()
    claimed = queue.pull(worker_id="w")
    with CaptureQueriesContext(connection) as queries:
        assert queue.ack(claimed, worker_id="w")
    assert len(queries) == 1, [q["sql"] for q in queries]
    assert "NOT has_dependents" in queries[0]["sql"]
    assert status(a) == "done"


@pytest.mark.parametrize("keep", [86400, 0])
def test_ack_many_and_a_round_release_dependents(queue, keep):
    with override_settings(JOBQUEUE={**settings.JOBQUEUE, "KEEP_COMPLETED": keep}):
        a, plain = step.enqueue(n=1), step.enqueue(n=2)
        assert plain.status == "ready"
        b = step.using(depends_on=[a]).enqueue(n=3)
        claimed = queue.pull_many(worker_id="w", limit=10)
        acked = queue.ack_many([(job_, job_.pk) for job_ in claimed], worker_id="w")
        assert acked == {(job_.pk, job_.claim_token) for job_ in claimed}
        assert status(b) == "ready"
        # A round: the ack of b's dependent-free claim and the next claim in one go.
        c = step.using(depends_on=[b]).enqueue(n=4)
        claimed = queue.pull_many(worker_id="w", limit=10)
        assert [job_.pk for job_ in claimed] == [b.pk]
        acked, next_claims = queue.ack_and_claim(
            [(claimed[0], None)], worker_id="w", queue_limits=None, limit=5
        )
        assert acked == {(b.pk, claimed[0].claim_token)}
        # Released by the round's ack: claimed in the same round where the release
        # runs before the claim (SQLite), ready for the next where it runs after.
        assert status(c) == ("running" if c.pk in {job_.pk for job_ in next_claims} else "ready")


def test_a_stale_ack_of_a_job_with_dependents_changes_nothing(queue):
    a = step.enqueue()
    b = step.using(depends_on=[a]).enqueue()
    claimed = queue.pull(worker_id="w")
    assert not queue.ack(claimed, worker_id="other")
    assert status(a) == "running" and status(b) == "waiting"


# -- dead letters, cancel --------------------------------------------------------


def test_a_dead_dependency_keeps_its_dependents_waiting_and_its_retry_resumes_the_flow(queue):
    a = step.enqueue()
    b = step.using(depends_on=[a]).enqueue()
    c = step.using(depends_on=[b]).enqueue()
    dead = bury(queue, a)
    assert status(b) == "waiting" and status(c) == "waiting"
    # A dependent enqueued while its dependency is a dead letter waits on it too.
    d = step.using(depends_on=[a.pk]).enqueue()
    assert d.status == "waiting"
    again = queue.retry_dead_letter(dead)
    assert again.pk != a.pk and again.has_dependents
    waiting_on_it = Dependency.objects.filter(dependency_id=again.pk).values_list("dependent_id", flat=True)
    assert sorted(waiting_on_it) == [b.pk, d.pk]
    assert run(queue, again)
    assert status(b) == "ready" and status(d) == "ready" and status(c) == "waiting"


def test_retrying_dead_letters_in_batches_repoints_their_dependents(queue):
    a = step.enqueue()
    b = step.using(depends_on=[a]).enqueue()
    bury(queue, a)
    assert queue.retry_dead_letters(DeadLetter.objects.all()) == 1
    new = Job.objects.get(status="ready")
    assert new.has_dependents
    assert run(queue, new)
    assert status(b) == "ready"


def test_deleting_a_dead_dependency_cancels_its_dependents_transitively(queue):
    a = step.enqueue()
    b = step.using(depends_on=[a]).enqueue()
    c = step.using(depends_on=[b]).enqueue()
    other = step.enqueue()
    d = step.using(depends_on=[c, other]).enqueue()
    bury(queue, a)
    assert queue.delete_dead_letters(DeadLetter.objects.all()) == 1
    assert [status(j) for j in (b, c, d, other)] == ["cancelled", "cancelled", "cancelled", "ready"]
    assert not Dependency.objects.exists(), "d's wait on other went with it"


def test_cancelling_a_dependency_cancels_its_dependents_and_theirs(queue):
    a = step.enqueue()
    b = step.using(depends_on=[a]).enqueue()
    c = step.using(depends_on=[b]).enqueue()
    changes = queue.cancel_jobs([a])
    assert [change.job_id for change in changes] == [a.pk, b.pk, c.pk]
    assert [status(j) for j in (a, b, c)] == ["cancelled"] * 3
    assert not Dependency.objects.exists()


def test_cancelling_a_waiting_job_drops_its_waits_and_cancels_its_dependents(queue):
    a = step.enqueue()
    b = step.using(depends_on=[a]).enqueue()
    c = step.using(depends_on=[b]).enqueue()
    assert queue.cancel(b)
    assert [status(j) for j in (a, b, c)] == ["ready", "cancelled", "cancelled"]
    assert not Dependency.objects.exists()
    assert run(queue, a), "the dependency runs on, its ack releasing nothing"


def test_run_now_leaves_a_waiting_job_waiting(queue):
    a = step.enqueue()
    b = step.using(depends_on=[a]).enqueue()
    assert queue.retry_jobs_now([b]) == []
    assert status(b) == "waiting"


def test_the_repair_releases_a_waiting_job_no_edge_holds(queue):
    a = step.enqueue()
    b = step.using(depends_on=[a]).enqueue()
    assert queue.repair_dependencies() == 0
    Dependency.objects.all().delete()  # by hand: what no statement of the queue does
    assert queue.repair_dependencies() == 1
    assert status(b) == "ready"


def test_the_repair_drops_edges_to_done_jobs(queue):
    a = step.enqueue()
    b = step.using(depends_on=[a]).enqueue()
    Job.objects.filter(pk=a.pk).update(status="done")  # by hand, as above
    assert queue.repair_dependencies() == 1
    assert status(b) == "ready" and not Dependency.objects.exists()


# -- races (forced on PostgreSQL, serialised by SQLite's single writer) -----------


def _ack_in(queue: QueueClient, job_: Job):
    claimed = queue.pull(worker_id="w")
    assert claimed is not None and claimed.pk == job_.pk
    return lambda: queue.ack(claimed, worker_id="w")


def test_an_enqueue_naming_a_job_whose_ack_is_committing_sees_it_done(queue, row_locks):
    a = step.enqueue()
    ack = _ack_in(queue, a)
    raced = race(ack, lambda: QueueClient().push("tests.deps.step", {}, depends_on=[a]))
    assert raced.blocked == row_locks, "the enqueue waited on the ack's row lock"
    assert raced.result.status == "ready"
    assert not Dependency.objects.exists()


def test_an_ack_racing_an_enqueue_that_names_it_releases_the_new_dependent(queue, row_locks):
    a = step.enqueue()
    ack = _ack_in(queue, a)
    made: list[Job] = []
    raced = race(lambda: made.append(step.using(depends_on=[a]).enqueue()), ack)
    assert raced.blocked == row_locks, "the ack waited on the enqueue's mark"
    assert raced.result is True
    assert status(made[0]) == "ready", "the ack saw the flag and released the dependent"


def test_the_last_two_dependencies_acked_at_once_release_their_dependent_once(queue, row_locks):
    a, b = step.enqueue(n=1), step.enqueue(n=2)
    c = step.using(depends_on=[a, b]).enqueue()
    claimed = {job_.pk: job_ for job_ in queue.pull_many(worker_id="w", limit=2)}
    raced = race(
        lambda: queue.ack(claimed[a.pk], worker_id="w"),
        lambda: QueueClient().ack(claimed[b.pk], worker_id="w"),
    )
    assert raced.blocked == row_locks, "the second release waited on the first's lock of c"
    assert raced.result is True
    assert status(c) == "ready"
    assert not Dependency.objects.exists()


def test_a_cancel_racing_an_enqueue_that_names_its_job_cancels_the_new_dependent(queue, row_locks):
    a = step.enqueue()
    made: list[Job] = []
    raced = race(lambda: made.append(step.using(depends_on=[a]).enqueue()), lambda: QueueClient().cancel(a))
    assert raced.blocked == row_locks
    assert status(made[0]) == "cancelled"


def test_a_retry_racing_an_enqueue_that_names_the_dead_letter_repoints_the_new_edge(queue, row_locks):
    a = step.enqueue()
    dead = bury(queue, a)
    made: list[Job] = []
    raced = race(
        lambda: made.append(step.using(depends_on=[a.pk]).enqueue()),
        lambda: QueueClient().retry_dead_letter(dead.pk),
    )
    assert raced.blocked == row_locks, "the retry waited on the enqueue's FOR SHARE"
    assert list(Dependency.objects.values_list("dependent_id", "dependency_id")) == [
        (made[0].pk, raced.result.pk)
    ]


def test_an_enqueue_naming_running_jobs_holds_up_neither_their_heartbeat_nor_a_round(queue, row_locks):
    """The enqueue keeps its dependencies from finishing until it commits, and from nothing else.

    Its transaction left open, the worker's heartbeat renews every claim at
    once, and its round, after a moment's wait on the held rows, writes every
    other ack and commits; the acks it passed over go through after the
    commit, and release the new dependent. MySQL has no lock of a row's key
    alone: there the enqueue locks its dependencies, and the heartbeat passes
    over them as held up (docs/databases.md), renewing the others.
    """
    a, b, other = step.enqueue(n=1), step.enqueue(n=2), step.enqueue(n=3)
    claimed = {job_.pk: job_ for job_ in queue.pull_many(worker_id="w", limit=3)}
    made: list[Job] = []

    def enqueue_dependent() -> None:
        made.append(step.using(depends_on=[a, b]).enqueue())

    beat = race(enqueue_dependent, lambda: QueueClient().extend_claims(list(claimed.values()), worker_id="w"))
    key_share = bool(engine_for(connection).for_key_share) or not row_locks
    assert not beat.blocked and beat.result == ({a.pk, b.pk, other.pk} if key_share else {other.pk})
    acks = [(claimed[pk], None) for pk in (b.pk, other.pk, a.pk)]
    made.clear()
    with transaction.atomic():
        enqueue_dependent()
        acked, _claimed = _in_a_thread(
            lambda: QueueClient().ack_and_claim(acks, worker_id="w", queue_limits=None, limit=1)
        )
    if row_locks:
        # a and b cannot finish before the enqueue commits: passed over, not waited on.
        assert acked == {(other.pk, claimed[other.pk].claim_token)}
        assert status(a) == status(b) == "running"
        acked, _claimed = queue.ack_and_claim(acks[::2], worker_id="w", queue_limits=None, limit=1)
    assert {job_id for job_id, _token in acked} >= {a.pk, b.pk}
    assert status(made[0]) == "ready", "the acks after the commit found the mark and released it"
    assert not Dependency.objects.filter(dependent=made[0]).exists()


def _in_a_thread(action: Any) -> Any:
    """``action()`` on a connection of its own, which must end within 10 s; return its result.

    On SQLite the caller's open write transaction holds the database: the action runs after it.
    """
    if connection.vendor == "sqlite":
        return action()
    result: list[Any] = []

    def run() -> None:
        try:
            result.append(action())
        finally:
            connections.close_all()

    thread = threading.Thread(target=run)
    thread.start()
    thread.join(10)
    assert not thread.is_alive() and result, "it waited on the open transaction"
    return result[0]


def test_the_mark_on_a_dependency_is_written_when_the_enqueue_commits(
    queue, postgresql_only, other_connection
):
    a = step.enqueue()

    def may_update() -> bool:
        """Whether a heartbeat could change ``a`` now: its row not held against such an update."""
        with other_connection.cursor() as cursor:
            cursor.execute(
                f"SELECT id FROM {Job._meta.db_table} WHERE id = %s FOR NO KEY UPDATE SKIP LOCKED", [a.pk]
            )
            return cursor.fetchone() is not None

    with transaction.atomic():
        step.using(depends_on=[a]).enqueue()
        assert may_update(), "no write to the dependency's row before the commit"
    assert Job.objects.get(pk=a.pk).has_dependents


def test_an_enqueue_between_two_acks_of_one_transaction_meets_no_deadlock(queue, row_locks):
    """The worker holds b's ack; the enqueue naming a and b comes; then the worker acks a.

    Before: the enqueue locked a, waited on b, the ack of a waited on the
    enqueue, and the database ended one of them with a deadlock. Now the ack
    passes a over (the enqueue keeps it from finishing) and commits; the
    enqueue then sees b done, and a's ack, once it commits, releases.
    """
    a, b = step.enqueue(n=1), step.enqueue(n=2)
    claimed = {job_.pk: job_ for job_ in queue.pull_many(worker_id="w", limit=2)}
    made: list[Job] = []
    with transaction.atomic():
        assert queue.ack_many([(claimed[b.pk], None)], worker_id="w")
        enqueue_thread = threading.Thread(target=lambda: _enqueue_into(made, [a, b]))
        enqueue_thread.start()
        if row_locks:
            wait_until(lambda: _waiting_backends() > 0, 10, "the enqueue waiting on b's ack")
        acked = queue.ack_many([(claimed[a.pk], None)], worker_id="w")
    enqueue_thread.join(30)
    assert len(made) == 1, "the enqueue failed"
    if row_locks:
        assert acked == set(), "a, held by the enqueue, was passed over"
        assert queue.ack_many([(claimed[a.pk], None)], worker_id="w")
    assert status(a) == status(b) == "done"
    assert status(made[0]) == "ready"


def _enqueue_into(made: list[Job], depends_on: list[Job]) -> None:
    try:
        made.append(step.using(depends_on=depends_on).enqueue())
    finally:
        connections.close_all()


def _waiting_backends() -> int:
    """Sessions waiting on a lock; on MySQL, also a statement of this database's running for 300 ms
    (``tests/faults/row_locks.py`` says why)."""
    with connection.cursor() as cursor:
        if connection.vendor == "mysql":
            cursor.execute(
                "SELECT (SELECT count(*) FROM information_schema.INNODB_LOCK_WAITS) + (SELECT count(*) "
                "FROM information_schema.PROCESSLIST WHERE ID <> CONNECTION_ID() AND DB = DATABASE() "
                "AND COMMAND = 'Query' AND TIME_MS > 300)"
            )
        else:
            cursor.execute("SELECT count(*) FROM pg_locks WHERE NOT granted")
        return int(cursor.fetchone()[0])


def test_enqueues_naming_jobs_that_a_big_round_acks_meet_no_deadlock(queue):
    """A worker acking b, 2,000 other jobs, then a, in one round, against an enqueue naming a and b.

    Each enqueue runs while the round may be anywhere in its rows, on two
    connections: neither side ever sees a deadlock, and the dependent is
    released exactly once, by whichever ack comes last.
    """
    for _attempt in range(5):
        _enqueue_against_a_big_round(queue)
        Job.objects.all().delete()


def _enqueue_against_a_big_round(queue: QueueClient) -> None:
    a, b = step.enqueue(n=1), step.enqueue(n=2)
    enqueue_many([("tests.deps.step", {"n": 3}, {})] * 2000)
    claimed = {job_.pk: job_ for job_ in queue.pull_many(worker_id="w", limit=2002)}
    middle = [job_ for pk, job_ in claimed.items() if pk not in (a.pk, b.pk)]
    acks = [(claimed[b.pk], None), *((job_, None) for job_ in middle), (claimed[a.pk], None)]
    errors: list[BaseException] = []
    acked: set[tuple[int, int]] = set()

    def round_() -> None:
        try:
            acked.update(QueueClient().ack_many(acks, worker_id="w"))
        except BaseException as exc:  # noqa: BLE001 - asserted below
            errors.append(exc)
        finally:
            connections.close_all()

    worker = threading.Thread(target=round_)
    worker.start()
    # The enqueue comes once the round has locked b (its first row), before it reaches a.
    while worker.is_alive() and connection.vendor == "postgresql" and not _locked(b):
        pass
    dependent = step.using(depends_on=[a, b]).enqueue()
    worker.join(60)
    assert errors == [] and len(acked) >= 2000
    rest = [(claimed[pk], None) for pk in (a.pk, b.pk) if (pk, claimed[pk].claim_token) not in acked]
    assert queue.ack_many(rest, worker_id="w") == {(job_.pk, job_.claim_token) for job_, _ in rest}
    assert status(a) == status(b) == "done"
    assert status(dependent) == "ready"
    assert not Dependency.objects.exists()


@pytest.mark.parametrize("cancel_commits", [True, False])
def test_an_operators_open_cancel_of_a_dependent_holds_up_no_ack(queue, row_locks_only, cancel_commits):
    """An operator cancels d1, waiting on a, and keeps the transaction open; a's ack comes meanwhile.

    The ack commits at once and releases d2; it passes d1 over (the cancel
    holds d1's edge and row). Committed, the cancel leaves d1 cancelled;
    rolled back, the tick's repair releases d1, whose dependency is done.
    """
    a = step.enqueue(n=1)
    d1, d2 = step.using(depends_on=[a]).enqueue(n=2), step.using(depends_on=[a]).enqueue(n=3)
    claimed = queue.pull(worker_id="w")
    assert claimed is not None and claimed.pk == a.pk
    acked: list[bool] = []

    def ack() -> None:
        try:
            acked.append(QueueClient().ack(claimed, worker_id="w"))
        finally:
            connections.close_all()

    with transaction.atomic():
        assert [change.job_id for change in QueueClient().cancel_jobs([d1.pk])] == [d1.pk]
        worker = threading.Thread(target=ack)
        worker.start()
        worker.join(10)
        assert not worker.is_alive(), "the ack waited on the operator's transaction"
        transaction.set_rollback(not cancel_commits)
    assert acked == [True]
    assert status(a) == "done" and status(d2) == "ready"
    if cancel_commits:
        assert status(d1) == "cancelled"
    else:
        assert status(d1) == "waiting"
        assert queue.repair_dependencies() == 1
        assert status(d1) == "ready"
    assert not Dependency.objects.exists()


def _locked(job_: Job) -> bool:
    """Whether another transaction holds ``job_``'s row against deletion (a probe that holds nothing)."""
    with connection.cursor() as cursor:
        cursor.execute(
            f"SELECT id FROM {Job._meta.db_table} WHERE id = %s FOR KEY SHARE SKIP LOCKED", [job_.pk]
        )
        return cursor.fetchone() is None


# -- where it shows --------------------------------------------------------------


def test_the_job_page_links_what_a_job_waits_on_and_what_waits_on_it(operator, queue):
    from tests.test_admin import job_url, readonly_value, text  # noqa: PLC0415 - the admin tests' helpers

    dead_one = step.enqueue(n=2)
    letter = bury(queue, dead_one)
    a = step.enqueue(n=1)
    b = step.using(depends_on=[a, dead_one.pk]).enqueue()
    c = step.using(depends_on=[b]).enqueue()
    page = text(operator.get(job_url(b.pk)))
    waits_on = readonly_value(page, "Waits on")
    assert f'href="{job_url(a.pk)}"' in waits_on and "(ready)" in waits_on
    assert f"/deadletter/{letter.pk}/change/" in waits_on and "retry it to go on" in waits_on
    assert f'href="{job_url(c.pk)}"' in readonly_value(page, "Waited on by")
    assert "waits for its dependencies" in page and "Cancel job" in page
    assert f'href="{job_url(b.pk)}"' in readonly_value(text(operator.get(job_url(a.pk))), "Waited on by")
    assert "waiting" in text(
        operator.get(reverse("admin:django_jobqueue_job_changelist"), {"status": "waiting"})
    )


def test_queue_figures_count_waiting_jobs_apart_from_the_backlog(queue):
    from django_jobqueue import stats  # noqa: PLC0415

    a = step.enqueue()
    step.using(depends_on=[a]).enqueue()
    snapshot = stats.metrics_snapshot()
    default = next(q for q in snapshot.queues if q.queue == a.queue)
    assert (default.ready, default.waiting, default.backlog) == (1, 1, 1)


def test_a_waiting_tasks_job_reads_as_ready(queue):
    from django_jobqueue.models import JobStatus  # noqa: PLC0415
    from django_jobqueue.tasks.rows import STATUSES  # noqa: PLC0415

    assert STATUSES[JobStatus.WAITING].name == "READY"
