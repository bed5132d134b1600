"""The job table on PostgreSQL: live and finished jobs in partitions of their own (migration 0011).

A change between the two moves the row, as a delete from one partition and
an insert into the other (``queue/ops/moves.py``). A statement of another
transaction that waited on the row then finds it gone and passes it over, as
it passes over a row that no longer matches: never the serialization error
that PostgreSQL raises when it moves a row updated across partitions itself.
Each race below is forced: the move holds the row, uncommitted, while the
other statement waits on it in a second connection; then the move commits.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from django.db import connection, connections, transaction
from django.db.migrations.executor import MigrationExecutor
from django.urls import reverse

from django_jobqueue import QueueClient, enqueue_many
from django_jobqueue.models import Job
from django_jobqueue.queue.ops import tables

pytestmark = pytest.mark.usefixtures("postgresql_only")


def partition_of(job_id: int) -> str:
    with connection.cursor() as cursor:
        cursor.execute(f"SELECT tableoid::regclass::text FROM {tables.JOB} WHERE id = %s", [job_id])
        row = cursor.fetchone()
    return row[0] if row else ""


def indexes_of(table: str) -> set[str]:
    with connection.cursor() as cursor:
        cursor.execute("SELECT indexname FROM pg_indexes WHERE tablename = %s", [table])
        return {row[0] for row in cursor.fetchall()}


def test_each_index_is_where_its_rows_are(transactional_db):
    live, finished = indexes_of(tables.LIVE_JOBS), indexes_of(tables.FINISHED_JOBS)
    # A plain new job enters three: the primary key and the claim's two.
    entered = {f"{tables.LIVE_JOBS}_pkey", "jobqueue_claim_idx_live", "jobqueue_claim_any_idx_live"}
    assert entered <= live
    assert {"jobqueue_running_idx_live", "jobqueue_live_unique_key_live"} <= live
    admin = {"queue_id", "name_id", "finished", "cancelled"}
    admin = {f"jobqueue_{name}_idx" for name in admin}
    assert {f"{name}_finished" for name in admin} <= finished
    assert not {f"{name}_live" for name in admin} & live
    assert not {"jobqueue_claim_idx_finished", "jobqueue_running_idx_finished"} & finished
    # Empty among finished jobs: the admin's search reads them through indexes alone.
    assert {"jobqueue_key_ready_idx_finished", "jobqueue_key_running_idx_finished"} <= finished


def test_a_job_moves_to_the_finished_jobs_and_back(queue, job_factory):
    job = job_factory()
    assert partition_of(job.pk) == tables.LIVE_JOBS
    claimed = queue.pull(worker_id="w")
    assert queue.ack(claimed, worker_id="w", result={"ok": 1})
    assert partition_of(job.pk) == tables.FINISHED_JOBS
    done = Job.objects.get(pk=job.pk)
    assert (done.status, done.result, done.attempts, done.claim_token) == ("done", {"ok": 1}, 1, 1)

    cancelled = job_factory()
    queue.cancel(cancelled)
    assert partition_of(cancelled.pk) == tables.FINISHED_JOBS
    assert [change.job_id for change in queue.retry_jobs_now([cancelled.pk])] == [cancelled.pk]
    revived = Job.objects.get(pk=cancelled.pk)
    assert partition_of(revived.pk) == tables.LIVE_JOBS
    assert (revived.status, revived.finished_at) == ("ready", None)


def race(move: Callable[[], Any], waiter: Callable[[], Any]) -> Any:
    """Run ``move`` in a transaction left open, ``waiter`` on another connection meanwhile; then commit.

    Return what ``waiter`` returned (or raise what it raised). The waiter must
    still be waiting when the move commits: it is given time to reach the lock.
    """
    outcome: dict[str, Any] = {}
    started = threading.Event()

    def wait_on_it() -> None:
        try:
            started.set()
            outcome["value"] = waiter()
        except BaseException as exc:  # noqa: BLE001 - raised in the test's thread below
            outcome["error"] = exc
        finally:
            connections.close_all()

    with transaction.atomic():
        move()
        thread = threading.Thread(target=wait_on_it)
        thread.start()
        started.wait()
        thread.join(0.5)
        assert thread.is_alive(), f"the waiter did not wait on the moved row: {outcome}"
    thread.join(10)
    if "error" in outcome:
        raise outcome["error"]
    return outcome["value"]


@pytest.fixture
def running(queue: QueueClient) -> Iterator[Job]:
    enqueue_many([("tests.noop", {}, {})])
    job = queue.pull(worker_id="w")
    assert job is not None
    yield job


def test_a_heartbeat_passes_over_a_row_an_ack_holds_and_finds_it_done_after(queue, running):
    """The heartbeat never waits on another transaction's row: held up while it is held, gone after."""
    outcome: dict[str, Any] = {}

    def beat_meanwhile() -> None:
        try:
            outcome["beat"] = QueueClient().beat([running], worker_id="w")
        finally:
            connections.close_all()

    with transaction.atomic():
        queue.ack(running, worker_id="w")
        thread = threading.Thread(target=beat_meanwhile)
        thread.start()
        thread.join(10)
        assert not thread.is_alive(), "the beat waited on the ack's row"
    assert outcome["beat"].renewed == set() and outcome["beat"].held_up == {running.pk}
    assert QueueClient().beat([running], worker_id="w").held_up == set()
    assert Job.objects.get(pk=running.pk).status == "done"


def test_a_cancel_that_waited_on_an_ack_cancels_nothing(queue, running):
    changed = race(lambda: queue.ack(running, worker_id="w"), lambda: QueueClient().cancel(running.pk))
    assert not changed
    assert Job.objects.get(pk=running.pk).status == "done"


def test_an_ack_that_waited_on_a_cancel_is_refused(queue, running):
    acked = race(lambda: queue.cancel(running.pk), lambda: QueueClient().ack(running, worker_id="w"))
    assert acked is False
    assert Job.objects.get(pk=running.pk).status == "cancelled"


def test_a_dead_letter_that_waited_on_an_ack_is_not_made(queue, running):
    failed = race(
        lambda: queue.ack(running, worker_id="w"),
        lambda: QueueClient().fail(running, worker_id="w", error="too late"),
    )
    assert failed is False
    assert Job.objects.get(pk=running.pk).status == "done"


def test_a_claim_that_waited_on_a_cancel_takes_the_next_job(queue):
    first, second = enqueue_many([("tests.noop", {}, {}), ("tests.noop", {}, {})])
    # The claim skips a locked row rather than waiting: it takes the next one at once.
    with transaction.atomic():
        queue.cancel(first)
        claimed = QueueClient()

        def claim() -> Any:
            try:
                return claimed.pull(worker_id="w2")
            finally:
                connections.close_all()

        result: list[Any] = []
        thread = threading.Thread(target=lambda: result.append(claim()))
        thread.start()
        thread.join(10)
    assert result[0].pk == second.pk


def next_id() -> int:
    with connection.cursor() as cursor:
        cursor.execute(f"SELECT nextval(pg_get_serial_sequence('{tables.JOB}', 'id'))")
        return int(cursor.fetchone()[0])


def test_the_migration_keeps_every_job_and_the_id_sequence_both_ways(queue, job_factory):
    done = job_factory()
    queue.ack(queue.pull(worker_id="w"), worker_id="w")
    ready = job_factory()
    executor = MigrationExecutor(connection)
    latest = executor.loader.graph.leaf_nodes("django_jobqueue")
    try:
        executor.migrate([("django_jobqueue", "0010_dependencies")])
        assert {(job.pk, job.status) for job in Job.objects.all()} == {(done.pk, "done"), (ready.pk, "ready")}
        assert not indexes_of(tables.LIVE_JOBS)
        assert next_id() == ready.pk + 1  # a dead letter's job_id is never handed out again
    finally:
        executor = MigrationExecutor(connection)
        executor.migrate(latest)
    assert partition_of(done.pk) == tables.FINISHED_JOBS
    assert partition_of(ready.pk) == tables.LIVE_JOBS
    assert job_factory().pk == ready.pk + 2


# -- a row moved by another's UPDATE: a worker of a release before 0011, or a project's own ----------


def moved_by_update(job_id: int) -> Callable[[], None]:
    """An ack as a release before the partitions wrote it: an in-place ``UPDATE`` of the job table.

    PostgreSQL moves the row to the finished jobs' partition itself, and a
    statement that waited on the row then fails with a serialization error
    ("tuple to be locked was already moved to another partition"): the queue
    runs that statement again (``queue/conflicts.py``) and finds the job done.
    """

    def move() -> None:
        with connection.cursor() as cursor:
            cursor.execute(
                f"UPDATE {tables.JOB} SET status = 'done', finished_at = now(), locked_until = NULL "
                "WHERE id = %s",
                [job_id],
            )

    return move


def test_a_cancel_that_waited_on_a_row_moved_by_update_cancels_nothing(queue, running):
    changed = race(moved_by_update(running.pk), lambda: QueueClient().cancel_jobs([running.pk]))
    assert changed == []
    assert Job.objects.get(pk=running.pk).status == "done"


def test_an_ack_and_a_nack_that_waited_on_a_row_moved_by_update_are_refused(queue, running):
    assert race(moved_by_update(running.pk), lambda: QueueClient().ack(running, worker_id="w")) is False
    other = queue.push("tests.noop", {})
    claimed = queue.pull(worker_id="w")
    assert claimed is not None and claimed.pk == other.pk
    nacked = race(moved_by_update(other.pk), lambda: QueueClient().nack(claimed, worker_id="w", error="x"))
    assert nacked is False
    assert Job.objects.get(pk=other.pk).status == "done"


def test_an_operator_inside_its_own_transaction_keeps_it_after_a_retried_conflict(queue, running):
    """A retry inside the caller's transaction runs in a savepoint: the caller's work stands."""
    spared = queue.push("tests.noop", {})

    def cancel_in_a_transaction() -> list[Any]:
        client = QueueClient()
        with transaction.atomic():
            first = client.cancel_jobs([spared.pk])
            second = client.cancel_jobs([running.pk])
        return [first, second]

    first, second = race(moved_by_update(running.pk), cancel_in_a_transaction)
    assert [change.job_id for change in first] == [spared.pk] and second == []
    assert Job.objects.get(pk=spared.pk).status == "cancelled"


def test_the_admin_cancel_of_a_row_moved_by_update_answers_with_a_message(queue, running, operator):
    url = reverse("admin:django_jobqueue_job_cancel", args=[running.pk])
    response = race(moved_by_update(running.pk), lambda: operator.post(url, {"post": "yes"}, follow=True))
    assert response.status_code == 200
    assert Job.objects.get(pk=running.pk).status == "done"
