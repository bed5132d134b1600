"""No lock a producer, an operator or the admin takes holds up a healthy worker (PostgreSQL).

Each test takes one such lock in a transaction of the test's own and keeps it
open for three visibility timeouts, beside a real ``runworker`` whose jobs run
through the whole of it, then commits (or rolls back). Meanwhile another
connection reads the running jobs' claims every 0.1 s. Each test then counts
what a healthy worker owes: every claim renewed beat after beat and never
expired, every ack committed, and every job run exactly once, the job the
lock is on included. docs/guarantees.md has the table of the locks and the
statements of the worker they meet.

SQLite is left out: one writer holds the whole database, and a producer's
open write transaction holds up every worker's write until it ends
(docs/guarantees.md says so, and how long is safe). On MySQL an enqueue holds
the jobs its ``depends_on`` names whole (InnoDB has no lock of a row's key
alone): their claims are not renewed while it is open, and the tests check
instead what keeps them from running twice, as the guarantees' table says.
The worker's lock waits end after a second there, so that a slot's write that
meets such a row is seen to wait past one timeout and be written again.
"""

from __future__ import annotations

import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

import pytest
from django.db import connection, transaction

from django_jobqueue import QueueClient, batch, enqueue
from django_jobqueue.models import Batch, DeadLetter, Job
from django_jobqueue.queue import engine_for
from tests.jobs_for_workers import events
from tests.worker_support import WorkerProcess, database_url, wait_until

pytestmark = [pytest.mark.usefixtures("row_locks_only"), pytest.mark.slow]

VT = 1.0  # the worker's visibility timeout: a claim not renewed for a second expires
HOLD = 3 * VT  # how long each test keeps its transaction open
RUN = HOLD + 2.0  # the jobs beside run through the whole hold
QUEUE = "locks"
SAMPLE_EVERY = 0.1


@dataclass
class Held:
    """What a held transaction saw: the claims read meanwhile, and what its action returned."""

    result: Any = None
    # job id -> [(status, locked_until, the database's now)], one per read.
    claims: dict[int, list[tuple[str, datetime | None, datetime]]] = field(default_factory=dict)


def holds_named_jobs_whole() -> bool:
    """Whether an enqueue locks the whole rows of the jobs it names (MySQL), not their keys alone."""
    return not engine_for(connection).for_key_share and engine_for(connection).supports_concurrent_writers


@pytest.fixture
def worker(start_worker: Callable[..., WorkerProcess]) -> WorkerProcess:
    env = {}
    if holds_named_jobs_whole():
        env["DATABASE_URL"] = f"{database_url()}?init_command=SET+SESSION+innodb_lock_wait_timeout%3D1"
    process = start_worker(
        "--queue",
        QUEUE,
        "--concurrency",
        "8",
        "--visibility-timeout",
        str(VT),
        "--poll-interval",
        "0.1",
        env=env,
    )
    process.wait_started()
    return process


@pytest.fixture
def beside(queue: QueueClient, events_path: str, worker: WorkerProcess) -> list[Job]:
    """Three jobs running through the hold, started before it."""
    jobs = [run(queue, events_path, RUN, n) for n in range(3)]
    wait_until(lambda: started(events_path, jobs), 15, "the jobs beside to start")
    return jobs


def run(queue: QueueClient, events_path: str, seconds: float, n: int, **options: Any) -> Job:
    payload = {"path": events_path, "value": n, "seconds": seconds}
    return queue.push("workers.record", payload, queue=QUEUE, **options)


def started(events_path: str, jobs: list[Job]) -> bool:
    runs = runs_of(events_path)
    return all(runs[job.pk] for job in jobs)


def runs_of(events_path: str) -> Counter[int]:
    """How many times each job's function started."""
    return Counter(event["job"] for event in events(events_path) if event["event"] in ("start", "part"))


@pytest.fixture
def hold(other_connection: Any) -> Iterator[Callable[..., Held]]:
    def held(action: Callable[[], Any], watched: list[Job], commit: bool = True) -> Held:
        """Run ``action`` in a transaction kept open ``HOLD`` seconds, reading ``watched``'s claims."""
        seen = Held()
        ids = [job.pk for job in watched]
        now_sql = engine_for(other_connection).now
        with transaction.atomic():
            seen.result = action()
            end = time.monotonic() + HOLD
            while time.monotonic() < end:
                with other_connection.cursor() as cursor:
                    cursor.execute(
                        f"SELECT id, status, locked_until, {now_sql} FROM django_jobqueue_job "
                        f"WHERE id IN ({', '.join(['%s'] * len(ids))})",
                        ids,
                    )
                    for job_id, status, until, now in cursor.fetchall():
                        seen.claims.setdefault(job_id, []).append((status, until, now))
                time.sleep(SAMPLE_EVERY)
            transaction.set_rollback(not commit)
        return seen

    yield held


def assert_renewed(seen: Held, jobs: list[Job]) -> None:
    """Each job's claim was current at every read, and its deadline moved on at each timeout at least."""
    for job in jobs:
        reads = seen.claims[job.pk]
        expired = [
            (status, until, now) for status, until, now in reads if status != "running" or until <= now
        ]
        assert not expired, f"job {job.pk}'s claim lapsed while the transaction was held: {expired[:3]}"
        renewals = len({until for _status, until, _now in reads})
        assert renewals >= HOLD / VT, f"job {job.pk}'s claim was renewed {renewals} times in {HOLD}s"


def assert_lapsed(seen: Held, job: Job) -> None:
    """``job``'s claim was read past its deadline while the transaction was held, still running."""
    reads = seen.claims[job.pk]
    assert all(status == "running" for status, _until, _now in reads)
    assert any(until <= now for _status, until, now in reads), f"job {job.pk}'s claim never lapsed"


def assert_each_ran_once(events_path: str, jobs: list[Job], timeout: float = 20.0) -> None:
    """Wait until ``jobs`` are done (acked), then check each ran exactly once."""
    ids = [job.pk for job in jobs]
    # Done, or deleted at the ack under KEEP_COMPLETED = 0.
    unfinished = Job.objects.filter(pk__in=ids).exclude(status="done")
    wait_until(lambda: not unfinished.exists(), timeout, "the acks")
    runs = runs_of(events_path)
    assert {job_id: runs[job_id] for job_id in ids} == dict.fromkeys(ids, 1)


def finished(job: Job) -> str:
    return Job.objects.get(pk=job.pk).status


# -- producers ---------------------------------------------------------------------


def test_an_enqueue_naming_running_jobs(queue, events_path, beside, hold):
    """The dependencies run on and beat their claims; the short one's ack waits for the commit alone.

    On MySQL the claim of the long one named is not renewed while the enqueue
    is open: its heartbeat passes it over and names it held, and no tick
    hands it back while its worker beats.
    """
    short = run(queue, events_path, 0.5, 10)
    wait_until(lambda: started(events_path, [short]), 10, "the short job to start")
    seen = hold(
        lambda: enqueue(
            "workers.record", {"path": events_path, "value": 11}, queue=QUEUE, depends_on=[short, beside[0]]
        ),
        beside,
    )
    if holds_named_jobs_whole():
        assert_renewed(seen, beside[1:])
        assert_lapsed(seen, beside[0])
    else:
        assert_renewed(seen, beside)
    dependent = seen.result
    assert_each_ran_once(events_path, [*beside, short, dependent])


def test_an_enqueue_naming_a_job_that_fails_meanwhile(queue, events_path, beside, hold, worker):
    """The job's own slot writes its retry: at once, or after the commit on MySQL, where it waits past
    a lock timeout and writes it again. Its attempt is recorded once, and it runs once more, then the
    job that depends on it."""
    failing = queue.push("workers.slow_retry", {"path": events_path, "seconds": 0.5}, queue=QUEUE)
    wait_until(lambda: started(events_path, [failing]), 10, "the failing job to start")
    seen = hold(
        lambda: enqueue(
            "workers.record", {"path": events_path, "value": 11}, queue=QUEUE, depends_on=[failing]
        ),
        beside,
    )
    assert_renewed(seen, beside)
    if holds_named_jobs_whole():
        worker.wait_for_log(r"another transaction holds its row; its outcome waits for it", 1)
    assert_each_ran_once(events_path, [*beside, seen.result])
    wait_until(lambda: finished(failing) == "done", 10, "the failing job's second attempt")
    assert runs_of(events_path)[failing.pk] == 2
    history = Job.objects.get(pk=failing.pk).attempt_history
    assert [(entry["attempt"], entry["outcome"]) for entry in history] == [(1, "retry")]


def test_an_enqueue_naming_a_job_before_it_is_due(queue, events_path, beside, hold):
    """A job the enqueue names becomes due while the enqueue is open: it is claimed and runs meanwhile."""
    soon = run(queue, events_path, 0.2, 10, delay=0.5)
    seen = hold(
        lambda: enqueue("workers.record", {"path": events_path, "value": 11}, queue=QUEUE, depends_on=[soon]),
        [*beside, soon],
    )
    assert_renewed(seen, beside)
    statuses = [status for status, _until, _now in seen.claims[soon.pk]]
    if holds_named_jobs_whole():
        # MySQL: the claims pass its row over until the enqueue commits; it runs after.
        assert set(statuses) == {"ready"}, statuses
    else:
        assert "running" in statuses, f"the job named was not claimed while the enqueue was open: {statuses}"
    assert_each_ran_once(events_path, [*beside, soon, seen.result])


def test_an_enqueue_naming_a_dead_letter(queue, events_path, beside, hold):
    failed = queue.push("workers.fail_now", {"reason": "no"}, queue="elsewhere")
    claimed = queue.pull("elsewhere", worker_id="me")
    assert claimed is not None and queue.fail(claimed, worker_id="me", error="no")
    seen = hold(
        lambda: enqueue("workers.record", {"path": events_path}, queue=QUEUE, depends_on=[failed]), beside
    )
    assert_renewed(seen, beside)
    assert_each_ran_once(events_path, beside)
    assert finished(seen.result) == "waiting" and DeadLetter.objects.filter(job_id=failed.pk).exists()


def test_a_batch_block_and_a_unique_key_it_adopts(queue, events_path, beside, hold):
    """The block's transaction holds the ready job its unique key adopted: it runs once, after."""
    adopted = run(queue, events_path, 0.1, 10, unique_key="adopted", delay=0.3)

    def block() -> Any:
        with batch(on_finish="workers.batch_done", payload={"path": events_path}) as opened:
            run(queue, events_path, 0.1, 11)
            assert run(queue, events_path, 0.1, 12, unique_key="adopted").pk == adopted.pk
        return opened

    seen = hold(block, beside)
    assert_renewed(seen, beside)
    parts = list(Job.objects.filter(batch_id=seen.result.id))
    assert adopted.pk in {job.pk for job in parts}
    assert_each_ran_once(events_path, [*beside, *parts])
    wait_until(lambda: Batch.objects.get(pk=seen.result.id).callback_job_id, 10, "the batch's callback")


def test_an_enqueue_holding_a_unique_key(queue, events_path, beside, hold):
    seen = hold(lambda: run(queue, events_path, 0.1, 10, unique_key="held"), beside)
    assert_renewed(seen, beside)
    assert_each_ran_once(events_path, [*beside, seen.result])


def test_an_enqueue_that_loses_a_race_for_a_unique_key(queue, events_path, beside, hold):
    """Its insert meets the winner's row as the winner commits: it returns the winner's job, which runs
    once and is acked while the loser's transaction is still open. On MySQL the refused insert keeps a
    shared lock on the winner's key until the loser commits: the round passes the winner's ack over
    (rather than wait on it with every other ack), and writes it after."""
    inserted, commit = threading.Event(), threading.Event()
    won: list[Job] = []

    def winner() -> None:
        try:
            with transaction.atomic():
                won.append(run(queue, events_path, 0.2, 10, unique_key="raced"))
                inserted.set()
                commit.wait(10)
        finally:
            connection.close()

    thread = threading.Thread(target=winner)
    thread.start()
    assert inserted.wait(10)
    threading.Timer(0.5, commit.set).start()
    seen = hold(lambda: run(queue, events_path, 0.1, 11, unique_key="raced"), [*beside, *won])
    thread.join(10)
    assert seen.result.pk == won[0].pk
    reads = seen.claims[won[0].pk]
    statuses = [status for status, _until, _now in reads]
    if engine_for(connection).live_key:
        # MySQL: its ack passed over, it stays running, and its claim is renewed, until the loser commits.
        running = reads[statuses.index("running") :]
        assert all(status == "running" and until > now for status, until, now in running), running
    else:
        assert "done" in statuses, f"the winner was not acked while the loser was open: {statuses}"
    assert_renewed(seen, beside)
    assert_each_ran_once(events_path, [*beside, won[0]])


# -- operators: QueueClient's methods, which the admin's actions and ``manage.py jobqueue`` call ----


@pytest.mark.parametrize("commit", [True, False], ids=["committed", "rolled-back"])
def test_a_cancel_of_a_running_job(queue, events_path, beside, hold, commit):
    """Committed, the job ends cancelled; rolled back, its claim was kept and it is acked: once either way."""
    target = beside[0]
    seen = hold(lambda: QueueClient().cancel_jobs([target.pk]), beside[1:], commit=commit)
    assert [change.job_id for change in seen.result] == [target.pk]
    assert_renewed(seen, beside[1:])
    if commit:
        assert_each_ran_once(events_path, beside[1:])
        assert finished(target) == "cancelled" and runs_of(events_path)[target.pk] == 1
    else:
        assert_each_ran_once(events_path, beside)


def test_a_pause_and_a_resume(queue, events_path, beside, hold):
    QueueClient().pause_queue("other")
    seen = hold(lambda: (QueueClient().pause_queue("another"), QueueClient().resume_queue("other")), beside)
    assert_renewed(seen, beside)
    assert_each_ran_once(events_path, beside)


def test_a_retry_now(queue, events_path, beside, hold):
    later = run(queue, events_path, 0.1, 10, delay=3600)
    seen = hold(lambda: QueueClient().retry_jobs_now([later.pk]), beside)
    assert_renewed(seen, beside)
    assert_each_ran_once(events_path, [*beside, later])


def test_a_cancel_of_a_batch_job_beside_acks_of_its_others(queue, events_path, worker, hold):
    """The batch's others end during the hold: their acks update its row, which the cancel leaves alone."""
    with batch(on_finish="workers.batch_done", payload={"path": events_path}) as opened:
        long_ones = [run(queue, events_path, RUN, n) for n in range(2)]
        short_ones = [run(queue, events_path, 1.0, n) for n in range(10, 13)]
        left = run(queue, events_path, 0.1, 20, delay=3600)
    wait_until(lambda: started(events_path, [*long_ones, *short_ones]), 15, "the batch's jobs to start")
    seen = hold(lambda: QueueClient().cancel_jobs([left.pk]), long_ones)
    assert_renewed(seen, long_ones)
    assert_each_ran_once(events_path, [*long_ones, *short_ones])
    row = wait_until(lambda: Batch.objects.filter(pk=opened.id, callback_job_id__isnull=False).first(), 10)
    assert (row.done, row.cancelled) == (5, 1)


def test_a_retry_and_a_delete_of_dead_letters(queue, events_path, beside, hold):
    letters = []
    for n in range(2):
        queue.push("workers.fail_now", {"reason": f"no {n}"}, queue="elsewhere")
        claimed = queue.pull("elsewhere", worker_id="me")
        assert claimed is not None and queue.fail(claimed, worker_id="me", error="no")
        letters.append(DeadLetter.objects.get(job_id=claimed.pk))

    def operate() -> Any:
        client = QueueClient()
        return client.retry_dead_letters([letters[0]]), client.delete_dead_letters([letters[1]])

    seen = hold(operate, beside)
    assert seen.result == (1, 1)
    assert_renewed(seen, beside)
    assert_each_ran_once(events_path, beside)


def test_a_cancel_of_a_waiting_dependent_beside_its_dependencys_ack(queue, events_path, beside, hold):
    """The dependency ends during the hold: its ack releases one dependent and passes the held one over."""
    dependency = run(queue, events_path, 1.0, 10)
    wait_until(lambda: started(events_path, [dependency]), 10, "the dependency to start")
    cancelled = enqueue(
        "workers.record", {"path": events_path, "value": 11}, queue=QUEUE, depends_on=[dependency]
    )
    released = enqueue(
        "workers.record", {"path": events_path, "value": 12}, queue=QUEUE, depends_on=[dependency]
    )
    seen = hold(lambda: QueueClient().cancel_jobs([cancelled.pk]), beside)
    assert_renewed(seen, beside)
    assert_each_ran_once(events_path, [*beside, dependency, released])
    assert finished(cancelled) == "cancelled" and runs_of(events_path)[cancelled.pk] == 0
