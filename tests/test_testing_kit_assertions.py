"""``assert_enqueued``, ``assert_not_enqueued`` and ``enqueued``: the testing kit's reads of the queue.

They run inside the test's own transaction (the plain ``db`` fixture and
``TestCase``): the rows a test enqueued are there, uncommitted.
"""

from __future__ import annotations

import re

import pytest
from django.test import TestCase

from django_jobqueue import QueueClient, enqueue
from django_jobqueue.models import Job
from django_jobqueue.testing import assert_enqueued, assert_not_enqueued, enqueued
from django_jobqueue.testing.assertions import SHOWN_JOBS
from tests.jobs_for_testing_kit import nightly_report, send_receipt

pytestmark = pytest.mark.django_db


def failure(call, *args, **kwargs) -> str:
    """The message of the ``AssertionError`` that ``call`` raises."""
    with pytest.raises(AssertionError) as failed:
        call(*args, **kwargs)
    return str(failed.value)


def test_a_job_enqueued_in_the_tests_transaction_matches_by_name_queue_and_args():
    job = send_receipt.enqueue(order_id=7, lines=[1, 2])

    assert assert_enqueued("kit.send_receipt", args={"order_id": 7}, queue="mail") == [job]
    assert_enqueued("kit.send_receipt")
    assert_enqueued(queue="mail")
    assert_enqueued(args={"order_id": 7, "lines": [1, 2]})
    assert_enqueued()


def test_a_job_function_stands_for_its_name():
    send_receipt.enqueue(order_id=7)
    send_receipt.using(queue="urgent").enqueue(order_id=8)

    assert_enqueued(send_receipt, args={"order_id": 7})
    assert_enqueued(send_receipt.using(queue="urgent"), queue="urgent", args={"order_id": 8})
    assert [job.payload["order_id"] for job in enqueued(send_receipt)] == [7, 8]
    with pytest.raises(TypeError, match="name must be a job's name or its @job function, not int"):
        assert_enqueued(7)


def test_args_match_the_top_level_of_the_payload_and_nested_values_whole():
    enqueue("kit.send_receipt", {"order_id": 7, "lines": [{"sku": "a", "qty": 1}]})

    assert_enqueued(args={"lines": [{"sku": "a", "qty": 1}]})
    assert_enqueued(args={"lines": ({"sku": "a", "qty": 1},)}), "compared as stored: a tuple is a JSON list"
    message = failure(assert_enqueued, args={"lines": [{"sku": "a"}]})
    # (PostgreSQL's jsonb orders an object's keys its own way.)
    assert re.search(r"differs: payload\['lines'\] is \[\{'\w+': .+, '\w+': .+\}\]$", message), (
        "a nested dict is no subset"
    )
    assert "no 'copy' in payload" in failure(assert_enqueued, args={"copy": False})
    with pytest.raises(TypeError, match="args must be JSON, as a payload is"):
        assert_enqueued(args={"at": object()})


def test_a_miss_lists_what_is_enqueued_closest_first():
    receipt = send_receipt.enqueue(order_id=8)
    report = nightly_report.enqueue()
    urgent = send_receipt.using(queue="urgent").enqueue(order_id=7)

    message = failure(assert_enqueued, "kit.send_receipt", args={"order_id": 7}, queue="mail")

    lines = message.splitlines()
    assert lines[0] == (
        "no enqueued job matches name='kit.send_receipt', queue='mail', args={'order_id': 7}."
    )
    assert lines[1] == "Enqueued (3 jobs, ready or waiting), closest first:"
    assert lines[2:] == [
        f"  kit.send_receipt queue='mail' payload={{'order_id': 8}} [#{receipt.pk} ready] "
        "differs: payload['order_id'] is 8",
        f"  kit.send_receipt queue='urgent' payload={{'order_id': 7}} [#{urgent.pk} ready] differs: queue",
        f"  kit.report queue='default' payload={{}} [#{report.pk} ready] "
        "differs: name; queue; no 'order_id' in payload",
    ]


def test_a_miss_with_nothing_enqueued_says_so():
    assert failure(assert_enqueued, "kit.send_receipt") == (
        "no enqueued job matches name='kit.send_receipt'.\nNothing is enqueued (no job is ready or waiting)."
    )


def test_a_long_listing_is_cut():
    QueueClient().push_many([("kit.report", {}, {}) for _ in range(SHOWN_JOBS + 5)])

    message = failure(assert_enqueued, "kit.send_receipt")

    listed = [line for line in message.splitlines() if line.startswith("  kit.report")]
    assert len(listed) == SHOWN_JOBS
    assert message.endswith("  … and 5 more")


def test_count_checks_how_many_match():
    send_receipt.enqueue(order_id=7)
    send_receipt.enqueue(order_id=7, copy=True)
    send_receipt.enqueue(order_id=8)

    assert len(assert_enqueued(send_receipt, args={"order_id": 7}, count=2)) == 2
    assert_enqueued(send_receipt, count=3)
    assert_enqueued("kit.report", count=0)
    message = failure(assert_enqueued, send_receipt, args={"order_id": 7}, count=1)
    assert message.startswith(
        "expected 1 job matching name='kit.send_receipt', args={'order_id': 7}, found 2.\n"
    )
    assert message.count(" matches") == 2, "the matching jobs are listed, first"
    for bad in (True, 1.0):
        with pytest.raises(TypeError, match="count must be an int"):
            assert_enqueued(send_receipt, count=bad)
    with pytest.raises(ValueError, match="count must be 0 or more, got -1"):
        assert_enqueued(send_receipt, count=-1)


def test_waiting_jobs_are_enqueued_running_done_and_dead_ones_are_not():
    queue = QueueClient()
    first = send_receipt.enqueue(order_id=1)
    waiting = send_receipt.using(depends_on=[first]).enqueue(order_id=2)
    done = send_receipt.enqueue(order_id=3)
    dead = send_receipt.enqueue(order_id=4)
    running = send_receipt.enqueue(order_id=5)
    claimed = {job.pk: job for job in queue.pull_many(worker_id="w", limit=10)}
    assert sorted(claimed) == [first.pk, done.pk, dead.pk, running.pk], "the waiting job is not claimed"
    assert queue.release(claimed[first.pk], worker_id="w")
    assert queue.ack(claimed[done.pk], worker_id="w")
    assert queue.fail(claimed[dead.pk], worker_id="w", error="boom")
    assert Job.objects.get(pk=running.pk).status == "running"

    assert [job.pk for job in enqueued()] == [first.pk, waiting.pk]
    assert_enqueued(args={"order_id": 2})
    assert_not_enqueued(args={"order_id": 3})
    assert_not_enqueued(args={"order_id": 4})
    assert_not_enqueued(args={"order_id": 5})
    message = failure(assert_enqueued, send_receipt, args={"order_id": 3})
    assert message.endswith("\nNot counted, as not ready or waiting: 1 done."), message


def test_assert_not_enqueued_lists_what_matches():
    assert_not_enqueued(send_receipt)
    job = send_receipt.enqueue(order_id=7)
    nightly_report.enqueue()
    assert_not_enqueued(send_receipt, args={"order_id": 8})
    assert_not_enqueued(send_receipt, queue="urgent")

    message = failure(assert_not_enqueued, send_receipt)

    assert message.splitlines()[:3] == [
        "expected no enqueued job matching name='kit.send_receipt', found 1.",
        "Enqueued (2 jobs, ready or waiting), closest first:",
        f"  kit.send_receipt queue='mail' payload={{'order_id': 7}} [#{job.pk} ready] matches",
    ]


def test_enqueued_filters_by_name_and_queue_oldest_first():
    a = send_receipt.enqueue(order_id=1)
    b = nightly_report.enqueue()
    c = send_receipt.using(queue="urgent").enqueue(order_id=2)

    assert enqueued() == [a, b, c]
    assert enqueued("kit.send_receipt") == [a, c]
    assert enqueued(send_receipt, queue="urgent") == [c]
    assert enqueued(queue="nowhere") == []


def test_a_long_payload_is_cut_in_the_listing():
    enqueue("kit.send_receipt", {"order_id": 1, "lines": ["x" * 500]})

    message = failure(assert_enqueued, "kit.report")

    [line] = [line for line in message.splitlines() if line.startswith("  kit.send_receipt")]
    assert re.search(r" payload=\{.*'x+… \[#", line)
    assert len(line) < 300


class InsideATestCase(TestCase):
    """The same reads from a ``django.test.TestCase``, whose transaction never commits."""

    def test_a_match_and_a_miss(self) -> None:
        send_receipt.enqueue(order_id=7)

        assert_enqueued(send_receipt, args={"order_id": 7}, queue="mail", count=1)
        with self.assertRaisesMessage(AssertionError, "differs: payload['order_id'] is 7"):
            assert_enqueued(send_receipt, args={"order_id": 8})
        assert_not_enqueued("kit.report")
        self.assertEqual([job.payload for job in enqueued()], [{"order_id": 7}])

    def test_rows_of_the_previous_test_are_gone(self) -> None:
        assert_not_enqueued()
        self.assertEqual(enqueued(), [])
