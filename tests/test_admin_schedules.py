"""The Schedules page through Django's test client: listing, pause, resume, run now, permissions.

The schedules are declared in the settings and by jobs registered here; their
rows come from the page itself (before any worker ran) or from ``ScheduleBook``,
as a worker writes them.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from django.contrib.admin.models import ADDITION, CHANGE, LogEntry
from django.db import connection
from django.test import Client, override_settings
from django.urls import reverse

from django_jobqueue import job, registry
from django_jobqueue.models import Job, Schedule
from django_jobqueue.queue.schedules import ScheduleBook
from django_jobqueue.schedules import declared_schedules
from tests.test_queue_concurrency import run_threads

SCHEDULES_URL = reverse("admin:django_jobqueue_schedule_changelist")
REPORT, PING = "tests.schedules.report", "tests.schedules.ping"
DECLARED = {
    "nightly-report": {
        "job": REPORT,
        "cron": "0 3 * * *",
        "timezone": "Europe/Amsterdam",
        "payload": {"kind": "daily", "api_token": "s3cret-value"},
        "queue": "reports",
        "catch_up": "all",
    },
    "ping": {"job": PING, "every": 30},
}
SETTINGS = {"SCHEDULES": DECLARED, "REDACT_PAYLOAD_KEYS": ["api_token"]}


def schedule_url(row_id: Any, view: str = "change") -> str:
    return reverse(f"admin:django_jobqueue_schedule_{view}", args=[row_id])


def text(response: Any) -> str:
    return response.content.decode()


def messages_of(response: Any) -> list[str]:
    """The messages shown, as text (a link's tags taken out)."""
    if not response.context:
        return []
    return [re.sub(r"<[^>]+>", "", str(message)) for message in response.context["messages"]]


def token_in(page: str) -> str:
    """The one-time token of the first form on ``page`` that carries one."""
    found = re.search(r'name="once" value="([0-9a-f]{32})"', page)
    assert found, "the form carries a one-time token"
    return found.group(1)


def row(name: str) -> Schedule:
    return Schedule.objects.get(name=name)


# -- fixtures --------------------------------------------------------------------


@pytest.fixture(autouse=True)
def declared(unregistered: Callable[..., None]) -> Iterator[None]:
    """Two registered jobs and two schedules of them in the settings."""
    unregistered(REPORT, PING)

    @job(name=REPORT)
    def report(kind: str = "", api_token: str = "") -> None: ...

    @job(name=PING)
    def ping() -> None: ...

    with override_settings(JOBQUEUE=SETTINGS):
        yield
    registry.unregister(REPORT)
    registry.unregister(PING)


@pytest.fixture
def changer(login: Callable[..., Client]) -> Client:
    """May change schedules, and see nothing of the jobs."""
    return login("changer", "change_schedule")


@pytest.fixture
def viewer(login: Callable[..., Client]) -> Client:
    return login("viewer", "view_schedule", "view_job")


def post_action(client: Client, action: str, rows: list[Schedule], **extra: Any) -> Any:
    data = {"action": action, "_selected_action": [str(r.pk) for r in rows], "index": "0", **extra}
    return client.post(SCHEDULES_URL, data, follow=True)


def run_now_action(client: Client, rows: list[Schedule], token: str | None = None) -> Any:
    token = token or token_in(text(client.get(SCHEDULES_URL)))
    return post_action(client, "run_now", rows, once=token)


# -- the list --------------------------------------------------------------------


def test_the_list_shows_every_declared_schedule_before_any_worker_ran(operator):
    assert not Schedule.objects.exists()
    page = text(operator.get(SCHEDULES_URL))
    assert set(Schedule.objects.values_list("name", flat=True)) == {"nightly-report", "ping"}
    for shown in ("nightly-report", "ping", REPORT, PING, "cron 0 3 * * * (Europe/Amsterdam)", "every 30 s"):
        assert shown in page
    assert ">all<" in page and ">latest<" in page, "catch_up"
    assert page.count('class="jq-pill jq-active"') == 2
    assert "2 schedules" in page
    # Opening it again changes nothing.
    before = list(Schedule.objects.order_by("pk").values_list("pk", "handled_through", "updated_at"))
    operator.get(SCHEDULES_URL)
    assert list(Schedule.objects.order_by("pk").values_list("pk", "handled_through", "updated_at")) == before


def test_the_list_shows_next_and_last_fire_with_a_link_to_the_last_job(operator, queue):
    book = ScheduleBook()
    schedules = declared_schedules()
    book.sync(schedules)
    ping = schedules[1]
    assert ping.name == "ping"
    # A worker fired "ping" for the fire time before the one now (and stored when it fires next).
    start = book.now() - timedelta(seconds=70)
    Schedule.objects.filter(name="ping").update(handled_through=start, next_fire_at=start)
    fired = book.fire_due(schedules)
    [ping_fired] = [each for each in fired if each.schedule == "ping"]
    last_job = ping_fired.job_ids[-1]

    page = text(operator.get(SCHEDULES_URL))
    ping_row = row("ping")
    assert ping_row.last_job_id == last_job
    assert (
        f'href="{reverse("admin:django_jobqueue_job_change", args=[last_job])}">job #{last_job}</a>' in page
    )
    # How far away each fire is, its date in the tooltip.
    next_fire = ping.next_after(book.now())
    assert (
        f'title="fires at {next_fire:%Y-%m-%d %H:%M:%S}">in ' in page
        or f'title="fires at {next_fire + timedelta(seconds=30):%Y-%m-%d %H:%M:%S}">in ' in page
    )
    assert re.search(r'title="fired at [-\d]+ [:\d]+">\d+ (s|min) ago</span> · <a href=', page)

    # The job gone: the number stays, without a link.
    Job.objects.filter(pk=last_job).delete()
    page = text(operator.get(SCHEDULES_URL))
    assert f'title="no longer kept (pruned)">job #{last_job}</span>' in page
    assert f">job #{last_job}</a>" not in page


def test_the_list_reads_the_last_jobs_in_one_query(operator, queue, django_assert_max_num_queries):
    book = ScheduleBook()
    book.sync(declared_schedules())
    for name in ("ping", "nightly-report"):
        Schedule.objects.filter(name=name).update(last_job_id=queue.push(PING, {}).pk)
    operator.get(SCHEDULES_URL)
    with django_assert_max_num_queries(14) as captured:
        operator.get(SCHEDULES_URL)
    job_table = Job._meta.db_table
    quoted = f"FROM {connection.ops.quote_name(job_table)}"
    reads = [q["sql"] for q in captured.captured_queries if quoted in q["sql"]]
    assert len(reads) == 1, reads


def test_a_row_of_another_declaration_and_an_undeclared_row_show_as_such(operator):
    book = ScheduleBook()
    other = {**DECLARED, "ping": {"job": PING, "every": 60}, "weekly": {"job": PING, "every": 604800}}
    with override_settings(JOBQUEUE={**SETTINGS, "SCHEDULES": other}):
        book.sync(declared_schedules())  # as workers with other code would
    page = text(operator.get(SCHEDULES_URL))
    assert "other declaration" in page and "not declared" in page
    # The page takes no row from them: it only adds the rows that are missing.
    assert row("ping").definition["every"] == 60
    assert Schedule.objects.filter(name="weekly").exists()

    detail = text(operator.get(schedule_url(row("ping").pk)))
    assert "The row&#x27;s declaration" in detail or "The row's declaration" in detail
    assert "every 30 s" in detail and "&quot;every&quot;: 60" in detail or '"every": 60' in detail
    weekly = text(operator.get(schedule_url(row("weekly").pk)))
    assert "every 604800 s" in weekly and "Not declared by this process" in weekly
    assert "Run now" not in weekly, "an undeclared schedule cannot be run from here"


def test_the_detail_page_shows_the_definition_with_the_payload_redacted(operator):
    operator.get(SCHEDULES_URL)
    page = text(operator.get(schedule_url(row("nightly-report").pk)))
    assert "cron 0 3 * * * (Europe/Amsterdam)" in page
    assert "[redacted]" in page and "s3cret-value" not in page
    assert "daily" in page and "reports" in page
    assert 'name="once"' in page and ">Pause<" in page and ">Run now<" in page
    assert "<input" not in re.sub(
        r'<input type="(hidden|submit)"[^>]*>', "", page.split('id="content-main"')[1]
    ), "read-only"


@pytest.mark.parametrize(("term", "found"), [("ping", ["ping"]), (REPORT, ["nightly-report"]), ("pin", [])])
def test_search_finds_a_name_or_a_job_exactly(operator, term, found):
    operator.get(SCHEDULES_URL)
    response = operator.get(SCHEDULES_URL, {"q": term})
    assert [r.name for r in response.context["cl"].result_list] == found


def test_a_bad_declaration_is_said_and_the_page_still_answers(operator):
    operator.get(SCHEDULES_URL)
    with override_settings(JOBQUEUE={"SCHEDULES": {"broken": {"job": PING, "cron": "61 * * * *"}}}):
        response = operator.get(SCHEDULES_URL, follow=True)
    assert response.status_code == 200
    assert any("cannot be read" in m and "broken" in m for m in messages_of(response))


# -- pause and resume --------------------------------------------------------------


def test_pause_and_resume_change_the_rows_and_are_logged(operator):
    operator.get(SCHEDULES_URL)
    ping, report = row("ping"), row("nightly-report")

    response = post_action(operator, "pause", [ping])
    assert response.redirect_chain[-1][0].endswith(SCHEDULES_URL), "POST, then redirect"
    assert row("ping").paused and not row("nightly-report").paused
    assert any(m.startswith("Paused “ping”") for m in messages_of(response))
    page = text(response)
    assert 'class="jq-pill jq-paused"' in page

    response = post_action(operator, "pause", [ping, report])
    assert row("nightly-report").paused
    assert "“ping” is already paused." in messages_of(response)

    response = post_action(operator, "resume", [ping])
    assert not row("ping").paused
    assert any(m.startswith("Resumed “ping”") for m in messages_of(response))

    entries = list(LogEntry.objects.order_by("pk").values_list("object_id", "action_flag", "change_message"))
    assert [(oid, flag, message.split(":")[0]) for oid, flag, message in entries] == [
        (str(ping.pk), CHANGE, "Paused."),
        (str(report.pk), CHANGE, "Paused."),
        (str(ping.pk), CHANGE, "Resumed"),
    ]


def test_the_buttons_pause_and_resume_one_schedule(operator):
    operator.get(SCHEDULES_URL)
    ping = row("ping")
    response = operator.post(schedule_url(ping.pk, "pause"))
    assert response.status_code == 302 and response.url == schedule_url(ping.pk)
    assert row("ping").paused
    page = text(operator.get(schedule_url(ping.pk)))
    assert ">Resume<" in page and ">Pause<" not in page
    operator.post(schedule_url(ping.pk, "resume"))
    assert not row("ping").paused
    assert LogEntry.objects.count() == 2


# -- run now -----------------------------------------------------------------------


def test_run_now_enqueues_one_job_per_click_and_logs_it(operator):
    operator.get(SCHEDULES_URL)
    report = row("nightly-report")
    token = token_in(text(operator.get(SCHEDULES_URL)))

    response = post_action(operator, "run_now", [report], once=token)
    [made] = Job.objects.all()
    assert (made.name, made.queue, made.payload) == (
        REPORT,
        "reports",
        {"kind": "daily", "api_token": "s3cret-value"},
    )
    assert response.redirect_chain[-1][0].endswith(SCHEDULES_URL)
    assert f"Ran now: “nightly-report” as job #{made.pk}." in messages_of(response)
    assert f'href="{reverse("admin:django_jobqueue_job_change", args=[made.pk])}"' in text(response)

    # The same form again (a double submit, the browser resending it): nothing more.
    response = post_action(operator, "run_now", [report], once=token)
    assert Job.objects.count() == 1
    assert any("already ran from this form" in m for m in messages_of(response))

    # A new page, a new click: a second job.
    run_now_action(operator, [report])
    assert Job.objects.count() == 2

    on_schedule = LogEntry.objects.filter(object_id=str(report.pk), action_flag=CHANGE).order_by("pk")
    on_jobs = LogEntry.objects.filter(action_flag=ADDITION).order_by("pk")
    assert on_schedule.count() == 2 and f"job #{made.pk}" in on_schedule.first().change_message
    assert [entry.object_id for entry in on_jobs][0] == str(made.pk)
    assert on_jobs.count() == 2


def test_run_now_without_a_token_runs_nothing(operator):
    operator.get(SCHEDULES_URL)
    for once in (None, "", "x' OR 1=1 --", "0" * 31, "A" * 32):
        extra = {} if once is None else {"once": once}
        response = post_action(operator, "run_now", [row("ping")], **extra)
        assert any("no one-time token" in m for m in messages_of(response))
    assert not Job.objects.exists() and not LogEntry.objects.exists()


def test_the_run_now_button_goes_to_the_job_and_runs_once(operator):
    operator.get(SCHEDULES_URL)
    ping = row("ping")
    token = token_in(text(operator.get(schedule_url(ping.pk))))
    response = operator.post(schedule_url(ping.pk, "run_now"), {"once": token})
    [made] = Job.objects.all()
    assert response.status_code == 302 and response.url == reverse(
        "admin:django_jobqueue_job_change", args=[made.pk]
    )
    response = operator.post(schedule_url(ping.pk, "run_now"), {"once": token}, follow=True)
    assert Job.objects.count() == 1
    assert response.redirect_chain[-1][0] == schedule_url(ping.pk)
    assert any("already ran from this form" in m for m in messages_of(response))
    # Only POST: a reload of the button's URL runs nothing.
    assert operator.get(schedule_url(ping.pk, "run_now")).status_code == 405


def test_run_now_of_a_schedule_no_longer_declared_says_so(operator):
    operator.get(SCHEDULES_URL)
    gone = row("ping")
    with override_settings(
        JOBQUEUE={**SETTINGS, "SCHEDULES": {"nightly-report": DECLARED["nightly-report"]}}
    ):
        response = run_now_action(operator, [gone])
        assert "“ping” cannot be run now: this process declares no schedule by that name." in messages_of(
            response
        )
        response = operator.post(schedule_url(gone.pk, "run_now"), {"once": "1" * 32}, follow=True)
        assert any("cannot be run now" in m for m in messages_of(response))
    assert not Job.objects.exists()


def test_clicks_at_once_make_one_job(operator):
    """The same form posted four times at the same moment: the row's lock lets one through."""
    operator.get(SCHEDULES_URL)
    ping = row("ping")
    token = token_in(text(operator.get(schedule_url(ping.pk))))

    def click(_: int) -> int:
        browser = Client()
        browser.cookies = operator.cookies
        return browser.post(schedule_url(ping.pk, "run_now"), {"once": token}).status_code

    assert run_threads(4, click) == [302] * 4
    assert Job.objects.count() == 1
    assert LogEntry.objects.filter(object_id=str(ping.pk)).count() == 1


# -- permissions and bad input ------------------------------------------------------


def test_a_viewer_sees_the_page_and_no_action(viewer, operator):
    operator.get(SCHEDULES_URL)
    ping = row("ping")
    page = text(viewer.get(SCHEDULES_URL))
    assert "ping" in page and 'name="action"' not in page
    detail = text(viewer.get(schedule_url(ping.pk)))
    assert ">Pause<" not in detail and ">Run now<" not in detail
    for view in ("pause", "resume", "run_now"):
        assert viewer.post(schedule_url(ping.pk, view), {"once": "1" * 32}).status_code == 403
    response = post_action(viewer, "pause", [ping])
    assert not row("ping").paused
    response = post_action(viewer, "run_now", [ping], once="2" * 32)
    assert not Job.objects.exists() and not LogEntry.objects.exists()
    assert response.status_code == 200


def test_change_permission_alone_acts_and_links_no_job(changer):
    changer.get(SCHEDULES_URL)
    ping = row("ping")
    response = post_action(changer, "pause", [ping])
    assert row("ping").paused
    response = run_now_action(changer, [ping])
    [made] = Job.objects.all()
    assert f"Ran now: “ping” as job #{made.pk}." in messages_of(response)
    assert f"/job/{made.pk}/" not in text(response)
    token = token_in(text(changer.get(schedule_url(ping.pk))))
    response = changer.post(schedule_url(ping.pk, "run_now"), {"once": token})
    assert response.url == schedule_url(ping.pk), "no job page for a user who cannot see jobs"
    Schedule.objects.filter(pk=ping.pk).update(last_job_id=made.pk, last_fire_at=made.run_at)
    page = text(changer.get(SCHEDULES_URL))
    assert f"job #{made.pk}" in page and f"/job/{made.pk}/" not in page


def test_anonymous_is_sent_to_log_in(queue):
    client = Client()
    for url in (SCHEDULES_URL, schedule_url(1), schedule_url(1, "pause"), schedule_url(1, "run_now")):
        response = client.post(url) if url.endswith(("/pause/", "/run-now/")) else client.get(url)
        assert response.status_code == 302 and "/login/" in response.url
    assert not Schedule.objects.exists(), "nothing happens before logging in"


@pytest.mark.parametrize("bad", ["abc", "0", "-1", "99999999999999999999", "1%00", "ping", str(2**63)])
def test_bad_ids_are_no_such_schedule(operator, bad):
    operator.get(SCHEDULES_URL)
    response = operator.get(f"{SCHEDULES_URL}{bad}/change/", follow=True)
    assert response.status_code == 200
    assert any("doesn’t exist" in m for m in messages_of(response))
    response = operator.post(f"{SCHEDULES_URL}{bad}/pause/", follow=True)
    assert response.status_code == 200
    assert any("doesn’t exist" in m for m in messages_of(response))
    assert not Schedule.objects.filter(paused=True).exists()


def test_forged_selections_and_unknown_actions_change_nothing(operator):
    operator.get(SCHEDULES_URL)
    response = operator.post(
        SCHEDULES_URL, {"action": "pause", "_selected_action": ["1 OR 1=1"], "index": "0"}, follow=True
    )
    assert "A selected id was malformed; nothing was changed." in messages_of(response)
    response = post_action(operator, "delete_selected", [row("ping")])
    assert response.status_code == 200 and Schedule.objects.count() == 2
    response = post_action(operator, "drop_table", [row("ping")])
    assert response.status_code == 200
    assert not Schedule.objects.filter(paused=True).exists() and not Job.objects.exists()
    assert operator.get(f"{SCHEDULES_URL}?paused__exact=1", follow=True).status_code == 200


def test_no_add_and_no_delete(operator):
    operator.get(SCHEDULES_URL)
    assert operator.get(reverse("admin:django_jobqueue_schedule_add")).status_code == 403
    assert operator.post(schedule_url(row("ping").pk, "delete"), {"post": "yes"}).status_code == 403
    assert Schedule.objects.count() == 2


def test_the_index_lists_schedules(operator):
    page = text(operator.get(reverse("admin:index")))
    assert SCHEDULES_URL in page


def test_the_relative_times_never_fail_near_the_ends_of_time(operator):
    operator.get(SCHEDULES_URL)
    Schedule.objects.filter(name="ping").update(last_fire_at=datetime(1, 1, 1, tzinfo=UTC))
    assert operator.get(SCHEDULES_URL).status_code == 200
