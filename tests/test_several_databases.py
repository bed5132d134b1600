"""Two databases, each a queue of its own: enqueue, workers, the admin, the metrics (docs/scaling.md).

The test project's ``second`` alias is a database of its own on default's
server (a second file on SQLite). Job ids start at 1 in each, so the same id
names two different jobs: every test here has such a pair, and checks that
what was done to one never reaches the other.
"""

from __future__ import annotations

import re
from typing import Any

import pytest
from django.contrib.admin.models import LogEntry
from django.contrib.auth.models import User
from django.core.management import call_command
from django.core.management.base import CommandError
from django.db import connections, transaction
from django.test import Client
from prometheus_client.parser import text_string_to_metric_families

from django_jobqueue import QueueClient, enqueue, enqueue_many
from django_jobqueue.checks import check_jobqueue_settings
from django_jobqueue.conf import queue_databases
from django_jobqueue.models import Job
from django_jobqueue.routers import JobQueueRouter
from django_jobqueue.worker.run.watchdog import Attempts
from django_jobqueue.worker.services.metrics import WorkerMetrics
from tests.jobs_for_workers import events, record
from tests.worker_support import database_url

BOTH = ["default", "second"]
JOBS = "/admin/django_jobqueue/job/"
OVERVIEW = "/admin/django_jobqueue/queueoverview/"
CHOOSE = OVERVIEW + "database/"

# Ids from 1 in each test, so that each database's first job is #1.
pytestmark = pytest.mark.django_db(transaction=True, reset_sequences=True, databases=BOTH)


@pytest.fixture
def two_queues(settings: Any) -> None:
    settings.JOBQUEUE = {**settings.JOBQUEUE, "DATABASES": ["second"]}


@pytest.fixture
def admin_client_of_both(two_queues: None) -> Client:
    user = User.objects.create_superuser("root", password="pw")
    client = Client()
    client.force_login(user)
    return client


def statuses(alias: str) -> list[tuple[int, str]]:
    return list(Job.objects.using(alias).order_by("id").values_list("id", "status"))


def test_the_queue_databases_are_database_then_databases_in_order(settings):
    settings.JOBQUEUE = {**settings.JOBQUEUE, "DATABASE": "second", "DATABASES": ["default", "second"]}
    assert queue_databases() == ["second", "default"]
    settings.JOBQUEUE = {**settings.JOBQUEUE, "DATABASE": "default", "DATABASES": []}
    assert queue_databases() == ["default"]


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ("second", "must be a list of aliases of DATABASES, not 'second'"),
        (["second", "nowhere"], "names 'nowhere', not a key of DATABASES"),
        ([3], "must be a list of aliases of DATABASES, not [3]"),
    ],
)
def test_a_wrong_databases_setting_is_an_error(settings, value, message):
    settings.JOBQUEUE = {**settings.JOBQUEUE, "DATABASES": value}
    errors = [error for error in check_jobqueue_settings() if error.id == "django_jobqueue.E019"]
    assert [error.msg for error in errors] == [f"JOBQUEUE['DATABASES'] {message}."]


def test_the_router_migrates_every_queue_database_and_writes_a_row_back_where_it_came_from(two_queues):
    router = JobQueueRouter()
    assert router.allow_migrate("second", "django_jobqueue") is True
    assert router.allow_migrate("listen", "django_jobqueue") is False
    job = QueueClient("second").push("tests.noop", {})
    assert router.db_for_write(Job, instance=job) == "second"
    assert router.db_for_read(Job) == "default"


def test_each_way_to_enqueue_writes_to_the_database_it_names(two_queues):
    enqueue("tests.noop", {}, using="second")
    enqueue_many([("tests.noop", {}), ("tests.noop", {})], using="second")
    record.using(database="second").enqueue(path="/dev/null", value=1)
    QueueClient("second").push("tests.noop", {})
    enqueue("tests.noop", {})
    assert Job.objects.using("second").count() == 5
    assert Job.objects.using("default").count() == 1


def test_enqueue_joins_the_transaction_of_its_own_database_only(two_queues):
    with pytest.raises(RuntimeError), transaction.atomic(using="second"):
        enqueue("tests.noop", {}, using="second")
        raise RuntimeError("rolled back")
    with pytest.raises(RuntimeError), transaction.atomic(using="default"):
        enqueue("tests.noop", {}, using="second")
        raise RuntimeError("rolled back, but on default only")
    assert [status for _pk, status in statuses("second")] == ["ready"], "the second enqueue only"


def test_a_worker_serves_the_database_it_is_given_and_no_other(start_worker, events_path, two_queues):
    on_default = [enqueue("workers.record", {"path": events_path, "value": f"default-{i}"}) for i in range(5)]
    on_second = [
        enqueue("workers.record", {"path": events_path, "value": f"second-{i}"}, using="second")
        for i in range(5)
    ]
    assert [job.pk for job in on_default] == [job.pk for job in on_second], "the same ids, two jobs each"
    env = {"JOBQUEUE_DATABASES": "second", "JOBQUEUE_SECOND_DATABASE_URL": database_url("second")}

    second = start_worker("--database", "second", "--burst", "--concurrency", "2", env=env)
    assert second.wait() == 0, second.log()
    assert re.search(r"started: .* database=second \(", second.log())
    assert {status for _pk, status in statuses("second")} == {"done"}
    assert {status for _pk, status in statuses("default")} == {"ready"}
    assert sorted(event["value"] for event in events(events_path) if event["event"] == "end") == [
        f"second-{i}" for i in range(5)
    ]

    default = start_worker("--burst", "--concurrency", "2", env=env)
    assert default.wait() == 0, default.log()
    assert {status for _pk, status in statuses("default")} == {"done"}
    ended = [event["value"] for event in events(events_path) if event["event"] == "end"]
    assert sorted(ended) == sorted([f"default-{i}" for i in range(5)] + [f"second-{i}" for i in range(5)])


def test_runworker_and_jobqueue_refuse_a_database_that_holds_no_queue():
    # "second" is a key of DATABASES, but JOBQUEUE["DATABASES"] does not list it here.
    with pytest.raises(CommandError, match=r"'second' holds no queue: the queue databases are 'default'"):
        call_command("runworker", "--database", "second", "--burst")
    with pytest.raises(CommandError, match=r"'second' holds no queue"):
        call_command("jobqueue", "status", "--database", "second")


def test_jobqueue_status_reads_the_database_it_is_given(two_queues, capsys):
    enqueue("tests.noop", {}, using="second", queue="only-on-second")
    call_command("jobqueue", "status", "--database", "second")
    assert "only-on-second" in capsys.readouterr().out
    call_command("jobqueue", "status")
    assert "only-on-second" not in capsys.readouterr().out


# -- the admin --------------------------------------------------------------------------------


def test_the_admin_shows_one_database_at_a_time_and_acts_on_that_one(admin_client_of_both):
    client = admin_client_of_both
    mine = enqueue("tests.noop", {}, queue="default-queue")
    theirs = enqueue("tests.noop", {}, using="second", queue="second-queue")
    assert mine.pk == theirs.pk

    page = client.get(JOBS).content.decode()
    assert "default-queue" in page and "second-queue" not in page
    assert "These pages show the queue of “default”" in page

    chosen = client.post(CHOOSE, {"database": "second", "next": JOBS})
    assert (chosen.status_code, chosen["Location"]) == (302, JOBS)
    page = client.get(JOBS).content.decode()
    assert "second-queue" in page and "default-queue" not in page
    assert "These pages show the queue of “second”" in page
    detail = client.get(f"{JOBS}{theirs.pk}/change/").content.decode()
    assert "second-queue" in detail
    overview = client.get(OVERVIEW).content.decode()
    assert "second-queue" in overview and "default-queue" not in overview

    # Cancel job #1 from its page: the second database's, never default's job #1.
    cancelled = client.post(f"{JOBS}{theirs.pk}/cancel/")
    assert cancelled.status_code == 302
    assert statuses("second") == [(theirs.pk, "cancelled")]
    assert statuses("default") == [(mine.pk, "ready")]
    (entry,) = LogEntry.objects.filter(object_id=str(theirs.pk))
    assert entry.change_message == "On database “second”. Cancelled."


def test_the_admin_refuses_a_database_that_holds_no_queue_and_an_outside_address(admin_client_of_both):
    client = admin_client_of_both
    enqueue("tests.noop", {}, queue="default-queue")
    refused = client.post(CHOOSE, {"database": "listen", "next": JOBS}, follow=True)
    page = refused.content.decode()
    assert "“listen” holds no queue: these pages still show “default”." in page
    assert "default-queue" in page
    away = client.post(CHOOSE, {"database": "second", "next": "https://elsewhere.example/"})
    assert away["Location"] == OVERVIEW
    assert client.get(CHOOSE).status_code == 405


def test_with_one_queue_database_the_admin_offers_no_choice(admin_client_of_both, settings):
    settings.JOBQUEUE = {**settings.JOBQUEUE, "DATABASES": []}
    enqueue("tests.noop", {})
    assert "Queue database" not in admin_client_of_both.get(JOBS).content.decode()
    assert "Queue database" not in admin_client_of_both.get(OVERVIEW).content.decode()


# -- the metrics ------------------------------------------------------------------------------


def test_the_metrics_view_labels_every_series_by_database(admin_client_of_both):
    enqueue("tests.noop", {}, queue="emails")
    enqueue_many([("tests.noop", {})] * 3, using="second", queue="emails")
    body = admin_client_of_both.get("/jobqueue/metrics").content.decode()
    samples = {
        (sample.name, frozenset(sample.labels.items())): sample.value
        for family in text_string_to_metric_families(body)
        for sample in family.samples
    }

    def ready(database: str) -> float:
        labels = frozenset({"database": database, "queue": "emails", "state": "ready"}.items())
        return samples[("jobqueue_queue_jobs", labels)]

    assert (ready("default"), ready("second")) == (1, 3)
    assert ("jobqueue_workers_alive", frozenset({"database": "second"}.items())) in samples


def test_the_metrics_view_fails_visibly_when_one_database_does_not_answer(admin_client_of_both):
    second = connections["second"]
    name = second.settings_dict["NAME"]
    second.close()
    second.settings_dict["NAME"] = (
        "/no/such/dir/queue.sqlite3" if second.vendor == "sqlite" else "jq_no_such_db"
    )
    try:
        response = admin_client_of_both.get("/jobqueue/metrics")
    finally:
        second.close()
        second.settings_dict["NAME"] = name
    assert response.status_code == 503
    assert response.content.decode() == "the queue's database 'second' did not answer\n"


def test_a_worker_says_which_database_it_serves_in_its_metrics():
    about = {"database": "second", "pool": "threads", "version": "1"}
    registry = WorkerMetrics(Attempts(), 1, about).registry
    assert registry.get_sample_value("jobqueue_worker_info", about) == 1


def test_a_job_cannot_wait_on_a_job_of_another_database(two_queues):
    theirs = enqueue("tests.noop", {}, using="second")
    enqueue("tests.noop", {})  # default's job of the same id
    message = r"depends_on: job #1 is in database 'second', and this job goes to 'default'"
    with pytest.raises(ValueError, match=message):
        enqueue("tests.noop", {}, depends_on=[theirs])
    with pytest.raises(ValueError, match=r"item 0: " + message):
        enqueue_many([("tests.noop", {}, {"depends_on": theirs})])
    waiting = enqueue("tests.noop", {}, using="second", depends_on=[theirs])
    assert waiting.status == "waiting"
    assert Job.objects.using("default").count() == 1
