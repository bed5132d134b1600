"""The admin in a real browser (Debian's chromium, driven by Playwright) against a live server.

Three stories end to end: log in, open the dead letters, open one, retry it,
and see it back on its queue; open the schedules, pause one, run one now, and
see its job; pause a queue from the overview and resume it. A second test
renders the main pages with realistic data and saves screenshots: to a
temporary directory, or to the docs with ``JOBQUEUE_SCREENSHOTS=docs/img``.
"""

from __future__ import annotations

import os
import traceback
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from django.db.models import F
from django.test import override_settings
from django.utils import timezone

from django_jobqueue import QueueClient, registry
from django_jobqueue import job as job_function
from django_jobqueue.models import DeadLetter, Job, Schedule, Worker

# Playwright's sync API runs an event loop in this thread; the test's own ORM
# calls are ordinary synchronous code all the same.
os.environ.setdefault("DJANGO_ALLOW_ASYNC_UNSAFE", "true")

CHROMIUM = Path("/usr/bin/chromium")
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-gpu",
]

pytestmark = pytest.mark.skipif(
    not CHROMIUM.exists(), reason=f"{CHROMIUM} is not installed (apt-get install chromium; .ci/run does)"
)

PASSWORD = "correct horse battery staple"
# What a dead letter of the sign-up story carries, as the screenshots show it.
APP_TRACEBACK = """Traceback (most recent call last):
  File "/srv/app/django_jobqueue/worker/executor.py", line 64, in run
    result = handler(**job.payload)
  File "/srv/app/accounts/jobs.py", line 31, in send_otp
    provider.send_code(user.phone, code)
  File "/srv/app/sms/provider.py", line 88, in send_code
    raise ProviderError(reply["error"])
sms.provider.ProviderError: {message}
"""


@pytest.fixture(autouse=True)
def seeded_by_name(unregistered: Any) -> None:
    """The pages' rows are seeded by name; no function of this process checks their payloads."""
    unregistered("send_otp", "send_welcome_email", "deliver_webhook", "build_report", "rebuild_search_index")


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=str(CHROMIUM), headless=True, args=CHROMIUM_ARGS)
        yield browser
        browser.close()


@pytest.fixture
def page(browser: Any) -> Iterator[Any]:
    context = browser.new_context(viewport={"width": 1400, "height": 900})
    # The admin's navigation sidebar, folded away: the lists get the width.
    context.add_init_script("localStorage.setItem('django.admin.navSidebarIsOpen', 'false')")
    page = context.new_page()
    page.set_default_timeout(15_000)
    yield page
    context.close()


@pytest.fixture
def operator(queue: QueueClient, django_user_model: Any) -> Any:
    return django_user_model.objects.create_superuser("operator", "ops@example.com", PASSWORD)


def log_in(page: Any, base: str) -> None:
    page.goto(f"{base}/admin/login/?next=/admin/")
    page.fill("#id_username", "operator")
    page.fill("#id_password", PASSWORD)
    page.click("input[type=submit]")
    page.wait_for_url(f"{base}/admin/")


class ProviderError(Exception):
    pass


def failure(message: str) -> tuple[str, str]:
    """An error and its traceback, from an exception raised for real."""

    def send_otp(user_id: str) -> None:
        raise ProviderError(message)

    try:
        send_otp("42")
    except ProviderError as exc:
        return f"ProviderError: {exc}", "".join(traceback.format_exception(exc))
    raise AssertionError("unreachable")


def bury(
    client: QueueClient, name: str, payload: dict[str, Any], queue: str, message: str, tb: str = ""
) -> DeadLetter:
    """A dead letter made the way a worker makes one: claim, then fail."""
    job = client.push(name, payload, queue=queue)
    Job.objects.filter(pk=job.pk).update(status="running", locked_by="web-2:4121", attempts=F("max_attempts"))
    error, real_tb = failure(message)
    tb = tb.format(message=message) if tb else real_tb
    assert client.fail(job.pk, worker_id="web-2:4121", error=error, traceback=tb)
    return DeadLetter.objects.get(job_id=job.pk)


def test_retry_a_dead_letter_from_the_browser(page, live_server, queue, operator):
    queue.push("send_welcome_email", {"user_id": "7"}, queue="emails")
    letter = bury(
        queue, "send_otp", {"user_id": "42", "phone": "+31612345678"}, "sms", "number not on WhatsApp"
    )
    log_in(page, live_server.url)

    page.get_by_role("link", name="Dead letters").first.click()
    page.wait_for_url("**/deadletter/")
    row = page.locator("#result_list tbody tr", has_text="number not on WhatsApp")
    assert row.count() == 1
    row.get_by_role("link", name=str(letter.pk)).click()

    page.wait_for_url(f"**/deadletter/{letter.pk}/change/")
    assert page.get_by_text("ProviderError: number not on WhatsApp").first.is_visible()
    assert page.locator("pre", has_text="Traceback (most recent call last)").is_visible()
    page.get_by_role("button", name="Retry").click()

    page.wait_for_url("**/job/*/change/")
    job = Job.objects.get(name="send_otp")
    assert page.url.endswith(f"/job/{job.pk}/change/")
    assert page.locator(".messagelist").inner_text().strip() == (
        f"Dead letter #{letter.pk} is back on queue “sms” as job #{job.pk}."
    )
    assert page.locator(".field-status_detail .jq-pill").inner_text() == "ready"

    page.goto(f"{live_server.url}/admin/django_jobqueue/job/?queue=sms&status=due")
    listed = page.locator("#result_list tbody tr")
    assert listed.count() == 1 and str(job.pk) in listed.first.inner_text()
    assert (job.status, job.queue, job.attempts, job.payload["phone"]) == ("ready", "sms", 0, "+31612345678")
    assert not DeadLetter.objects.exists()


@pytest.fixture
def schedules(unregistered: Any) -> Iterator[None]:
    """Two schedules of two jobs registered here, declared in the settings."""
    unregistered("reports.nightly", "monitoring.ping")

    @job_function(name="reports.nightly")
    def nightly(kind: str) -> None: ...

    @job_function(name="monitoring.ping")
    def ping() -> None: ...

    declared = {
        "nightly-report": {
            "job": "reports.nightly",
            "cron": "0 3 * * *",
            "timezone": "Europe/Amsterdam",
            "payload": {"kind": "daily"},
            "queue": "reports",
        },
        "ping": {"job": "monitoring.ping", "every": 30},
    }
    with override_settings(JOBQUEUE={"SCHEDULES": declared}):
        yield
    registry.unregister("reports.nightly")
    registry.unregister("monitoring.ping")


def test_pause_and_run_a_schedule_from_the_browser(page, live_server, queue, operator, schedules, tmp_path):
    target = Path(os.environ.get("JOBQUEUE_SCREENSHOTS") or tmp_path)
    target.mkdir(parents=True, exist_ok=True)
    log_in(page, live_server.url)
    page.get_by_role("link", name="Schedules").first.click()
    page.wait_for_url("**/schedule/")
    rows = page.locator("#result_list tbody tr")
    assert rows.count() == 2, "both declared schedules, before any worker ran"
    ping = page.locator("#result_list tbody tr", has_text="every 30 s")
    assert ping.locator(".jq-pill").first.inner_text() == "active"

    ping.locator("input.action-select").check()
    page.select_option("select[name=action]", "pause")
    page.get_by_role("button", name="Go").click()
    page.wait_for_load_state()
    assert page.locator(".messagelist").inner_text().startswith("Paused “ping”")
    ping = page.locator("#result_list tbody tr", has_text="every 30 s")
    assert ping.locator(".jq-pill").first.inner_text() == "paused"
    assert Schedule.objects.get(name="ping").paused
    page.screenshot(path=str(target / "admin-schedules.png"))

    page.locator("#result_list tbody tr", has_text="nightly-report").get_by_role(
        "link", name="nightly-report"
    ).click()
    page.wait_for_url("**/schedule/*/change/")
    assert page.get_by_text("cron 0 3 * * * (Europe/Amsterdam)").first.is_visible()
    page.screenshot(path=str(target / "admin-schedule.png"), full_page=True)
    page.get_by_role("button", name="Run now").click()

    page.wait_for_url("**/job/*/change/")
    made = Job.objects.get(name="reports.nightly")
    assert page.url.endswith(f"/job/{made.pk}/change/")
    assert page.locator(".messagelist").inner_text().strip() == (
        f"Ran now: “nightly-report” as job #{made.pk}."
    )
    assert page.locator(".field-status_detail .jq-pill").inner_text() == "ready"
    # Back, and the browser sends the form again: still one job.
    page.go_back()
    page.wait_for_url("**/schedule/*/change/")
    page.reload()
    assert Job.objects.count() == 1
    assert (made.queue, made.payload) == ("reports", {"kind": "daily"})


def test_pause_and_resume_a_queue_from_the_overview(page, live_server, queue, operator):
    queue.push("send_welcome_email", {"user_id": "7"}, queue="emails")
    queue.push("send_otp", {"user_id": "42"}, queue="sms")
    log_in(page, live_server.url)
    page.get_by_role("link", name="Queue overview").first.click()
    page.wait_for_url("**/queueoverview/")
    emails = page.locator("tr.jq-queue", has_text="emails")
    assert emails.locator(".jq-pill").count() == 0

    emails.get_by_role("button", name="Pause").click()
    page.wait_for_load_state()
    assert page.locator(".messagelist").inner_text().startswith("Paused queue “emails”")
    emails = page.locator("tr.jq-queue", has_text="emails")
    assert emails.locator(".jq-pill").inner_text() == "paused"
    assert page.locator("tr.jq-queue", has_text="sms").locator(".jq-pill").count() == 0
    assert queue.paused_queues() == ["emails"]

    emails.get_by_role("button", name="Resume").click()
    page.wait_for_load_state()
    assert page.locator(".messagelist").inner_text().startswith("Resumed queue “emails”")
    emails = page.locator("tr.jq-queue", has_text="emails")
    assert emails.locator(".jq-pill").count() == 0
    assert emails.get_by_role("button", name="Pause").is_visible()
    assert queue.paused_queues() == []


def test_a_jobs_dependencies_line_up_with_its_other_values(page, live_server, queue, operator):
    """*Waits on* and *waited on by* start where every other value of the page starts.

    Their lists are ``<ul>``s, and the admin's aligned fieldsets indent a
    ``ul`` by the labels' width as if it stood under its label, not beside it.
    """
    first = queue.push("build_report", {"month": "2024-01"}, queue="reports")
    waiting = queue.push("send_otp", {"user_id": "42"}, queue="sms", depends_on=[first])
    log_in(page, live_server.url)
    for job, field in ((waiting, "waits_on"), (first, "waited_on_by")):
        page.goto(f"{live_server.url}/admin/django_jobqueue/job/{job.pk}/change/")
        value = page.locator(".field-name div.readonly").bounding_box()
        link = page.locator(f".field-{field} li a").first.bounding_box()
        assert value is not None and link is not None, field
        assert abs(link["x"] - value["x"]) <= 2, f"{field} starts {link['x'] - value['x']:.0f} px off"
        label = page.locator(f".field-{field} label").bounding_box()
        assert label is not None and abs(link["y"] - label["y"]) <= 12, f"{field} beside its label"


# -- screenshots -------------------------------------------------------------------


def seed_a_busy_afternoon(client: QueueClient) -> dict[str, int]:
    """Five queues an hour into a sign-up rush: done, due, scheduled, running, dead, and workers."""
    now = timezone.now()
    names = {
        "sms": "send_otp",
        "emails": "send_welcome_email",
        "webhooks": "deliver_webhook",
        "reports": "build_report",
        "default": "rebuild_search_index",
    }
    batch = []
    for i in range(240):
        queue_name = ["sms", "emails", "emails", "webhooks", "sms", "reports"][i % 6]
        batch.append((names[queue_name], {"user_id": str(1000 + i)}, {"queue": queue_name}))
    done_ids = [job.pk for job in client.push_many(batch)]
    claimed = client.pull_many(worker_id="web-1:3187", limit=len(done_ids))
    for job in claimed:
        client.ack(job, worker_id="web-1:3187")
    # Spread the finish times over the last hour, busier lately, for the chart.
    for i, pk in enumerate(done_ids):
        minutes_ago = (i * 37) % 60 if i % 3 else (i * 7) % 20
        finished = now - timedelta(minutes=minutes_ago, seconds=i % 50)
        Job.objects.filter(pk=pk).update(finished_at=finished, created_at=finished - timedelta(seconds=3))

    for i in range(14):
        client.push(
            "send_otp", {"user_id": str(2000 + i)}, queue="sms", unique_key=f"otp:{2000 + i}", priority=10
        )
    for i in range(9):
        client.push("send_welcome_email", {"user_id": str(3000 + i)}, queue="emails")
    for i in range(4):
        client.push("build_report", {"month": f"2024-{i + 1:02d}"}, queue="reports", delay=3600 * (i + 1))
    client.push("rebuild_search_index", {}, queue="default", delay=900)
    Job.objects.filter(status="ready", run_at__lte=timezone.now()).update(
        run_at=now - timedelta(minutes=2, seconds=40)
    )

    # A job on its second attempt: the first timed out, a worker holds it now.
    slow = client.push(
        "deliver_webhook",
        {"url": "https://partner.example/hooks/signup", "user_id": "4242"},
        queue="webhooks",
    )
    first = client.pull("webhooks", worker_id="web-2:4121")
    client.nack(
        first, worker_id="web-2:4121", error="TimeoutError: partner.example did not answer in 10 s", delay=0
    )
    client.pull("webhooks", worker_id="web-1:3187", visibility_timeout=120)
    for i in range(3):
        client.push("send_otp", {"user_id": str(5000 + i)}, queue="sms")
    client.pull_many("sms", worker_id="web-1:3187", limit=3)
    # Flow control: a tenant's codes run under its key's limit; the reports are paused.
    Job.objects.filter(status="running", queue="sms").update(
        concurrency_key="tenant:acme", concurrency_limit=3
    )
    client.pause_queue("reports")
    cancelled = client.push("build_report", {"month": "2023-12"}, queue="reports")
    client.cancel(cancelled)

    letters = [
        bury(
            client,
            "send_otp",
            {"user_id": "42", "phone": "+31612345678"},
            "sms",
            "number not on WhatsApp",
            APP_TRACEBACK,
        ),
        bury(client, "send_otp", {"user_id": "77", "phone": "+4915112345"}, "sms", "number not on WhatsApp"),
        bury(
            client,
            "send_otp",
            {"user_id": "91", "phone": "+33612345678"},
            "sms",
            "rate limited: 429 Too Many Requests",
        ),
        bury(client, "deliver_webhook", {"url": "https://old.example/hook"}, "webhooks", "410 Gone"),
        bury(client, "send_welcome_email", {"user_id": "1203"}, "emails", "mailbox unavailable: 550 5.1.1"),
    ]
    for i, letter in enumerate(letters):
        failed = now - timedelta(minutes=3 + 11 * i)
        DeadLetter.objects.filter(pk=letter.pk).update(
            failed_at=failed, enqueued_at=failed - timedelta(minutes=31)
        )

    client.register_worker("web-1:3187", hostname="web-1", pid=3187, queues=[], concurrency=8)
    client.register_worker("web-2:4121", hostname="web-2", pid=4121, queues=["sms", "emails"], concurrency=4)
    client.register_worker("batch-1:902", hostname="batch-1", pid=902, queues=["reports"], concurrency=1)
    Worker.objects.filter(worker_id="batch-1:902").update(last_heartbeat=now - timedelta(seconds=48))
    return {"slow_job": slow.pk, "dead_letter": letters[0].pk}


@override_settings(JOBQUEUE={"QUEUES": {"sms": {"concurrency": 20, "rate_limit": "300/m"}}})
def test_screenshots_of_the_main_pages(page, live_server, queue, operator, tmp_path):
    ids = seed_a_busy_afternoon(queue)
    target = Path(os.environ.get("JOBQUEUE_SCREENSHOTS") or tmp_path)
    target.mkdir(parents=True, exist_ok=True)
    log_in(page, live_server.url)
    admin = f"{live_server.url}/admin/django_jobqueue"
    shots = {
        "admin-overview.png": f"{admin}/queueoverview/",
        "admin-jobs.png": f"{admin}/job/",
        "admin-job.png": f"{admin}/job/{ids['slow_job']}/change/",
        "admin-dead-letters.png": f"{admin}/deadletter/",
        "admin-dead-letter.png": f"{admin}/deadletter/{ids['dead_letter']}/change/",
    }
    for filename, url in shots.items():
        response = page.goto(url)
        assert response is not None and response.status == 200, url
        # A list is shown as a person first sees it; a page whole.
        page.screenshot(
            path=str(target / filename), full_page="-jobs" not in filename and "letters" not in filename
        )
        assert (target / filename).stat().st_size > 10_000, filename


# -- a laptop's screen -------------------------------------------------------------

LAPTOP = {"width": 1366, "height": 768}
# Neither the page nor the list's own box scrolls sideways.
FITS = """[
    document.documentElement.scrollWidth <= window.innerWidth,
    document.querySelector("#changelist .results").scrollWidth
        <= document.querySelector("#changelist .results").clientWidth,
]"""
LONG_NAME = "reports.quarterly.build_the_consolidated_revenue_report_for_every_region_and_currency"


def seed_long_values(client: QueueClient) -> None:
    """Jobs and dead letters whose names, queues and errors are as long as the columns allow."""
    name = LONG_NAME
    queue = "reports-consolidated-revenue-eu-west-and-us-east-and-ap-south-1"[:63]
    worker = "batch-worker-with-a-very-long-host-name.internal.example.com:123456"
    error = "ReportError: " + "the upstream warehouse refused the query because " * 6
    for i in range(3):
        client.push(f"{name}_{i}", {"region": "eu"}, queue=queue, unique_key=f"{name}:{i}")
    client.pull(queue, worker_id=worker)
    client.push(name, {}, queue=queue, delay=3600)
    for _ in range(3):
        bury(client, name, {"region": "eu"}, queue, error)
    DeadLetter.objects.update(worker_id=worker)


@pytest.mark.parametrize("sidebar", ["open", "folded"])
def test_the_lists_fit_a_laptop_screen(browser, live_server, queue, operator, tmp_path, sidebar):
    seed_long_values(queue)
    context = browser.new_context(viewport=LAPTOP)
    if sidebar == "folded":
        context.add_init_script("localStorage.setItem('django.admin.navSidebarIsOpen', 'false')")
    page = context.new_page()
    page.set_default_timeout(15_000)
    try:
        log_in(page, live_server.url)
        admin = f"{live_server.url}/admin/django_jobqueue"
        for label, url in (("jobs", f"{admin}/job/"), ("dead-letters", f"{admin}/deadletter/")):
            response = page.goto(url)
            assert response is not None and response.status == 200, url
            # To look at: the test's temporary directory.
            page.screenshot(path=str(tmp_path / f"laptop-{label}-{sidebar}.png"))
            assert page.evaluate(FITS) == [True, True], label
            # The newest row's name is cut to its column, and whole in its tooltip.
            cut = page.locator("#result_list tbody tr").first.locator(".jq-cut").first
            assert cut.get_attribute("title") == LONG_NAME
            assert cut.evaluate("element => element.scrollWidth > element.clientWidth"), "cut, not wrapped"
    finally:
        context.close()
