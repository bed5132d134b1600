"""The admin in a real browser (Debian's chromium, driven by Playwright) against a live server.

Three stories end to end: log in, open the dead letters, open one, retry it,
and see it back on its queue; open the schedules, pause one, run one now, and
see its job; pause a queue from the overview and resume it. A second test
renders the main pages with realistic data and saves screenshots: to a
temporary directory, or to the docs with ``JOBQUEUE_SCREENSHOTS=docs/img``.
A third opens every page with long names, errors and worker ids at the
screens operators have (1366×768 with the navigation sidebar open and
folded, 1920×1080) and measures what fits; its screenshots are in the test's
temporary directory, to look at.
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
from django_jobqueue.models import Batch, DeadLetter, Job, Schedule, Worker
from django_jobqueue.queue.schedules import ScheduleBook
from django_jobqueue.schedules import declared_schedules

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


def on_new_job_page(page: Any, name: str) -> tuple[Job, str]:
    """Wait for the page of the job named ``name`` an action made; return it and the page's message.

    The job is the only one of its name, and ready.
    """
    page.wait_for_url("**/job/*/change/")
    made = Job.objects.get(name=name)
    assert page.url.endswith(f"/job/{made.pk}/change/")
    assert page.locator(".field-status_detail .jq-pill").inner_text() == "ready"
    return made, page.locator(".messagelist").inner_text().strip()


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

    job, message = on_new_job_page(page, "send_otp")
    assert message == f"Dead letter #{letter.pk} is back on queue “sms” as job #{job.pk}."

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

    made, message = on_new_job_page(page, "reports.nightly")
    assert message == f"Ran now: “nightly-report” as job #{made.pk}."
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
        # Where a value stands to its label is the admin's: beside it (Django 5.2), or under it
        # (Django 6). The list's box stands where the name's does, its first line at its top.
        name_label = page.locator(".field-name label").bounding_box()
        label = page.locator(f".field-{field} label").bounding_box()
        box = page.locator(f".field-{field} div.readonly").bounding_box()
        assert label is not None and name_label is not None and box is not None, field
        below, name_below = box["y"] - label["y"], value["y"] - name_label["y"]
        assert abs(below - name_below) <= 2, (
            f"{field} {below:.0f} px below its label, the name {name_below:.0f}"
        )
        assert 0 <= link["y"] - box["y"] <= 12, (
            f"{field}'s first line {link['y'] - box['y']:.0f} px down its box"
        )


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


# -- the screens an operator has ----------------------------------------------------

LAPTOP = {"width": 1366, "height": 768}
DESKTOP = {"width": 1920, "height": 1080}
# Each screen: its viewport, and whether the admin's navigation sidebar is open (its default).
SCREENS = {
    "1366-sidebar-open": (LAPTOP, True),
    "1366-sidebar-folded": (LAPTOP, False),
    "1920-sidebar-open": (DESKTOP, True),
}
LONG_NAME = "reports.quarterly.build_the_consolidated_revenue_report_for_every_region_and_currency"
# A name of ordinary length, but long: whole on a desktop, cut only where the column must be narrower.
SHOP = "shop.integrations.partner_webhook_delivery"
LONG_QUEUE = "reports-consolidated-revenue-eu-west-and-us-east-and-ap-south-1"[:63]
LONG_WORKER = "batch-worker-with-a-very-long-host-name.internal.example.com:123456"
LONG_ERROR = "ReportError: " + "the upstream warehouse refused the query because " * 6
# The narrowest a name column may be on the smallest screen (1366 px, sidebar open): about 26
# characters of the admin's 13 px font, "shop.integrations.partner_…", the app, the module and
# the start of the function, which tells one job from another; most names are shorter and show whole.
READABLE_NAME = 180
# An id column is its widest id, its padding and the sort arrow, no more.
ID_SLACK = 40

# Neither the page nor the list's own box scrolls sideways.
FITS = """() => {
    const box = document.querySelector("#changelist .results");
    return [
        document.documentElement.scrollWidth <= window.innerWidth,
        box === null || box.scrollWidth <= box.clientWidth,
    ];
}"""
# The elements of ``selector`` that stand out past the page's content into its margin.
PAST_CONTENT = """selector => {
    const right = document.querySelector("#content").getBoundingClientRect().right
        - parseFloat(getComputedStyle(document.querySelector("#content")).paddingRight);
    return [...document.querySelectorAll(selector)]
        .filter(element => element.getBoundingClientRect().right > right + 0.5)
        .map(element => element.className);
}"""
# The lines an element's text takes: the boxes of its text and inline boxes, grouped by the
# line they stand on (a pill's box and the text inside it are on one line).
LINES = """element => {
    const range = document.createRange();
    range.selectNodeContents(element);
    const boxes = [...range.getClientRects()].filter(box => box.width > 0 && box.height > 0);
    boxes.sort((a, b) => a.top - b.top);
    let lines = 0, bottom = -Infinity;
    for (const box of boxes) {
        if (box.top >= bottom - 2) { lines += 1; bottom = box.bottom; }
        else bottom = Math.max(bottom, box.bottom);
    }
    return lines;
}"""
# Every cell of a list on one line: a list is read across.
WRAPPED_CELLS = f"""() => {{
    const lines = {LINES};
    return [...document.querySelectorAll("#result_list tbody :is(td, th)")]
        .filter(cell => lines(cell) > 1).map(cell => cell.className + ": " + cell.textContent.trim());
}}"""
# A pill cut by its own box, standing out of its cell, or out of sight past the list's box.
CLIPPED_PILLS = """() => {
    const results = document.querySelector("#changelist .results");
    const seen = results.getBoundingClientRect().left + results.clientWidth;
    return [...document.querySelectorAll("#result_list .jq-pill")].filter(pill => {
        const cell = pill.closest("td, th").getBoundingClientRect(), box = pill.getBoundingClientRect();
        return pill.scrollWidth > pill.clientWidth || box.left < cell.left - 0.5
            || box.right > cell.right + 0.5 || box.right > seen + 0.5;
    }).map(pill => pill.textContent);
}"""
# The width of the list's column headed ``header``.
COLUMN_WIDTH = """header => [...document.querySelectorAll("#result_list thead th")]
    .find(th => th.textContent.trim().toLowerCase() === header).getBoundingClientRect().width"""
# How much wider the id column is than its widest id.
ID_COLUMN_SLACK = """() => {
    const column = document.querySelector("#result_list thead th.column-id").getBoundingClientRect().width;
    const ids = [...document.querySelectorAll("#result_list tbody .field-id a")];
    return column - Math.max(...ids.map(id => id.getBoundingClientRect().width));
}"""
# A cut text's state: [cut by its column, on one line, its tooltip].
CUT_TEXT = f"""element => [
    element.scrollWidth > element.clientWidth, ({LINES})(element), element.getAttribute("title"),
]"""
# The cells of a table's columns named by their headers that take more than one line.
WRAPPED_COLUMNS = f"""(table, names) => {{
    const lines = {LINES};
    const headers = [...table.querySelectorAll("thead th")].map(th => th.textContent.trim().toLowerCase());
    // (A header read only by screen readers is one pixel wide: its words stand one under the other.)
    const wrapped = [...table.querySelectorAll("thead th")]
        .filter(th => !th.querySelector(".visually-hidden") && lines(th) > 1)
        .map(th => "header " + th.textContent.trim());
    for (const row of table.querySelectorAll("tbody tr")) {{
        for (const name of names) {{
            const cell = row.children[headers.indexOf(name)];
            if (lines(cell) > 1) wrapped.push(name + ": " + cell.textContent.trim());
        }}
    }}
    return wrapped;
}}"""


def takes_anything(**payload: Any) -> None: ...


@pytest.fixture
def long_schedules(queue: QueueClient, unregistered: Any) -> Iterator[None]:
    """Schedules of long names and time zones: one paused, one that fired, one no longer declared."""
    unregistered(SHOP, LONG_NAME)
    for name in (SHOP, LONG_NAME):
        job_function(name=name)(takes_anything)
    declared = {
        "partner-webhook-delivery-sweep": {
            "job": SHOP,
            "cron": "*/5 * * * *",
            "timezone": "Europe/Amsterdam",
        },
        "consolidated-revenue-report-for-every-region": {
            "job": LONG_NAME,
            "cron": "0 3 * * 1-5",
            "timezone": "America/Los_Angeles",
        },
        "ping": {"job": SHOP, "every": 30},
    }
    retired = {**declared, "retired-partner-catalogue-sync": {"job": SHOP, "every": 3600}}
    with override_settings(JOBQUEUE={"SCHEDULES": retired}):
        ScheduleBook().sync(declared_schedules())  # as workers of an earlier release did
    book = ScheduleBook()
    book.pause(["consolidated-revenue-report-for-every-region", "retired-partner-catalogue-sync"])
    fired = queue.push(SHOP, {}, queue="webhooks")
    Schedule.objects.filter(name="partner-webhook-delivery-sweep").update(
        last_fire_at=timezone.now() - timedelta(minutes=3), last_job_id=fired.pk
    )
    with override_settings(JOBQUEUE={"SCHEDULES": declared}):
        yield
    for name in (SHOP, LONG_NAME):
        registry.unregister(name)


def seed_long_values(client: QueueClient) -> int:
    """Rows whose names, queues, errors and worker ids are as long as the columns allow.

    Returns the id of a running job on its third attempt, reporting its progress.
    """
    for i in range(3):
        client.push(f"{LONG_NAME}_{i}", {"region": "eu"}, queue=LONG_QUEUE, unique_key=f"{LONG_NAME}:{i}")
    client.pull(LONG_QUEUE, worker_id=LONG_WORKER)
    client.push(LONG_NAME, {}, queue=LONG_QUEUE, delay=3600)
    client.push("send_otp", {"user_id": "42"}, queue="sms")
    for _ in range(3):
        bury(client, LONG_NAME, {"region": "eu"}, LONG_QUEUE, LONG_ERROR)
    bury(
        client,
        SHOP,
        {"order": 999},
        "webhooks",
        "ConnectionError: " + "partner.example refused the connection " * 5,
    )
    DeadLetter.objects.update(worker_id=LONG_WORKER)

    # Three deliveries on their third attempt: two timed out elsewhere, the third reports how far it got.
    for i in range(3):
        client.push(SHOP, {"order": 1000 + i}, queue="webhooks")
    for worker in ("web-1:3187", "web-2:4121"):
        for job in client.pull_many("webhooks", worker_id=worker, limit=3):
            error = "TimeoutError: partner.example did not answer in 10 s"
            assert client.nack(job, worker_id=worker, error=error, delay=0, timed_out=True)
    running = client.pull_many("webhooks", worker_id=LONG_WORKER, limit=3)
    message = "delivering the order's events to the partner's endpoints, batch 3 of 7"
    reports = [
        (job, {"current": 4_200 * (i + 1), "total": 12_600, "message": message})
        for i, job in enumerate(running)
    ]
    assert len(client.record_progress(reports, worker_id=LONG_WORKER)) == 3

    now = timezone.now()
    for i, (name, finished) in enumerate(((LONG_NAME, True), (SHOP, False), (LONG_NAME, False))):
        Batch.objects.create(
            on_finish=name,
            total=12_000,
            done=9_015 + i,
            failed=120,
            cancelled=3,
            created_at=now - timedelta(hours=2, minutes=i),
            finished_at=now - timedelta(minutes=4) if finished else None,
            callback_job_id=running[0].pk if finished else None,
        )
    client.register_worker(
        LONG_WORKER,
        hostname=LONG_WORKER.partition(":")[0],
        pid=123456,
        queues=[LONG_QUEUE, "webhooks", "sms"],
        concurrency=128,
        concurrency_range=(16, 512),  # the widest concurrency cell: "128 (range 16–512)"
    )
    client.register_worker("web-1:3187", hostname="web-1", pid=3187, queues=[], concurrency=8)
    Worker.objects.filter(worker_id="web-1:3187").update(last_heartbeat=now - timedelta(seconds=48))
    return min(job.pk for job in running)


@pytest.mark.parametrize("screen", list(SCREENS))
def test_the_pages_fit_the_screen(browser, live_server, queue, operator, long_schedules, tmp_path, screen):
    """Each page at the screens operators have, with long values: nothing scrolls sideways, nothing
    is clipped or wrapped, a name has room to be read and an id column no more than its ids'."""
    running = seed_long_values(queue)
    viewport, sidebar_open = SCREENS[screen]
    context = browser.new_context(viewport=viewport)
    if not sidebar_open:
        context.add_init_script("localStorage.setItem('django.admin.navSidebarIsOpen', 'false')")
    page = context.new_page()
    page.set_default_timeout(15_000)
    try:
        log_in(page, live_server.url)
        admin = f"{live_server.url}/admin/django_jobqueue"
        # Each list, and the header of its name column.
        lists = {
            "jobs": ("job/", "name"),
            "running-jobs": ("job/?status=running", "name"),
            "dead-letters": ("deadletter/", "name"),
            "schedules": ("schedule/", "name"),
            "batches": ("batch/", "on finish"),
            "workers": ("worker/", "worker id"),
        }
        for label, (url, name_column) in lists.items():
            response = page.goto(f"{admin}/{url}")
            assert response is not None and response.status == 200, url
            # To look at: the test's temporary directory.
            page.screenshot(path=str(tmp_path / f"{screen}-{label}.png"))
            assert page.evaluate(FITS) == [True, True], label
            assert page.evaluate(WRAPPED_CELLS) == [], label
            assert page.evaluate(CLIPPED_PILLS) == [], label
            width = page.evaluate(COLUMN_WIDTH, name_column)
            assert width >= READABLE_NAME, (label, width)
            if page.locator("#result_list thead th.column-id").count():
                assert page.evaluate(ID_COLUMN_SLACK) <= ID_SLACK, label

        # A long name is cut, whole in its tooltip; an ordinary one whole; SHOP whole on a desktop.
        page.goto(f"{admin}/job/")
        cut, lines, title = page.locator(f'#result_list .jq-cut[title="{LONG_NAME}"]').evaluate(CUT_TEXT)
        assert (cut, lines, title) == (True, 1, LONG_NAME)
        assert page.locator('#result_list .jq-cut[title="send_otp"]').evaluate(CUT_TEXT)[0] is False
        shop = page.locator(f'#result_list .jq-cut[title="{SHOP}"]').first.evaluate(CUT_TEXT)
        assert shop[1:] == [1, SHOP]
        if screen.startswith("1920"):
            assert shop[0] is False, "whole on a desktop"
        # A running job's progress: its bar and its share, not cut.
        page.goto(f"{admin}/job/?status=running")
        for progress in page.locator("#result_list .jq-progress-row").all():
            assert progress.locator("progress").bounding_box()["width"] >= 40
            label = progress.locator(".jq-progress-label")
            assert label.evaluate(
                """element => {
                    const right = element.getBoundingClientRect().right;
                    const results = document.querySelector("#changelist .results");
                    return element.scrollWidth <= element.clientWidth
                        && right <= element.closest("td").getBoundingClientRect().right
                        && right <= results.getBoundingClientRect().left + results.clientWidth;
                }"""
            ), "the share done, in sight"

        # The overview: no header, date or heartbeat on two lines.
        page.goto(f"{admin}/queueoverview/")
        page.screenshot(path=str(tmp_path / f"{screen}-overview.png"), full_page=True)
        assert page.evaluate(FITS) == [True, True]
        assert page.evaluate(PAST_CONTENT, "table.jq-table, .jq-card") == []
        tables = page.locator("table.jq-table").all()
        assert tables
        for table in tables:
            assert table.evaluate(WRAPPED_COLUMNS, []) == []
        workers = page.locator("table.jq-table", has_text="last heartbeat")
        assert workers.evaluate(WRAPPED_COLUMNS, ["started", "last heartbeat"]) == []

        # A job's attempts: worker ids and dates on one line.
        page.goto(f"{admin}/job/{running}/change/")
        page.screenshot(path=str(tmp_path / f"{screen}-job.png"), full_page=True)
        assert page.evaluate(FITS) == [True, True]
        assert page.evaluate(PAST_CONTENT, "table.jq-attempts") == []
        attempts = page.locator("table.jq-attempts")
        assert attempts.locator("tbody tr").count() == 3
        columns = ["attempt", "worker", "started", "duration", "outcome"]
        assert attempts.evaluate(WRAPPED_COLUMNS, columns) == []
    finally:
        context.close()


@pytest.mark.django_db(transaction=True, reset_sequences=True, databases=["default", "second"])
def test_choose_another_queue_database_and_cancel_its_job(page, live_server, queue, operator, tmp_path):
    mine = queue.push("send_welcome_email", {"user_id": "7"}, queue="emails")
    theirs = QueueClient("second").push("send_otp", {"user_id": "42"}, queue="sms")
    assert mine.pk == theirs.pk, "one id, a job in each database"
    with override_settings(JOBQUEUE={"DATABASES": ["second"]}):
        log_in(page, live_server.url)
        page.goto(f"{live_server.url}/admin/django_jobqueue/job/")
        assert "queue of “default”" in page.locator(".jq-database").inner_text()
        assert page.locator("#result_list tbody tr", has_text="emails").count() == 1

        page.select_option(".jq-database select", "second")
        page.get_by_role("button", name="Show").click()
        page.wait_for_url("**/django_jobqueue/job/")
        assert "queue of “second”" in page.locator(".jq-database").inner_text()
        rows = page.locator("#result_list tbody tr")
        assert rows.count() == 1 and "sms" in rows.first.inner_text()
        page.screenshot(
            path=str(Path(os.environ.get("JOBQUEUE_SCREENSHOTS") or tmp_path) / "database-chooser.png")
        )

        rows.first.get_by_role("link", name=str(theirs.pk)).click()
        page.wait_for_url(f"**/job/{theirs.pk}/change/")
        page.get_by_role("button", name="Cancel").click()
        page.wait_for_url(f"**/job/{theirs.pk}/change/")
    assert Job.objects.using("second").get(pk=theirs.pk).status == "cancelled"
    assert Job.objects.using("default").get(pk=mine.pk).status == "ready"
