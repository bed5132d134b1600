"""Limits under races: many claimers at once never run more than a limit allows.

Each claimer thread (its own database connection) records when a job started
(after its claim committed) and when it ended (before its ack is sent): the
recorded stretch lies inside the stretch the database saw it running, so if
the recorded stretches of a key ever overlap beyond its limit, the database's
did too. ``peak`` (``tests/flow_checks.py``) is the checker; a test shows it can fail.
"""

from __future__ import annotations

import random
import threading
import time
from collections.abc import Callable

import pytest
from django.db import DatabaseError, connection
from django.test.utils import override_settings

from django_jobqueue import QueueClient, enqueue_many
from django_jobqueue.models import Job, QueueStart
from django_jobqueue.queue.ops import rounds
from tests.flow_checks import Run, peak, starts_in_any_window


def test_the_checker_sees_an_overlap():
    runs = [Run(1, "k", 0.0, 2.0), Run(2, "k", 1.0, 3.0), Run(3, "j", 0.0, 1.0), Run(4, "j", 1.0, 2.0)]
    assert peak(runs) == {"k": 2, "j": 1}
    assert starts_in_any_window([Run(i, "q", i * 0.4, 9.0) for i in range(5)], 1.0) == 3


def claim_for(
    seconds: float,
    threads: int,
    group_of: Callable[[Job], str],
    hold: tuple[float, float] = (0.0, 0.02),
    produce: Callable[[int], None] | None = None,
    failures: list[BaseException] | None = None,
) -> list[Run]:
    """``threads`` claimers on their own connections, claiming, holding and acking for ``seconds``.

    ``produce(n)``, if given, runs in a thread of its own meanwhile, called with
    n = 0, 1, 2, …: new jobs that go to the head of the claim order are what
    make two claimers' snapshots disagree on which job comes first.
    """
    runs: list[Run] = []
    failures = failures if failures is not None else []
    lock = threading.Lock()
    start_together = threading.Barrier(threads)
    deadline = time.monotonic() + seconds
    errors: list[BaseException] = []

    def claimer(number: int) -> None:
        client = QueueClient()
        rng = random.Random(number)
        worker = f"w{number}"
        try:
            start_together.wait()
            while time.monotonic() < deadline:
                try:
                    jobs = client.pull_many(worker_id=worker, limit=rng.randint(1, 4))
                except DatabaseError as exc:  # e.g. a deadlock: reported, and the claiming goes on
                    errors.append(exc)
                    continue
                started = time.monotonic()
                if not jobs:
                    time.sleep(0.002)
                    continue
                time.sleep(rng.uniform(*hold))
                ended = time.monotonic()
                with lock:
                    runs.extend(Run(job.pk, group_of(job), started, ended) for job in jobs)
                client.ack_many([(job, None) for job in jobs], worker_id=worker)
        except BaseException as exc:  # noqa: BLE001 - reported by the test below
            errors.append(exc)
        finally:
            connection.close()

    def producer() -> None:
        try:
            start_together.wait()
            n = 0
            while time.monotonic() < deadline:
                assert produce is not None
                produce(n)
                n += 1
                time.sleep(0.003)
        finally:
            connection.close()

    if produce is not None:
        start_together = threading.Barrier(threads + 1)
    pool = [threading.Thread(target=claimer, args=(n,)) for n in range(threads)]
    if produce is not None:
        pool.append(threading.Thread(target=producer))
    for thread in pool:
        thread.start()
    for thread in pool:
        thread.join()
    # The limits are checked first (by the caller, on what ran); then that nothing failed.
    failures.extend(errors)
    return runs


pytestmark = pytest.mark.django_db(transaction=True)


def test_many_claimers_never_exceed_a_keys_limit(row_locks_only):
    items = [("tests.noop", {}, {}) for _ in range(3000)]
    ids = [job.pk for job in enqueue_many(items)]
    for n, key in enumerate(["a", "b", "c", "d", "e", "f"]):
        Job.objects.filter(pk__in=ids[n::6]).update(concurrency_key=key, concurrency_limit=2 if n < 3 else 1)
    keys = ["a", "b", "c", "d", "e", "f"]

    def produce(n: int) -> None:
        # Each new job outranks every job before it (priority climbs, wrapping at 100), enqueued
        # with its key: a key set by an UPDATE after the commit would make a plain job of a
        # claim's window a keyed one by the time the claim locks it, which no producer can do.
        options = {"priority": -100 + n % 200, "concurrency_key": keys[n % 6]}
        enqueue_many([("tests.noop", {}, {**options, "concurrency_limit": 2 if n % 6 < 3 else 1})])

    failures: list[BaseException] = []
    runs = claim_for(5.0, 8, lambda job: job.concurrency_key or "", produce=produce, failures=failures)
    peaks = peak(runs)
    # Enough runs for the limits to be met many times over. MySQL's limited claims, a locked
    # row and a read of the window's counts then a claim by id, ran 178 in a loaded CI run.
    assert len(runs) > (100 if connection.vendor == "mysql" else 200)
    assert all(peaks[key] <= 2 for key in "abc"), peaks
    assert all(peaks[key] <= 1 for key in "def"), peaks
    # The limits were reached, not merely respected by a claim that took nothing.
    assert max(peaks[key] for key in "abc") == 2
    assert not failures, failures


def produce_into(queue: str) -> Callable[[int], None]:
    """A producer of jobs of ``queue``, each outranking the ones before it."""

    def produce(n: int) -> None:
        enqueue_many([("tests.noop", {}, {"queue": queue, "priority": -100 + n % 200})])

    return produce


@override_settings(JOBQUEUE={"QUEUES": {"capped": {"concurrency": 3}}})
def test_many_claimers_never_exceed_a_queue_cap(row_locks_only):
    enqueue_many([("tests.noop", {}, {"queue": "capped"}) for _ in range(2000)])
    failures: list[BaseException] = []
    runs = claim_for(4.0, 8, lambda job: job.queue, produce=produce_into("capped"), failures=failures)
    assert len(runs) > 100
    assert peak(runs)["capped"] == 3
    assert not failures, failures


@override_settings(JOBQUEUE={"QUEUES": {"rated": {"rate_limit": "20/s"}}})
def test_many_claimers_never_exceed_a_rate(row_locks_only, monkeypatch):
    # The ledger is kept whole, so that every start's own time (the database's
    # clock, taken under the flow lock) can be checked afterwards.
    keep_all = f"DELETE FROM {QueueStart._meta.db_table} WHERE queue = %s AND 1 = 0"
    real = rounds.ledger_statements
    monkeypatch.setattr(rounds, "ledger_statements", lambda *args: (real(*args)[0], keep_all))
    enqueue_many([("tests.noop", {}, {"queue": "rated"}) for _ in range(500)])
    failures: list[BaseException] = []
    runs = claim_for(3.0, 8, lambda job: job.queue, (0.0, 0.001), produce_into("rated"), failures)
    started = [row.timestamp() for row in QueueStart.objects.values_list("started_at", flat=True)]
    assert len(started) == len(runs) >= 40
    assert starts_in_any_window([Run(0, "rated", when, when) for when in started], 1.0) <= 20
    # The claimers' own records agree, give or take the moment between a claim and its record.
    assert starts_in_any_window(runs, 0.8) <= 20
    assert not failures, failures
