"""MySQL and MariaDB: what the engine and migration 0018 give there (docs/databases.md)."""

from __future__ import annotations

import pytest
from django.db import connection, transaction

from django_jobqueue import QueueClient
from django_jobqueue.models import Job

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
            cursor.execute(
                "SELECT trx_rows_locked FROM information_schema.INNODB_TRX "
                "WHERE trx_mysql_thread_id = CONNECTION_ID()"
            )
            (locked,) = cursor.fetchone()
    assert len(claimed) == 5
    # Each job taken is two records (the claim index's and the row's), and the scan's end one more.
    assert locked <= 2 * 5 + 4
