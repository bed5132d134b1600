"""Where a worker LISTENs (``JOBQUEUE["LISTEN_DATABASE"]``), and a LISTEN that hears nothing.

Real ``runworker`` processes. The deaf LISTEN is made as a pooler in
transaction mode makes it: the worker's NOTIFYs go to the queue's database, its
LISTEN sits elsewhere (here another database of the same server) and hears none.
"""

from __future__ import annotations

import json
import re
from io import StringIO

import pytest
from django.conf import settings
from django.core.management import call_command
from django.db import connection

from django_jobqueue.models import Job, Worker
from tests.worker_support import database_url, wait_until

HEARD = r"LISTEN on alias '{}' heard its probe in \d+ ms"
DEAF = "heard nothing within"


def status_listen() -> dict[str, str]:
    """``jobqueue status --json``'s LISTEN state of each worker, by id."""
    out = StringIO()
    call_command("jobqueue", "status", "--json", stdout=out)
    return {worker["worker_id"]: worker["listen"] for worker in json.loads(out.getvalue())["workers"]}


def row_listen(worker_id: str) -> str | None:
    worker = Worker.objects.filter(worker_id=worker_id).first()
    return None if worker is None else worker.listen


def pickup_seconds(job: Job) -> float:
    """From the job's insert to its claim, both by the database's clock."""
    job.refresh_from_db()
    assert job.started_at is not None
    return (job.started_at - job.created_at).total_seconds()


def test_a_listen_on_a_second_alias_wakes_an_idle_worker_at_once(postgresql_only, queue, start_worker):
    # A poll every 10 s: a job started within a second was woken by the NOTIFY.
    worker = start_worker(
        "--worker-id", "direct", "--poll-interval", "10", env={"JOBQUEUE_LISTEN_DATABASE": "listen"}
    )
    worker.wait_for_log(HEARD.format("listen"))
    assert "wake-up=LISTEN/NOTIFY on 'listen'" in worker.log()
    wait_until(lambda: row_listen("direct") == "live", 5, "the row to say live")
    assert status_listen() == {"direct": "live"}

    for value in range(3):
        job = queue.push("workers.record", {"path": "/dev/null", "value": value})
        wait_until(lambda job=job: Job.objects.get(pk=job.pk).status == "done", 5, "the job done")
        assert pickup_seconds(job) < 1.0
    assert DEAF not in worker.log()


def test_listen_database_none_polls_only(queue, start_worker):
    worker = start_worker(
        "--worker-id", "poller", "--poll-interval", "0.2", env={"JOBQUEUE_LISTEN_DATABASE": "none"}
    )
    worker.wait_started()
    assert "wake-up=polling every 0.2s " in worker.log()
    assert row_listen("poller") == "off"
    assert "listener" not in worker.log()

    job = queue.push("workers.record", {"path": "/dev/null"})
    wait_until(lambda: Job.objects.get(pk=job.pk).status == "done", 5, "the job done by polling")


def test_a_deaf_listen_is_said_once_and_the_worker_polls(postgresql_only, queue, start_worker):
    elsewhere = re.sub(r"/[^/]+$", "/postgres", database_url())
    assert connection.settings_dict["NAME"] != "postgres"
    worker = start_worker(
        "--worker-id",
        "behind-pooler",
        "--poll-interval",
        "0.3",
        env={"JOBQUEUE_LISTEN_DATABASE": "listen", "JOBQUEUE_LISTEN_DATABASE_URL": elsewhere},
    )
    worker.wait_started()
    assert "django_jobqueue.W003" in worker.log(), "the check saw it coming"
    assert "wake-up=LISTEN/NOTIFY on 'listen'" in worker.log()
    line = worker.wait_for_log(r".*LISTEN on alias 'listen' heard nothing within .*", timeout=10).group()
    assert "a pooler in transaction mode?" in line
    assert "polling every 0.3s" in line
    assert "set JOBQUEUE['LISTEN_DATABASE'] to the alias of a direct connection" in line
    wait_until(lambda: row_listen("behind-pooler") == "deaf", 5, "the row to say deaf")
    assert status_listen() == {"behind-pooler": "deaf"}

    for value in range(3):
        queue.push("workers.record", {"path": "/dev/null", "value": value})
    wait_until(lambda: Job.objects.filter(status="done").count() == 3, 5, "the jobs done by polling")
    assert worker.log().count(DEAF) == 1, "said once"
    assert "heard its probe" not in worker.log()


def test_a_probe_counts_only_for_the_worker_that_sent_it(postgresql_only, queue, start_worker):
    direct = {"JOBQUEUE_LISTEN_DATABASE": "listen"}  # also behind the pooler of make test-pgbouncer
    first = start_worker("--worker-id", "first", "--poll-interval", "10", env=direct)
    first.wait_for_log(HEARD.format("listen"))
    second = start_worker("--worker-id", "second", "--poll-interval", "10", env=direct)
    second.wait_for_log(HEARD.format("listen"))
    # Each logs that it heard its probe, then records it on its row.
    both_live = {"first": "live", "second": "live"}
    wait_until(lambda: status_listen() == both_live, 5, "both rows to say live")
    # The second's probe reached the first's LISTEN too, which did not take it for its own.
    assert first.log().count("heard its probe") == 1


@pytest.mark.usefixtures("sqlite_only")
def test_on_sqlite_a_listen_database_is_harmless(queue, start_worker):
    worker = start_worker(
        "--worker-id", "lite", "--poll-interval", "0.2", env={"JOBQUEUE_LISTEN_DATABASE": "default"}
    )
    worker.wait_started()
    assert "wake-up=polling every 0.2s " in worker.log()
    assert row_listen("lite") == "off"
    job = queue.push("workers.record", {"path": "/dev/null"})
    wait_until(lambda: Job.objects.get(pk=job.pk).status == "done", 5, "the job done by polling")


def test_a_listen_through_a_real_pooler_is_found_deaf(postgresql_only, queue, start_worker):
    if not settings.POOLER_DATABASE:
        pytest.skip("behind a pooler only: make test-pgbouncer runs it through PgBouncer")
    # The queue's own alias goes through PgBouncer in transaction mode.
    worker = start_worker(
        "--worker-id", "pooled", "--poll-interval", "0.3", env={"JOBQUEUE_LISTEN_DATABASE": "default"}
    )
    line = worker.wait_for_log(r".*LISTEN on alias 'default' heard nothing within .*", timeout=10).group()
    assert "set JOBQUEUE['LISTEN_DATABASE'] to the alias of a direct connection" in line
    wait_until(lambda: row_listen("pooled") == "deaf", 5, "the row to say deaf")
    job = queue.push("workers.record", {"path": "/dev/null"})
    wait_until(lambda: Job.objects.get(pk=job.pk).status == "done", 5, "the job done by polling")
