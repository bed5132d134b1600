"""``django_jobqueue.views.metrics``: the queue's figures for Prometheus, who may read them, and how."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import threading
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from django.conf import settings
from django.core.checks import run_checks
from django.db import connection
from django.test import Client, override_settings
from django.utils import timezone
from prometheus_client.parser import text_string_to_metric_families

from django_jobqueue import QueueClient
from django_jobqueue.models import Job, JobStatus, Worker
from django_jobqueue.views import QUEUE_SERIES
from tests.worker_support import wait_until

ROOT = Path(__file__).resolve().parent.parent
URL = "/jobqueue/metrics"
TOKEN = "k3Qx-8vVbN2mZpL0rT7wYcE5uH1jA9sDfG4"
Samples = dict[tuple[str, frozenset[tuple[str, str]]], float]


def with_token(token: Any) -> Any:
    return override_settings(JOBQUEUE={**settings.JOBQUEUE, "METRICS_TOKEN": token})


@pytest.fixture
def token() -> Iterator[str]:
    with with_token(TOKEN):
        yield TOKEN


def parse(body: str) -> Samples:
    """Every sample of a Prometheus text body, by name and labels; fails on a malformed body."""
    return {
        (sample.name, frozenset(sample.labels.items())): sample.value
        for family in text_string_to_metric_families(body)
        for sample in family.samples
    }


def value(samples: Samples, name: str, database: str = "default", **labels: str) -> float:
    return samples[(name, frozenset({"database": database, **labels}.items()))]


@pytest.fixture
def known_jobs(queue: QueueClient) -> dict[str, Job]:
    """emails: 3 due (one keyed, the oldest 90 s due), 1 scheduled, 1 running, 1 dead, 1 done.

    reports: paused, no job. One live worker and one silent for two minutes.
    """
    running = queue.push("metrics.work", {}, queue="emails", priority=50)
    assert queue.pull("emails", worker_id="w1") is not None
    doomed = queue.push("metrics.work", {}, queue="emails", priority=50)
    pulled = queue.pull("emails", worker_id="w1")
    assert pulled is not None and pulled.pk == doomed.pk
    assert queue.fail(pulled, worker_id="w1", error="no")
    done = queue.push("metrics.work", {}, queue="emails", priority=50)
    pulled = queue.pull("emails", worker_id="w1")
    assert pulled is not None and pulled.pk == done.pk and queue.ack(pulled, worker_id="w1")

    oldest = queue.push("metrics.work", {}, queue="emails", run_at=timezone.now() - timedelta(seconds=90))
    queue.push("metrics.work", {}, queue="emails")
    queue.push("metrics.work", {}, queue="emails", concurrency_key="tenant:1", concurrency_limit=1)
    queue.push("metrics.work", {}, queue="emails", delay=3600)
    queue.pause_queue("reports")
    queue.register_worker("alive", hostname="h", pid=1, queues=[], concurrency=4)
    queue.register_worker("silent", hostname="h", pid=2, queues=[], concurrency=4)
    Worker.objects.filter(worker_id="silent").update(last_heartbeat=timezone.now() - timedelta(minutes=2))
    return {"running": running, "oldest": oldest}


def staff_client(django_user_model: Any, *, staff: bool = True, active: bool = True) -> Client:
    user = django_user_model.objects.create_user("watcher", password="pw", is_staff=staff, is_active=active)
    client = Client()
    client.force_login(user)
    return client


# -- the figures ------------------------------------------------------------------


def test_the_figures_of_known_jobs(known_jobs: dict[str, Job], operator: Client) -> None:
    response = operator.get(URL)
    assert response.status_code == 200
    samples = parse(response.content.decode())
    assert value(samples, "jobqueue_queue_jobs", queue="emails", state="ready") == 3
    assert value(samples, "jobqueue_queue_jobs", queue="emails", state="scheduled") == 1
    assert value(samples, "jobqueue_queue_jobs", queue="emails", state="running") == 1
    assert value(samples, "jobqueue_queue_dead_letters", queue="emails") == 1
    age = value(samples, "jobqueue_queue_oldest_ready_age_seconds", queue="emails")
    assert 90 <= age < 150
    assert value(samples, "jobqueue_queue_paused", queue="emails") == 0
    assert value(samples, "jobqueue_queue_paused", queue="reports") == 1
    assert value(samples, "jobqueue_workers_alive") == 1


def test_an_empty_queue_reports_zeros_not_gaps(known_jobs: dict[str, Job], operator: Client) -> None:
    samples = parse(operator.get(URL).content.decode())
    for state in ("ready", "scheduled", "running"):
        assert value(samples, "jobqueue_queue_jobs", queue="reports", state=state) == 0
        # The default queue is always listed, so its series never vanish between jobs.
        assert value(samples, "jobqueue_queue_jobs", queue="default", state=state) == 0
    assert value(samples, "jobqueue_queue_oldest_ready_age_seconds", queue="reports") == 0
    assert value(samples, "jobqueue_queue_dead_letters", queue="reports") == 0


def test_every_series_exported_is_declared(known_jobs: dict[str, Job], operator: Client) -> None:
    families = {family.name for family in text_string_to_metric_families(operator.get(URL).content.decode())}
    assert families == set(QUEUE_SERIES)


def test_the_figures_follow_the_jobs(
    known_jobs: dict[str, Job], queue: QueueClient, operator: Client
) -> None:
    assert queue.ack(known_jobs["running"].pk, worker_id="w1")
    Job.objects.filter(pk=known_jobs["oldest"].pk).delete()
    samples = parse(operator.get(URL).content.decode())
    assert value(samples, "jobqueue_queue_jobs", queue="emails", state="running") == 0
    assert value(samples, "jobqueue_queue_jobs", queue="emails", state="ready") == 2
    assert value(samples, "jobqueue_queue_oldest_ready_age_seconds", queue="emails") < 60


def test_the_response_is_prometheus_text_and_never_cached(queue: QueueClient, operator: Client) -> None:
    response = operator.get(URL)
    assert response["Content-Type"].startswith("text/plain; version=")
    assert "no-store" in response["Cache-Control"] and "max-age=0" in response["Cache-Control"]


@pytest.mark.parametrize("method", ["post", "put", "delete", "head"])
def test_only_get_is_allowed(queue: QueueClient, operator: Client, method: str) -> None:
    response = getattr(operator, method)(URL)
    assert response.status_code == 405
    assert response["Allow"] == "GET"


# -- who may read them --------------------------------------------------------------


def test_an_anonymous_request_is_refused(queue: QueueClient) -> None:
    response = Client().get(URL)
    assert response.status_code == 403
    assert b"staff" in response.content and b"jobqueue_queue_jobs" not in response.content


@pytest.mark.parametrize(
    ("staff", "active", "status"), [(True, True, 200), (False, True, 403), (True, False, 403)]
)
def test_a_session_needs_an_active_staff_user(
    queue: QueueClient, django_user_model: Any, staff: bool, active: bool, status: int
) -> None:
    assert staff_client(django_user_model, staff=staff, active=active).get(URL).status_code == status


def test_the_right_token_is_let_in(queue: QueueClient, token: str) -> None:
    response = Client().get(URL, headers={"Authorization": f"Bearer {token}"})
    assert response.status_code == 200
    assert b"jobqueue_queue_jobs" in response.content


@pytest.mark.parametrize(
    "header",
    [f"Bearer {TOKEN[:-1]}", f"Bearer {TOKEN}x", "Bearer ", f"Basic {TOKEN}", TOKEN, "Bearer ümlaut"],
)
def test_a_wrong_token_is_refused(queue: QueueClient, token: str, header: str) -> None:
    assert Client().get(URL, headers={"Authorization": header}).status_code == 403


def test_a_wrong_token_is_refused_even_with_a_staff_session(
    queue: QueueClient, operator: Client, token: str
) -> None:
    assert operator.get(URL, headers={"Authorization": "Bearer wrong"}).status_code == 403


def test_no_token_configured_lets_no_token_in(queue: QueueClient) -> None:
    response = Client().get(URL, headers={"Authorization": f"Bearer {TOKEN}"})
    assert response.status_code == 403
    assert b"METRICS_TOKEN" in response.content


@pytest.mark.parametrize(
    ("token", "problem"),
    [
        (12345, "must be a string or None, not int"),
        ("short", "is 5 characters long; it needs at least 32"),
        ("x" * 31 + " ", "printable ASCII"),
        ("x" * 31 + "é", "printable ASCII"),
    ],
)
def test_a_bad_token_setting_is_a_check_error(token: Any, problem: str) -> None:
    with with_token(token):
        # databases=[]: the checks of Django 5.2's run_checks(); Django 6 would also check the
        # models against every alias, which opens a connection to each (no database here).
        errors = [e for e in run_checks(databases=[]) if e.id == "django_jobqueue.E015"]
    assert len(errors) == 1 and problem in errors[0].msg


def test_a_good_token_setting_passes_the_check(token: str) -> None:
    assert not [e for e in run_checks(databases=[]) if e.id == "django_jobqueue.E015"]


def test_a_claim_committing_mid_scrape_is_counted_in_one_state_only(
    postgresql_only: None, known_jobs: dict[str, Job], operator: Client
) -> None:
    """A worker claims a ready job between the scrape's count of ready jobs and its count of running ones.

    Read statement by statement, the scrape would count that job twice: as
    ready, then as running. On one snapshot it sees the state before the claim.
    """
    claimed: list[Job | None] = []

    def claim_after_the_ready_count(execute: Any, sql: str, params: Any, many: bool, context: Any) -> Any:
        result = execute(sql, params, many, context)
        if not claimed and params and JobStatus.READY in params and '"status"' in sql:
            # Another thread, so another connection: its claim commits on its own.
            worker = threading.Thread(
                target=lambda: claimed.append(QueueClient().pull("emails", worker_id="w2"))
            )
            worker.start()
            worker.join(timeout=30)
        return result

    with connection.execute_wrapper(claim_after_the_ready_count):
        samples = parse(operator.get(URL).content.decode())
    assert claimed and claimed[0] is not None, "the claim ran between the scrape's statements"
    assert value(samples, "jobqueue_queue_jobs", queue="emails", state="ready") == 3
    assert value(samples, "jobqueue_queue_jobs", queue="emails", state="running") == 1
    # The next scrape sees the claim.
    samples = parse(operator.get(URL).content.decode())
    assert value(samples, "jobqueue_queue_jobs", queue="emails", state="ready") == 2
    assert value(samples, "jobqueue_queue_jobs", queue="emails", state="running") == 2


SCRAPE_WITHOUT_A_DATABASE = """
import json, django
django.setup()
from django.conf import settings
from django.test import Client, override_settings
with override_settings(JOBQUEUE={**settings.JOBQUEUE, "METRICS_TOKEN": "%s"}, ALLOWED_HOSTS=["testserver"]):
    response = Client().get("%s", headers={"Authorization": "Bearer %s"})
print(json.dumps([response.status_code, response["Content-Type"], response.content.decode()]))
"""


def test_a_database_that_does_not_answer_is_a_503_not_empty_queues() -> None:
    """A process of its own whose database address is a port where nothing listens."""
    env = {**os.environ, "DJANGO_SETTINGS_MODULE": "testproject.settings"}
    env["DATABASE_URL"] = f"postgres://nobody@127.0.0.1:{closed_port()}/nowhere?connect_timeout=2"
    script = SCRAPE_WITHOUT_A_DATABASE % (TOKEN, URL, TOKEN)
    run = subprocess.run(
        [sys.executable, "-c", script], cwd=ROOT, env=env, capture_output=True, text=True, timeout=60
    )
    assert run.returncode == 0, run.stderr
    status, content_type, body = json.loads(run.stdout.splitlines()[-1])
    assert (status, content_type) == (503, "text/plain; charset=utf-8")
    assert body == "the queue's database 'default' did not answer\n"
    assert "queue metrics: the database 'default' did not answer" in run.stderr


def closed_port() -> int:
    """A TCP port on 127.0.0.1 where nothing listens: bound, then let go."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


# -- over real HTTP, with a real worker --------------------------------------------------


def http_get(url: str, token: str | None = None) -> tuple[int, str, str]:
    request = urllib.request.Request(url, headers={"Authorization": f"Bearer {token}"} if token else {})
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return response.status, response.headers["Content-Type"], response.read().decode()
    except urllib.error.HTTPError as error:
        return error.code, error.headers["Content-Type"], error.read().decode()


def test_over_http_a_scraper_sees_a_real_workers_running_job(
    live_server: Any,
    token: str,
    queue: QueueClient,
    start_worker: Callable[..., Any],
    events_path: str,
    tmp_path: Path,
) -> None:
    release = tmp_path / "release"
    queue.push("workers.gate", {"path": events_path, "release": str(release)}, queue="http")
    worker = start_worker("--queue", "http", "--concurrency", "2")
    url = f"{live_server.url}{URL}"

    def running() -> Samples | None:
        status, _, body = http_get(url, token)
        assert status == 200, body
        samples = parse(body)
        # The figures are read one statement after another: a sample may read "ready" just
        # before the claim commits and "running" just after it, so wait for both.
        running_key = (
            "jobqueue_queue_jobs",
            frozenset({"database": "default", "queue": "http", "state": "running"}.items()),
        )
        ready_key = (
            "jobqueue_queue_jobs",
            frozenset({"database": "default", "queue": "http", "state": "ready"}.items()),
        )
        return samples if samples.get(running_key) == 1 and samples.get(ready_key) == 0 else None

    samples = wait_until(running, timeout=30, message="the worker's job counted as running")
    assert value(samples, "jobqueue_workers_alive") == 1
    assert value(samples, "jobqueue_queue_jobs", queue="http", state="ready") == 0

    status, content_type, body = http_get(url)
    assert status == 403 and content_type.startswith("text/plain") and "jobqueue_queue_jobs" not in body
    assert http_get(url, "wrong")[0] == 403
    release.touch()
    worker.send(15)
    assert worker.wait() == 0
