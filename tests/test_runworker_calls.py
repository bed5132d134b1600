"""``runworker`` called from code: ``call_command``'s keyword options, and a caller's open transaction."""

from __future__ import annotations

import time

import pytest
from django.core.management import CommandError, call_command
from django.db import transaction
from django.test import TestCase

from django_jobqueue import QueueClient
from django_jobqueue.models import Job, Worker
from tests import jobs_for_workers  # noqa: F401  (registers workers.record in this process)

OPEN_TRANSACTION = "runworker cannot run inside an open transaction on database 'default'"


def test_keyword_options_are_read_as_the_command_line_reads_them(queue, tmp_path):
    path = str(tmp_path / "events.jsonl")
    emails = queue.push("workers.record", {"path": path, "value": "email"}, queue="emails")
    weighted = queue.push("workers.record", {"path": path, "value": "weighted"}, queue="a:b")
    sms = queue.push("workers.record", {"path": path, "value": "sms"}, queue="sms")

    call_command(
        "runworker", burst=True, queue=["emails", "a:b:2"], concurrency="1:2", poll_interval=0.2, verbosity=0
    )

    done = set(Job.objects.filter(status="done").values_list("pk", flat=True))
    assert done == {emails.pk, weighted.pk}, "served the queues named, and only those"
    assert Job.objects.get(pk=sms.pk).status == "ready"


def test_one_queue_may_be_named_without_a_list(queue, tmp_path):
    job = queue.push("workers.record", {"path": str(tmp_path / "events.jsonl")}, queue="emails")
    other = queue.push("workers.record", {"path": str(tmp_path / "events.jsonl")}, queue="sms")
    call_command("runworker", burst=True, queue="emails", concurrency=1, verbosity=0)
    assert Job.objects.get(pk=job.pk).status == "done"
    assert Job.objects.get(pk=other.pk).status == "ready"


@pytest.mark.parametrize(
    ("options", "message"),
    [
        pytest.param({"queue": ["emails:x"]}, "--queue: the weight of queue 'emails'", id="queue-weight"),
        pytest.param({"queue": 5}, r"--queue: must be a list of queue names", id="queue-number"),
        pytest.param({"queue": [""]}, "--queue: ", id="queue-empty"),
        pytest.param({"pool": "greenlets"}, "--pool: must be one of threads, processes", id="pool"),
        pytest.param({"log_format": "xml"}, "--log-format: must be one of text, json", id="log-format"),
        pytest.param({"no_schedules": "yes"}, "--no-schedules: must be True or False", id="flag"),
        pytest.param({"concurrency": 0}, "--concurrency: must be 1 or more", id="concurrency-0"),
        pytest.param({"concurrency": "8:2"}, "--concurrency: MIN must not be above MAX", id="range"),
        pytest.param({"poll_interval": [1]}, "--poll-interval: must be text or a number", id="list"),
        pytest.param({"poll_interval": 0}, "--poll-interval: .*from 0.01 to 86400 seconds", id="poll-0"),
        pytest.param({"shutdown_timeout": "soon"}, "--shutdown-timeout: must be a number", id="shutdown"),
        pytest.param({"max_jobs": 2.5}, "--max-jobs: must be a whole number", id="max-jobs"),
        pytest.param({"metrics_port": 70000}, "--metrics-port: must be a TCP port", id="port"),
        pytest.param({"database": "nowhere"}, "--database: 'nowhere' is not a key", id="database"),
    ],
)
def test_a_keyword_option_it_does_not_take_is_refused_with_the_option_named(queue, options, message):
    started = time.monotonic()
    with pytest.raises(CommandError, match=message):
        call_command("runworker", burst=True, verbosity=0, **options)
    assert time.monotonic() - started < 5
    assert not Worker.objects.exists(), "refused before it started"


def test_an_unknown_keyword_is_refused_by_django(queue):
    with pytest.raises(TypeError, match="Unknown option.*queus"):
        call_command("runworker", burst=True, queus=["emails"])


# -- inside a caller's transaction -------------------------------------------------------


def test_it_refuses_to_run_inside_pytest_djangos_db_transaction(db, tmp_path):
    QueueClient().push("workers.record", {"path": str(tmp_path / "events.jsonl")})
    started = time.monotonic()
    with pytest.raises(CommandError, match=OPEN_TRANSACTION) as refused:
        call_command("runworker", burst=True, verbosity=0)
    # At once: on SQLite a worker would wait on the test's write lock for as long as it ran.
    assert time.monotonic() - started < 5
    assert "django_jobqueue.testing.run_jobs()" in str(refused.value)
    assert Job.objects.get().status == "ready"
    assert not Worker.objects.exists()


def test_it_refuses_to_run_inside_an_atomic_block(queue, tmp_path):
    with transaction.atomic(), pytest.raises(CommandError, match=OPEN_TRANSACTION):
        call_command("runworker", burst=True, verbosity=0)


class InsideATestCase(TestCase):
    def test_it_refuses_at_once(self) -> None:
        job = QueueClient().push("workers.record", {"path": "/dev/null"})
        with self.assertRaisesMessage(CommandError, OPEN_TRANSACTION):
            call_command("runworker", burst=True, verbosity=0)
        job.refresh_from_db()
        self.assertEqual(job.status, "ready")
