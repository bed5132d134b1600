"""MySQL and MariaDB: what the engine and migration 0018 give there (docs/databases.md)."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from datetime import timedelta
from functools import partial
from typing import Any

import pytest
from django.db import connection, transaction
from django.db.models import F
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from django_jobqueue import QueueClient, enqueue_many, stats
from django_jobqueue.admin.filters import StatusFilter
from django_jobqueue.column_values import distinct_values
from django_jobqueue.models import DeadLetter, Job
from tests.racing import run_together

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture(autouse=True)
def mysql_only() -> None:
    if connection.vendor != "mysql":
        pytest.skip("MySQL and MariaDB only")


def test_names_are_compared_byte_for_byte(queue: QueueClient) -> None:
    """'Emails' and 'emails' are two queues, and 'k' and 'k ' two unique keys, as elsewhere."""
    queue.push("tests.noop", {}, queue="Emails")
    queue.push("tests.noop", {}, queue="emails")
    first = queue.push("tests.noop", {}, unique_key="k")
    second = queue.push("tests.noop", {}, unique_key="k ")
    assert first.pk != second.pk
    assert [job.queue for job in queue.claim("w", [("emails", 5)], 5)] == ["emails"]


def test_a_payload_with_an_emoji_survives(queue: QueueClient) -> None:
    job = queue.push("tests.noop", {"text": "sent \U0001f680 to 日本"})
    assert Job.objects.get(pk=job.pk).payload == {"text": "sent \U0001f680 to 日本"}


def test_the_live_key_is_unique_while_the_job_is_live_and_free_after(queue: QueueClient) -> None:
    first = queue.push("tests.noop", {}, unique_key="once")
    assert queue.push("tests.noop", {}, unique_key="once").pk == first.pk
    (claimed,) = queue.claim("w", None, 1)
    assert queue.ack(claimed, worker_id="w")
    assert queue.push("tests.noop", {}, unique_key="once").pk != first.pk


@pytest.mark.parametrize("queues", [[("due", 5)], None], ids=["one-queue", "every-queue"])
def test_a_claim_locks_the_jobs_it_takes_and_hardly_any_other(
    queue: QueueClient, queues: list[tuple[str, int]] | None
) -> None:
    """InnoDB locks every record a locking read scans: jobs due later, and other queues', are not scanned.

    The later jobs come first in claim order (a higher priority), so that a read
    of the claim index that did not stop at run_at in each rank would scan them all.
    """
    queue.push_many([("tests.noop", {}, {"queue": "due"})] * 50)
    queue.push_many([("tests.noop", {}, {"queue": "due", "delay": 3600, "priority": 10})] * 500)
    queue.push_many([("tests.noop", {}, {"queue": "other", "delay": 3600})] * 500)
    with connection.cursor() as cursor:
        cursor.execute("ANALYZE TABLE django_jobqueue_job")  # as InnoDB's own statistics would say
        cursor.fetchall()
        with transaction.atomic():
            claimed = queue.claim("w", queues, 5)
            # InnoDB serves its transactions' table from a cache refreshed every 0.1 s at most.
            time.sleep(0.15)
            cursor.execute(
                "SELECT trx_rows_locked FROM information_schema.INNODB_TRX "
                "WHERE trx_mysql_thread_id = CONNECTION_ID()"
            )
            (locked,) = cursor.fetchone()
    assert len(claimed) == 5
    # Each job taken is two records (the claim index's and the row's), and the scan's end one more.
    assert locked <= 2 * 5 + 4


def test_batches_of_the_same_keys_in_opposite_orders_make_one_job_a_key(queue: QueueClient) -> None:
    """InnoDB checks a unique key under a lock on its index record: two inserts of the same keys in
    opposite orders deadlock. The enqueue is run again, and each key ends with one live job."""
    keys = [f"k{n}" for n in range(400)]
    orders = [keys, keys[::-1], keys[::2] + keys[1::2], keys[1::2][::-1] + keys[::2]]
    for round_ in range(5):
        batches = [
            [("tests.noop", {"r": round_}, {"unique_key": f"{round_}-{key}"}) for key in order]
            for order in orders
        ]
        results = run_together([partial(enqueue_many, batch) for batch in batches])
        by_key: dict[str, set[int]] = {}
        for jobs in results:
            for job in jobs:
                by_key.setdefault(str(job.unique_key), set()).add(job.pk)
        assert all(len(ids) == 1 for ids in by_key.values()), by_key
    assert Job.objects.count() == 5 * len(keys)


def test_a_deadlock_inside_the_callers_transaction_reaches_the_caller(queue: QueueClient) -> None:
    """InnoDB rolled the whole transaction back: a try again in a savepoint cannot be, so the error
    goes to the caller, whose transaction it was (the queue's own transactions are tried again)."""
    from django.db import OperationalError

    from django_jobqueue.queue.conflicts import run_retrying

    calls = []

    def deadlocked() -> None:
        calls.append(1)
        with connection.cursor() as cursor:
            cursor.execute("SIGNAL SQLSTATE '40001' SET MYSQL_ERRNO = 1213, MESSAGE_TEXT = 'Deadlock found'")

    with pytest.raises(OperationalError), transaction.atomic():
        run_retrying("default", deadlocked)
    assert calls == [1]
    calls.clear()
    with pytest.raises(OperationalError):
        run_retrying("default", deadlocked)
    assert len(calls) == 8  # conflicts.ATTEMPTS, outside any transaction of the caller's


def _refused_copy_of(other: Any, job: Job) -> None:
    """In ``other``'s open transaction, an insert of ``job``'s row again that its unique key refuses:
    InnoDB keeps the shared lock its duplicate check took on the key until that transaction ends."""
    columns = [field.column for field in Job._meta.concrete_fields if field.column != "id"]
    listed = ", ".join(columns)
    with other.cursor() as cursor:
        cursor.execute("START TRANSACTION")
        with pytest.raises(Exception, match="1062"):
            cursor.execute(
                f"INSERT INTO django_jobqueue_job ({listed}) "
                f"SELECT {listed} FROM django_jobqueue_job WHERE id = %s",
                [job.pk],
            )


@pytest.fixture
def brief_lock_waits() -> Iterator[None]:
    """This connection's lock waits end after a second: a statement that waits on the key fails fast."""
    with connection.cursor() as cursor:
        cursor.execute("SET SESSION innodb_lock_wait_timeout = 1")
    yield
    with connection.cursor() as cursor:
        cursor.execute("SET SESSION innodb_lock_wait_timeout = DEFAULT")


def test_an_ack_passes_over_a_unique_key_a_refused_insert_holds(queue, other_connection, brief_lock_waits):
    held = queue.push("tests.noop", {}, unique_key="k")
    free = queue.push("tests.noop", {})
    claimed = queue.claim("w", None, 2)
    _refused_copy_of(other_connection, held)
    acked = queue.ack_many([(job, None) for job in claimed], worker_id="w")
    assert acked == {(free.pk, next(job.claim_token for job in claimed if job.pk == free.pk))}
    assert Job.objects.get(pk=held.pk).status == "running"
    other_connection.rollback()
    assert {job_id for job_id, _token in queue.ack_many([(job, None) for job in claimed], worker_id="w")} == {
        held.pk
    }
    assert Job.objects.get(pk=held.pk).status == "done"


def test_a_tick_passes_over_a_spent_claim_whose_unique_key_a_refused_insert_holds(
    queue, other_connection, brief_lock_waits
):
    held = queue.push("tests.noop", {}, unique_key="k", max_attempts=1)
    queue.claim("w", None, 1, visibility_timeout=0.01)
    time.sleep(0.05)
    _refused_copy_of(other_connection, held)
    assert queue.tick_timeouts() == 0  # passed over
    assert Job.objects.get(pk=held.pk).status == "running"
    other_connection.rollback()
    assert queue.tick_timeouts() == 1
    assert not Job.objects.filter(pk=held.pk).exists() and DeadLetter.objects.filter(job_id=held.pk).exists()


# -- the operators' figures read indexes, not the table (InnoDB's plans) ---------------


@pytest.fixture
def lived_in(transactional_db: None) -> None:
    """6,000 jobs over three queues, most done, a third of the ready ones with a key, a few running."""
    enqueue_many([("tests.noop", {"i": i}, {"queue": f"q{i % 3}", "priority": i % 7}) for i in range(6000)])
    ids = list(Job.objects.order_by("id").values_list("id", flat=True))  # MariaDB: no LIMIT in a subquery
    Job.objects.filter(pk__in=ids[:4500]).update(status="done")
    Job.objects.filter(pk__in=ids[4500:5000]).update(concurrency_key=F("queue"), concurrency_limit=2)
    in_a_while = timezone.now() + timedelta(seconds=30)
    Job.objects.filter(pk__in=ids[4500:4540]).update(status="running", locked_until=in_a_while)
    with connection.cursor() as cursor:
        cursor.execute("ANALYZE TABLE django_jobqueue_job")
        cursor.fetchall()


def table_scans(run: Callable[[], object], wanted: str) -> list[tuple[str, list[Any]]]:
    """Each statement ``run`` makes whose SQL holds ``wanted``, with its plan's rows that read the job
    table whole (``type`` ALL, or a whole index: ``index``)."""
    with CaptureQueriesContext(connection) as queries:
        run()
    found = []
    with connection.cursor() as cursor:
        for sql in [q["sql"] for q in queries.captured_queries if wanted in q["sql"]]:
            cursor.execute(f"EXPLAIN {sql}")
            names = [column[0] for column in cursor.description]
            rows = [dict(zip(names, row, strict=True)) for row in cursor.fetchall()]
            whole = [
                row
                for row in rows
                if row["table"] == "django_jobqueue_job" and row["type"] in ("ALL", "index")
            ]
            found.append((sql, whole))
    assert found, f"no statement with {wanted!r}"
    return found


def test_the_overviews_counts_read_indexes(lived_in) -> None:
    for sql, whole in table_scans(lambda: stats.overview(minutes=False), "django_jobqueue_job"):
        assert not whole, (sql, whole)
    overview = stats.overview(minutes=False)
    assert (overview.total.ready, overview.total.running) == (1460, 40)


@pytest.mark.parametrize("status", ["due", "scheduled", "ready", "running"])
def test_the_admin_status_filters_read_indexes(lived_in, status) -> None:
    def count() -> int:
        chosen = StatusFilter(None, {"status": [status]}, Job, None).filter(Job.objects.all(), status)
        return chosen.order_by()[:10_001].count()

    for sql, whole in table_scans(count, "django_jobqueue_job"):
        assert not whole, (sql, whole)


def test_the_busiest_keys_read_an_index(lived_in) -> None:
    now = stats.database_now("default")
    for sql, whole in table_scans(lambda: stats.busiest_keys("default", now), "'running'"):
        assert not whole, (sql, whole)
    assert sum(key.running for key in stats.busiest_keys("default", now)) == 40


@pytest.mark.parametrize("field", ["queue", "name"])
def test_the_admin_filters_choices_are_found_by_seeks(lived_in, field) -> None:
    """One probe a value (a recursive statement's correlated probe reads MariaDB's whole index)."""
    found: list[str] = []
    for sql, whole in table_scans(lambda: found.extend(distinct_values(Job, field, "default")), "MIN("):
        assert not whole, (sql, whole)
    assert found == sorted(set(Job.objects.values_list(field, flat=True)))


@pytest.mark.parametrize("term", ["q1", "an id", "no-such-thing"])
def test_the_admins_search_reads_indexes(lived_in, term) -> None:
    """A name, a key and an id, OR'ed: read by the indexes, merged, not by a scan of the table.
    (A name that every row has is read best by the primary key backwards, to the page's end.)"""
    from django.contrib.admin.sites import site

    job_admin = site._registry[Job]
    if term == "an id":
        term = str(Job.objects.order_by("pk").values_list("pk", flat=True)[100])

    def search() -> int:
        found, _ = job_admin.get_search_results(None, Job.objects.order_by("-pk"), term)
        return len(found[:100])

    for sql, whole in table_scans(search, "django_jobqueue_job"):
        assert not whole, (sql, whole)
