"""The admin through Django's test client: every page, action and permission, and bad input.

Each action must change rows only through QueueClient, leave a LogEntry per row
changed, and change nothing at all for a user without the permission, however
the request was forged.
"""

from __future__ import annotations

import re
import zoneinfo
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from django.contrib.admin import ModelAdmin
from django.contrib.admin.models import ADDITION, CHANGE, DELETION, LogEntry
from django.contrib.admin.views.main import ChangeList
from django.db import connection
from django.test import Client, override_settings
from django.test.utils import CaptureQueriesContext
from django.urls import reverse
from django.utils import timezone

from django_jobqueue import QueueClient
from django_jobqueue.admin import base as admin_base
from django_jobqueue.admin.display import timestamp
from django_jobqueue.admin.jobs import JobAdmin
from django_jobqueue.models import DeadLetter, Job, Worker

JOBS = reverse("admin:django_jobqueue_job_changelist")
DEAD = reverse("admin:django_jobqueue_deadletter_changelist")
OVERVIEW = reverse("admin:django_jobqueue_queueoverview_changelist")
WORKERS = reverse("admin:django_jobqueue_worker_changelist")
RETRY_MATCHING = reverse("admin:django_jobqueue_deadletter_retry_matching")
INDEX = reverse("admin:index")


def job_url(job_id: Any, view: str = "change") -> str:
    return reverse(f"admin:django_jobqueue_job_{view}", args=[job_id])


def dead_url(letter_id: Any, view: str = "change") -> str:
    return reverse(f"admin:django_jobqueue_deadletter_{view}", args=[letter_id])


def text(response: Any) -> str:
    return response.content.decode()


def messages_of(response: Any) -> list[str]:
    return [str(message) for message in response.context["messages"]] if response.context else []


# -- fixtures --------------------------------------------------------------------


VIEW_ONLY = ("view_job", "view_deadletter", "view_worker")


@pytest.fixture
def viewer(login: Callable[..., Client]) -> Client:
    return login("viewer", *VIEW_ONLY)


def make_dead(client: QueueClient, /, name: str = "tests.send_otp", **options: Any) -> DeadLetter:
    """A dead letter made the real way: a claimed job failed for good."""
    payload = options.pop("payload", {"user_id": "42"})
    error = options.pop("error", "ProviderError: number not on WhatsApp")
    job = client.push(name, payload, **options)
    Job.objects.filter(pk=job.pk).update(status="running", locked_by="web-1:77", attempts=1)
    tb = 'Traceback (most recent call last):\n  File "jobs.py", line 9, in send_otp\n' + error
    assert client.fail(job.pk, worker_id="web-1:77", error=error, traceback=tb)
    return DeadLetter.objects.get(job_id=job.pk)


@pytest.fixture
def jobs(queue: QueueClient) -> dict[str, Job]:
    """One job in each state, on two queues."""
    made = {
        "due": queue.push("tests.send_otp", {"user_id": "1"}, queue="emails", unique_key="otp:1"),
        "scheduled": queue.push("tests.rebuild_index", {}, queue="reports", delay=3600),
        "running": queue.push("tests.send_otp", {"user_id": "2"}, queue="emails", priority=50),
        "done": queue.push("tests.send_otp", {"user_id": "3"}, queue="emails", unique_key="otp:3"),
        "cancelled": queue.push("tests.rebuild_index", {}, queue="reports"),
    }
    claimed = {job.pk: job for job in queue.pull_many("emails", worker_id="web-1:77", limit=3)}
    queue.ack(claimed[made["done"].pk], worker_id="web-1:77", result={"sent": True})
    queue.release(claimed[made["due"].pk], worker_id="web-1:77")
    queue.cancel(made["cancelled"])
    assert {j.status for j in Job.objects.all()} == {"ready", "running", "done", "cancelled"}
    return {key: Job.objects.get(pk=job.pk) for key, job in made.items()}


def log_entries(flag: int | None = None) -> list[LogEntry]:
    entries = LogEntry.objects.order_by("pk")
    return list(entries.filter(action_flag=flag) if flag is not None else entries)


def post_action(client: Client, url: str, action: str, ids: list[int], **extra: Any) -> Any:
    data = {"action": action, "_selected_action": [str(pk) for pk in ids], "index": "0", **extra}
    return client.post(url, data, follow=True)


# -- the job list and a job's page -------------------------------------------------


def test_job_list_shows_each_column(operator, jobs):
    page = text(operator.get(JOBS))
    for column in ("Name", "Queue", "Status", "Priority", "Attempts", "Progress", "When"):
        assert f"<span>{column}</span>" in page, column
    assert 'title="claimed by web-1:77">running<' in page, "the running job's owner, in its pill"
    assert "1 / 5" in page and "scheduled" in page and "cancelled" in page
    assert "5 jobs" in page
    # When, beside the status: a ready job due for so long, a scheduled one due in so long, a
    # running one claimed so long ago, a finished one ended so long ago; the date in the tooltip.
    enqueued = f"enqueued at {timestamp(jobs['due'].created_at)}"
    assert f'title="due since {timestamp(jobs["due"].run_at)}; {enqueued}">for ' in page
    assert f'title="runs at {timestamp(jobs["scheduled"].run_at)}; enqueued at ' in page
    assert ">in 59 min<" in page or ">in 1 h<" in page
    running = jobs["running"]
    assert f'title="claimed at {timestamp(running.last_attempted_at)}; enqueued at ' in page
    assert f'title="finished at {timestamp(jobs["done"].finished_at)}; enqueued at ' in page
    assert f'title="finished at {timestamp(jobs["cancelled"].finished_at)}; enqueued at ' in page
    assert page.count(" ago</span>") == 2, "done and cancelled"


@pytest.mark.parametrize(("url", "rows"), [(JOBS, "jobs"), (DEAD, "letters")])
def test_list_rows_carry_djangos_own_checkbox_and_links(operator, request, url, rows):
    """Made without a template render or a reverse() per row, yet the markup Django would make."""
    request.getfixturevalue(rows)
    response = operator.get(url)
    changelist = response.context["cl"]
    page = text(response)
    assert len(changelist.result_list) >= 3
    for row in changelist.result_list:
        checkbox = changelist.model_admin.action_checkbox(row)
        assert checkbox == ModelAdmin.action_checkbox(changelist.model_admin, row)
        assert checkbox in page
        link = changelist.url_for_result(row)
        assert link == ChangeList.url_for_result(changelist, row)
        assert f'href="{link}"' in page and link.endswith(f"/{row.pk}/change/")


@pytest.mark.parametrize(
    ("query", "expected"),
    [
        ("status=due", ["due"]),
        ("status=scheduled", ["scheduled"]),
        ("status=ready", ["due", "scheduled"]),
        ("status=running", ["running"]),
        ("status=done", ["done"]),
        ("status=cancelled", ["cancelled"]),
        ("queue=reports", ["scheduled", "cancelled"]),
        ("name=tests.send_otp", ["due", "running", "done"]),
        ("queue=emails&status=done&name=tests.send_otp", ["done"]),
    ],
)
def test_job_list_filters(operator, jobs, query, expected):
    response = operator.get(f"{JOBS}?{query}")
    shown = {job.pk for job in response.context["cl"].result_list}
    assert shown == {jobs[key].pk for key in expected}


def test_job_filters_offer_the_queues_and_names_present(operator, jobs):
    page = text(operator.get(JOBS))
    for value in ("?queue=emails", "?queue=reports", "?name=tests.send_otp", "?name=tests.rebuild_index"):
        assert value in page


@pytest.mark.parametrize(
    ("term", "expected"),
    [
        ("{due}", ["due"]),
        ("#{done}", ["done"]),
        ("tests.rebuild_index", ["scheduled", "cancelled"]),
        ("otp:3", ["done"]),
    ],
)
def test_job_search_by_id_name_or_unique_key(operator, jobs, term, expected):
    term = term.format(**{key: job.pk for key, job in jobs.items()})
    response = operator.get(JOBS, {"q": term})
    assert {job.pk for job in response.context["cl"].result_list} == {jobs[key].pk for key in expected}


def test_job_search_by_concurrency_key_finds_ready_and_running_jobs_only(operator, queue):
    # The key's indexes hold ready and running jobs: a finished job is found by its id or name.
    pushed = [
        queue.push("tests.tenant_sync", {"i": i}, concurrency_key="tenant:acme", concurrency_limit=5)
        for i in range(3)
    ]
    running, done = queue.pull_many("default", worker_id="web-1:77", limit=2)
    queue.ack(done, worker_id="web-1:77")
    response = operator.get(JOBS, {"q": "tenant:acme"})
    assert {job.pk for job in response.context["cl"].result_list} == {running.pk, pushed[2].pk}


def test_job_search_joins_every_way_a_term_matches(operator, queue):
    # One term, three jobs: one by its name, one by its unique key, one by its concurrency key.
    by_name = queue.push("billing", {})
    by_unique_key = queue.push("tests.charge", {}, unique_key="billing")
    by_key = queue.push("tests.charge", {}, concurrency_key="billing", concurrency_limit=1)
    queue.push("tests.charge", {}, unique_key="billing:2")
    response = operator.get(JOBS, {"q": "billing"})
    found = [job.pk for job in response.context["cl"].result_list]
    assert found == [by_key.pk, by_unique_key.pk, by_name.pk], "each once, newest first"
    assert "3 jobs" in text(response)


def test_a_long_job_list_is_counted_only_up_to_the_cap(operator, queue, monkeypatch):
    monkeypatch.setattr(admin_base.CappedPaginator, "cap", 5)
    for i in range(8):
        queue.push("tests.noop", {"i": i})
    response = operator.get(JOBS)
    assert "more than 5 jobs" in text(response)
    assert response.context["cl"].paginator.capped
    assert operator.get(JOBS, {"p": "999"}).status_code == 200, "a page past the cap shows the last page"


@pytest.mark.parametrize("jobs_of_the_name", [3, 7])
def test_a_search_runs_once_for_its_count_and_its_page(operator, queue, monkeypatch, jobs_of_the_name):
    """The matching ids are read once; the count and each page come from them (one page, and three)."""
    monkeypatch.setattr(JobAdmin, "list_per_page", 3)
    found = [queue.push("tests.searched", {"i": i}) for i in range(jobs_of_the_name)]
    queue.push("tests.other", {})
    newest_first = [job.pk for job in reversed(found)]
    pages = [newest_first[i : i + 3] for i in range(0, len(newest_first), 3)]
    for number, expected in enumerate(pages, start=1):
        with CaptureQueriesContext(connection) as queries:
            response = operator.get(JOBS, {"q": "tests.searched", "p": str(number)})
        changelist = response.context["cl"]
        assert [job.pk for job in changelist.result_list] == expected
        assert changelist.result_count == jobs_of_the_name
        assert f"{jobs_of_the_name} jobs" in text(response)
        # The statements that match the name (not the filter's probes of the names, nor, on MySQL,
        # the keys' ids read before): the ids, uncounted; then this page's rows by their ids.
        by_name = f"{connection.ops.quote_name('name')} = 'tests.searched'"
        searched = [query["sql"] for query in queries.captured_queries if by_name in query["sql"]]
        assert len(searched) == 2 and "COUNT(" not in searched[0].upper(), searched
        assert f"{connection.ops.quote_name('id')} IN (" in searched[1] and all(
            str(pk) in searched[1] for pk in expected
        )
    ascending = operator.get(JOBS, {"q": "tests.searched", "o": "1"}).context["cl"].result_list
    assert [job.pk for job in ascending] == sorted(newest_first)[:3]


def test_a_search_is_counted_only_up_to_the_cap(operator, queue, monkeypatch):
    monkeypatch.setattr(admin_base.CappedPaginator, "cap", 5)
    for i in range(8):
        queue.push("tests.noop", {"i": i})
    response = operator.get(JOBS, {"q": "tests.noop"})
    assert "more than 5 jobs" in text(response)
    assert response.context["cl"].paginator.capped
    last = operator.get(JOBS, {"q": "tests.noop", "p": "999"})
    assert last.status_code == 200 and len(last.context["cl"].result_list) <= 5


def test_job_page_shows_payload_error_owner_and_deadline(operator, queue, jobs):
    running = jobs["running"]
    Job.objects.filter(pk=running.pk).update(
        last_error="TimeoutError: provider slow", payload={"user_id": "2"}
    )
    page = text(operator.get(job_url(running.pk)))
    assert "&quot;user_id&quot;: &quot;2&quot;" in page, "the payload as indented JSON"
    assert "TimeoutError: provider slow" in page
    assert "web-1:77" in page and "claim deadline" in page.lower() and "deadline in" in page
    assert "Cancel job" in page and "Retry now" not in page
    assert 'name="_save"' not in page, "the page saves nothing"


def readonly_value(page: str, label: str) -> str:
    """The text of the read-only field ``label`` on a detail page."""
    found = re.search(rf"<label>{label}:</label>\s*<div class=\"readonly\">(.*?)</div>", page, re.S)
    assert found is not None, f"no field {label!r} on the page"
    return found.group(1)


def test_job_and_dead_letter_pages_show_the_time_limit(operator, queue):
    limited = queue.push("tests.send_otp", {"user_id": "1"}, timeout=90)
    unlimited = queue.push("tests.send_otp", {"user_id": "2"})
    assert readonly_value(text(operator.get(job_url(limited.pk))), "Time limit") == "90 s"
    assert readonly_value(text(operator.get(job_url(unlimited.pk))), "Time limit") == "no limit"
    letter = make_dead(queue, timeout=timedelta(minutes=2))
    assert readonly_value(text(operator.get(dead_url(letter.pk))), "Time limit") == "120 s"


def test_job_page_offers_retry_now_for_a_cancelled_job(operator, jobs):
    page = text(operator.get(job_url(jobs["cancelled"].pk)))
    assert "Retry now" in page and "Cancel job" not in page
    done = text(operator.get(job_url(jobs["done"].pk)))
    assert "Retry now" not in done and "Cancel job" not in done and "&quot;sent&quot;: true" in done


def test_a_posted_job_form_changes_nothing(operator, jobs):
    job = jobs["due"]
    response = operator.post(job_url(job.pk), {"name": "evil", "priority": "100"})
    assert response.status_code == 403
    assert Job.objects.get(pk=job.pk).name == "tests.send_otp"


# -- job actions -----------------------------------------------------------------


def test_action_retry_now(operator, jobs):
    ids = [jobs[key].pk for key in ("scheduled", "cancelled", "running", "done")]
    response = post_action(operator, JOBS, "retry_now", ids)
    assert response.status_code == 200
    assert "Retried 2 jobs now." in messages_of(response)
    assert any("2 jobs left as they were" in m for m in messages_of(response))
    rows = {job.pk: job for job in Job.objects.filter(pk__in=ids)}
    assert rows[jobs["scheduled"].pk].run_at <= timezone.now()
    assert (rows[jobs["cancelled"].pk].status, rows[jobs["cancelled"].pk].attempts) == ("ready", 0)
    assert rows[jobs["running"].pk].status == "running" and rows[jobs["done"].pk].status == "done"
    entries = log_entries(CHANGE)
    assert sorted(int(e.object_id) for e in entries) == sorted([jobs["scheduled"].pk, jobs["cancelled"].pk])
    assert {e.get_change_message() for e in entries} == {"Retried now."}
    assert {e.user.username for e in entries} == {"root"}


def test_action_cancel(operator, queue, jobs):
    ids = [jobs[key].pk for key in ("due", "running", "done")]
    response = post_action(operator, JOBS, "cancel", ids, post="yes")
    assert "Cancelled 2 jobs." in messages_of(response)
    assert Job.objects.get(pk=jobs["running"].pk).status == "cancelled"
    assert Job.objects.get(pk=jobs["done"].pk).status == "done"
    assert not queue.ack(jobs["running"], worker_id="web-1:77"), "the worker's ack is refused"
    assert sorted(int(e.object_id) for e in log_entries(CHANGE)) == [jobs["due"].pk, jobs["running"].pk]


def test_action_over_every_matching_job_runs_in_batches(operator, queue, monkeypatch):
    monkeypatch.setattr(admin_base, "ACTION_BATCH", 3)
    made = [queue.push("tests.noop", {"i": i}, queue="bulk") for i in range(10)]
    spared = queue.push("tests.noop", {}, queue="other")
    response = post_action(operator, f"{JOBS}?queue=bulk", "cancel", [made[0].pk], select_across="1")
    assert "Cancelled 10 jobs." in messages_of(response)
    assert Job.objects.filter(queue="bulk", status="cancelled").count() == 10
    assert Job.objects.get(pk=spared.pk).status == "ready"
    assert len(log_entries(CHANGE)) == 10


def test_retry_now_and_cancel_buttons(operator, jobs):
    job = jobs["scheduled"]
    response = operator.post(job_url(job.pk, "retry_now"), follow=True)
    assert response.redirect_chain[-1][0] == job_url(job.pk)
    assert f"Job #{job.pk}: Retried now." in messages_of(response)
    assert Job.objects.get(pk=job.pk).run_at <= timezone.now()
    response = operator.post(job_url(job.pk, "cancel"), follow=True)
    assert Job.objects.get(pk=job.pk).status == "cancelled"
    response = operator.post(job_url(job.pk, "cancel"), follow=True)
    assert f"Job #{job.pk} is cancelled: it was left as it was." in messages_of(response)
    assert [e.get_change_message() for e in log_entries(CHANGE)] == ["Retried now.", "Cancelled."]


def test_buttons_change_nothing_on_get(operator, jobs):
    assert operator.get(job_url(jobs["due"].pk, "retry_now")).status_code == 405
    assert operator.get(dead_url(1, "retry")).status_code == 405
    # Cancel answers a GET with its question (a running job) or the job's page: never a change.
    response = operator.get(job_url(jobs["due"].pk, "cancel"))
    assert response.status_code == 302 and response["Location"] == job_url(jobs["due"].pk)
    assert operator.get(job_url(jobs["running"].pk, "cancel")).status_code == 200
    assert operator.put(job_url(jobs["running"].pk, "cancel")).status_code == 405
    assert Job.objects.get(pk=jobs["due"].pk).status == "ready"
    assert Job.objects.get(pk=jobs["running"].pk).status == "running"


def test_retry_now_refuses_a_cancelled_job_whose_key_is_taken(operator, queue):
    old = queue.push("tests.send_otp", {}, unique_key="otp:9")
    queue.cancel(old)
    queue.push("tests.send_otp", {}, unique_key="otp:9")
    response = operator.post(job_url(old.pk, "retry_now"), follow=True)
    assert f"Job #{old.pk} is cancelled: it was left as it was." in messages_of(response)
    assert not log_entries()


# -- dead letters --------------------------------------------------------------------


@pytest.fixture
def letters(queue: QueueClient) -> dict[str, DeadLetter]:
    made = {
        "otp": make_dead(queue, queue="emails"),
        "otp2": make_dead(queue, queue="emails", payload={"user_id": "7"}),
        "report": make_dead(queue, "tests.build_report", queue="reports", error="MemoryError"),
    }
    DeadLetter.objects.filter(pk=made["report"].pk).update(failed_at=timezone.now() - timedelta(days=40))
    return made


def test_dead_letter_list_and_filters(operator, letters):
    page = text(operator.get(DEAD))
    assert "3 dead letters" in page and "ProviderError: number not on WhatsApp" in page
    for query, expected in [
        ("queue=emails", {"otp", "otp2"}),
        ("name=tests.build_report", {"report"}),
        ("failed=1h", {"otp", "otp2"}),
        ("failed=30d", {"otp", "otp2"}),
        ("failed=older", {"report"}),
        ("queue=emails&failed=older", set()),
    ]:
        shown = {letter.pk for letter in operator.get(f"{DEAD}?{query}").context["cl"].result_list}
        assert shown == {letters[key].pk for key in expected}, query


def test_dead_letter_search(operator, letters):
    for term, expected in [
        (str(letters["otp"].pk), {"otp"}),
        (str(letters["report"].job_id), {"report"}),
        ("tests.build_report", {"report"}),
    ]:
        shown = {letter.pk for letter in operator.get(DEAD, {"q": term}).context["cl"].result_list}
        assert {letters[key].pk for key in expected} <= shown, term


def test_dead_letter_page_shows_payload_error_and_full_traceback(operator, queue):
    error = "ProviderError: number not on WhatsApp"
    letter = make_dead(queue, payload={"user_id": "42", "phone": "+3161234"})
    long_tb = "Traceback (most recent call last):\n" + "".join(
        f'  File "f{i}.py", line {i}\n' for i in range(400)
    )
    DeadLetter.objects.filter(pk=letter.pk).update(traceback=long_tb + error)
    page = text(operator.get(dead_url(letter.pk)))
    assert "&quot;phone&quot;: &quot;+3161234&quot;" in page
    assert error in page and "f399.py&quot;, line 399" in page, "the whole traceback"
    assert ">Retry</button>" in page and dead_url(letter.pk, "delete") in page


def test_retry_a_dead_letter_puts_it_back_on_its_queue_once(operator, queue, letters):
    letter = letters["otp2"]
    response = operator.post(dead_url(letter.pk, "retry"), follow=True)
    job = Job.objects.get()
    assert response.redirect_chain[-1][0] == job_url(job.pk)
    assert f"Dead letter #{letter.pk} is back on queue “emails” as job #{job.pk}." in messages_of(response)
    assert (job.queue, job.status, job.attempts, job.payload) == ("emails", "ready", 0, {"user_id": "7"})
    assert not DeadLetter.objects.filter(pk=letter.pk).exists()
    # A double submit: the second finds it gone and makes nothing.
    again = operator.post(dead_url(letter.pk, "retry"), follow=True)
    assert f"Dead letter #{letter.pk} is gone: it was already retried or deleted." in messages_of(again)
    assert Job.objects.count() == 1
    (entry,) = log_entries()
    assert (entry.action_flag, entry.object_id, entry.content_type.model) == (ADDITION, str(job.pk), "job")
    assert f"dead letter #{letter.pk}" in entry.get_change_message()
    assert queue.pull("emails", worker_id="w").pk == job.pk


def test_action_retry_selected_dead_letters(operator, letters):
    ids = [letters["otp"].pk, letters["report"].pk]
    response = post_action(operator, DEAD, "retry", ids)
    assert "Retried 2 dead letters: back on their queues as ready jobs." in messages_of(response)
    assert sorted(Job.objects.values_list("queue", flat=True)) == ["emails", "reports"]
    assert list(DeadLetter.objects.values_list("pk", flat=True)) == [letters["otp2"].pk]
    assert len(log_entries(ADDITION)) == 2


def test_retry_all_matching_asks_then_retries_exactly_the_filtered_list(operator, queue, letters):
    for i in range(12):
        make_dead(queue, queue="emails", payload={"i": i})
    url = f"{RETRY_MATCHING}?queue=emails&failed=24h"
    page = text(operator.get(url))
    assert "Retry 14 dead letters?" in page and "queue: emails" in page and "in the last 24 hours" in page
    assert DeadLetter.objects.count() == 15, "asking changes nothing"
    response = operator.post(url, {"post": "yes"}, follow=True)
    assert "Retried 14 dead letters: back on their queues as ready jobs." in messages_of(response)
    assert response.redirect_chain[-1][0] == f"{DEAD}?queue=emails&failed=24h"
    assert list(DeadLetter.objects.values_list("pk", flat=True)) == [letters["report"].pk]
    assert Job.objects.filter(queue="emails", status="ready").count() == 14
    assert len(log_entries(ADDITION)) == 14
    again = operator.post(url, {"post": "yes"}, follow=True)
    assert "No dead letter was retried: none is left." in messages_of(again)
    assert Job.objects.count() == 14


def test_retry_all_matching_with_a_search_and_select_across(operator, queue, letters):
    response = post_action(
        operator, f"{DEAD}?q=tests.build_report", "retry", [letters["report"].pk], select_across="1"
    )
    assert "Retried 1 dead letter: back on their queues as ready jobs." in messages_of(response)
    assert DeadLetter.objects.count() == 2


def test_dead_letter_list_links_to_retry_all_matching(operator, viewer, letters):
    assert f"{RETRY_MATCHING}?queue=emails" in text(operator.get(f"{DEAD}?queue=emails"))
    assert RETRY_MATCHING not in text(viewer.get(f"{DEAD}?queue=emails"))


def test_delete_action_confirms_then_deletes(operator, letters):
    ids = [letters["otp"].pk, letters["otp2"].pk]
    confirm = operator.post(DEAD, {"action": "delete_letters", "_selected_action": ids, "index": "0"})
    assert confirm.status_code == 200 and "Delete 2 dead letters?" in text(confirm)
    assert DeadLetter.objects.count() == 3, "asking deletes nothing"
    response = operator.post(
        DEAD,
        {"action": "delete_letters", "_selected_action": ids, "post": "yes", "select_across": "0"},
        follow=True,
    )
    assert "Deleted 2 dead letters." in messages_of(response)
    assert list(DeadLetter.objects.values_list("pk", flat=True)) == [letters["report"].pk]
    assert sorted(int(e.object_id) for e in log_entries(DELETION)) == sorted(ids)
    assert not Job.objects.exists()


def test_delete_action_over_every_matching_dead_letter(operator, queue, letters):
    response = operator.post(
        f"{DEAD}?queue=emails",
        {
            "action": "delete_letters",
            "_selected_action": [letters["otp"].pk],
            "post": "yes",
            "select_across": "1",
        },
        follow=True,
    )
    assert "Deleted 2 dead letters." in messages_of(response)
    assert list(DeadLetter.objects.values_list("pk", flat=True)) == [letters["report"].pk]


def test_delete_one_dead_letter_from_its_page(operator, letters):
    letter = letters["report"]
    assert "Are you sure" in text(operator.get(dead_url(letter.pk, "delete")))
    operator.post(dead_url(letter.pk, "delete"), {"post": "yes"})
    assert not DeadLetter.objects.filter(pk=letter.pk).exists()
    (entry,) = log_entries(DELETION)
    assert entry.object_id == str(letter.pk)


def test_django_bulk_delete_is_not_offered(operator, letters):
    response = post_action(operator, DEAD, "delete_selected", [letters["otp"].pk])
    assert "No action selected." in messages_of(response)
    assert DeadLetter.objects.count() == 3


# -- permissions -------------------------------------------------------------------


def test_view_only_staff_can_look_at_every_page(viewer, jobs, letters):
    for url in (
        JOBS,
        job_url(jobs["running"].pk),
        DEAD,
        dead_url(letters["otp"].pk),
        OVERVIEW,
        WORKERS,
        job_url(jobs["running"].pk, "history"),
    ):
        assert viewer.get(url).status_code == 200, url
    page = text(viewer.get(job_url(jobs["cancelled"].pk)))
    assert "Retry now" not in page and "Cancel job" not in page
    page = text(viewer.get(dead_url(letters["otp"].pk)))
    assert ">Retry</button>" not in page and dead_url(letters["otp"].pk, "delete") not in page
    assert 'name="action"' not in text(viewer.get(JOBS)), "no action to choose"


def test_view_only_staff_forging_every_post_changes_nothing(viewer, jobs, letters):
    before_jobs = sorted(Job.objects.values_list("pk", "status", "run_at"))
    before_letters = sorted(DeadLetter.objects.values_list("pk", flat=True))
    ids = [job.pk for job in jobs.values()]
    for action in ("retry_now", "cancel"):
        # With no action allowed, Django ignores the posted one.
        assert post_action(viewer, JOBS, action, ids).status_code == 200
        post_action(viewer, f"{JOBS}?status=ready", action, ids[:1], select_across="1")
    letter_ids = [letter.pk for letter in letters.values()]
    for action in ("retry", "delete_letters", "delete_selected"):
        post_action(viewer, DEAD, action, letter_ids)
        viewer.post(DEAD, {"action": action, "_selected_action": letter_ids, "post": "yes"})
    forged = [
        job_url(jobs["scheduled"].pk, "retry_now"),
        job_url(jobs["due"].pk, "cancel"),
        job_url(jobs["running"].pk, "cancel"),
        dead_url(letters["otp"].pk, "retry"),
        dead_url(letters["otp"].pk, "delete"),
        RETRY_MATCHING,
        job_url(jobs["due"].pk, "delete"),
    ]
    for url in forged:
        assert viewer.post(url, {"post": "yes"}).status_code == 403, url
    assert viewer.get(RETRY_MATCHING).status_code == 403
    assert viewer.get(job_url(jobs["running"].pk, "cancel")).status_code == 403
    assert viewer.post(job_url(jobs["running"].pk, "cancel")).status_code == 403
    assert sorted(Job.objects.values_list("pk", "status", "run_at")) == before_jobs
    assert sorted(DeadLetter.objects.values_list("pk", flat=True)) == before_letters
    assert not log_entries()


def test_change_without_delete_may_retry_but_not_delete(login, letters):
    client = login("retrier", "view_deadletter", "change_deadletter")
    post_action(client, DEAD, "delete_letters", [letters["otp"].pk])
    client.post(DEAD, {"action": "delete_letters", "_selected_action": [letters["otp"].pk], "post": "yes"})
    assert client.post(dead_url(letters["otp"].pk, "delete"), {"post": "yes"}).status_code == 403
    assert DeadLetter.objects.count() == 3
    assert client.post(dead_url(letters["otp"].pk, "retry")).status_code == 302
    assert DeadLetter.objects.count() == 2
    # Without any permission on jobs, the retry lands on the dead letter list.
    response = client.post(dead_url(letters["otp2"].pk, "retry"), follow=True)
    assert response.redirect_chain[-1][0] == DEAD


def test_delete_without_change_may_delete_but_not_retry(login, letters):
    client = login("cleaner", "view_deadletter", "delete_deadletter")
    assert client.post(dead_url(letters["otp"].pk, "retry")).status_code == 403
    client.post(dead_url(letters["otp"].pk, "delete"), {"post": "yes"})
    assert DeadLetter.objects.count() == 2 and not Job.objects.exists()


def test_change_job_permission_allows_retry_now_and_cancel(login, jobs):
    client = login("jobs-operator", "view_job", "change_job")
    post_action(client, JOBS, "cancel", [jobs["due"].pk])
    assert Job.objects.get(pk=jobs["due"].pk).status == "cancelled"
    assert client.get(DEAD).status_code == 403


def test_staff_without_permissions_and_strangers_see_nothing(login, client, jobs, letters):
    nobody = login("nobody")
    for url in (JOBS, DEAD, OVERVIEW, job_url(jobs["due"].pk)):
        assert nobody.get(url).status_code == 403, url
        response = client.get(url)
        assert response.status_code == 302 and "/login/" in response["Location"], url
    assert nobody.post(job_url(jobs["due"].pk, "cancel")).status_code == 403
    assert client.post(job_url(jobs["due"].pk, "cancel")).status_code == 302
    assert Job.objects.get(pk=jobs["due"].pk).status == "ready"


def test_the_overview_is_offered_to_whoever_may_see_jobs(login, jobs):
    assert login("v", "view_job").get(OVERVIEW).status_code == 200
    assert login("d", "view_deadletter").get(OVERVIEW).status_code == 403


# -- malformed ids and query strings -----------------------------------------------------

MALFORMED_IDS = ["abc", "-1", "0", "1.5", "99999999999999999999999", "1%00", "%20", "1e3", "٣"]


@pytest.mark.parametrize("bad", MALFORMED_IDS)
def test_malformed_ids_give_a_message(operator, jobs, bad):
    for url in (
        f"{JOBS}{bad}/change/",
        f"{DEAD}{bad}/change/",
        f"{JOBS}{bad}/history/",
    ):
        response = operator.get(url, follow=True)
        assert response.status_code == 200, url
        assert any("doesn’t exist" in m for m in messages_of(response)), url
        assert response.redirect_chain[-1][0] == INDEX, url
    for url in (f"{JOBS}{bad}/retry-now/", f"{JOBS}{bad}/cancel/", f"{DEAD}{bad}/retry/"):
        response = operator.post(url, follow=True)
        assert response.status_code == 200, url
        assert any("doesn’t exist" in m for m in messages_of(response)), url
        assert response.redirect_chain[-1][0] == INDEX, url
    response = operator.get(f"{DEAD}{bad}/delete/", follow=True)
    assert response.status_code in (200, 404)


def test_ids_that_do_not_exist_give_a_message(operator, jobs):
    for url in (job_url(10**12, "retry_now"), job_url(10**12, "cancel"), dead_url(10**12, "retry")):
        response = operator.post(url, follow=True)
        assert response.status_code == 200
        assert any("doesn’t exist" in m or "is gone" in m for m in messages_of(response)), url


def test_an_id_that_names_no_row_goes_where_django_goes_the_admin_index(operator, jobs):
    for url in (job_url(10**12), job_url(10**12, "history"), dead_url(10**12), dead_url(10**12, "delete")):
        response = operator.get(url, follow=True)
        assert response.redirect_chain[-1][0] == INDEX, url
        assert any("with ID “1000000000000” doesn’t exist" in m for m in messages_of(response)), url
    for url in (job_url(10**12, "retry_now"), job_url(10**12, "cancel"), job_url("abc", "cancel")):
        response = operator.post(url, follow=True)
        assert response.redirect_chain[-1][0] == INDEX, url
        assert any("doesn’t exist. Perhaps it was deleted?" in m for m in messages_of(response)), url


MALFORMED_QUERIES = [
    "status=bogus",
    "status=%00",
    "queue=no%20spaces",
    "queue=%00",
    "name=" + "x" * 300,
    "name=%01",
    "p=abc",
    "p=0",
    "p=-4",
    "p=99999999999999999999",
    "o=abc",
    "o=99",
    "o=-1.-2",
    "q=%00",
    "q=" + "9" * 40,
    "foo=bar",
    "priority__gt=x",
    "payload__user_id=1",
    "_to_field=payload",
    "e=1",
    "failed=never",
    "all=",
    "status=ready&status=done",
]


@pytest.mark.parametrize("query", MALFORMED_QUERIES)
def test_malformed_query_strings_give_a_message_not_an_error(operator, jobs, letters, query):
    for url in (JOBS, DEAD, RETRY_MATCHING):
        response = operator.get(f"{url}?{query}", follow=True)
        assert response.status_code == 200, (url, query)


def test_an_unknown_filter_is_dropped_with_a_message(operator, jobs):
    response = operator.get(f"{JOBS}?queue=emails&payload__contains=x", follow=True)
    assert response.redirect_chain[-1][0] == f"{JOBS}?queue=emails"
    assert "Ignored what this list cannot filter by: payload__contains." in messages_of(response)


def test_a_bad_filter_value_empties_the_list_with_a_message(operator, jobs):
    response = operator.get(f"{JOBS}?queue=no spaces")
    assert list(response.context["cl"].result_list) == []
    assert "“no spaces” is not a queue this list can show." in messages_of(response)


def test_a_forged_selection_with_a_malformed_id_changes_nothing(operator, jobs):
    for ids in (["abc"], [str(jobs["due"].pk), "1; DROP TABLE"], ["%00"], ["99999999999999999999999"]):
        response = post_action(operator, JOBS, "cancel", ids)  # type: ignore[arg-type]
        assert response.status_code == 200
        assert "A selected id was malformed; nothing was changed." in messages_of(response)
    assert Job.objects.get(pk=jobs["due"].pk).status == "ready"
    response = operator.post(
        DEAD, {"action": "retry", "_selected_action": ["x"], "index": "oops"}, follow=True
    )
    assert response.status_code == 200


# -- overview and workers -------------------------------------------------------------


def test_overview_shows_each_queue_the_last_hour_and_the_workers(operator, queue, jobs, letters):
    queue.register_worker("web-1:77", hostname="web-1", pid=77, queues=["emails"], concurrency=4)
    queue.register_worker("web-2:12", hostname="web-2", pid=12, queues=[], concurrency=2)
    Worker.objects.filter(worker_id="web-2:12").update(last_heartbeat=timezone.now() - timedelta(seconds=45))
    Job.objects.filter(pk=jobs["due"].pk).update(run_at=timezone.now() - timedelta(minutes=3))
    response = operator.get(OVERVIEW)
    page = text(response)
    overview = response.context["overview"]
    emails = next(q for q in overview.queues if q.queue == "emails")
    assert (emails.ready, emails.scheduled, emails.running, emails.dead, emails.done_last_hour) == (
        1,
        0,
        1,
        2,
        1,
    )
    assert 170 < emails.oldest_ready_age < 400
    reports = next(q for q in overview.queues if q.queue == "reports")
    assert (reports.ready, reports.scheduled, reports.dead) == (0, 1, 1)
    assert "3 min" in page and "<svg" in page and "failed for good (2)" in page
    assert "web-1:77" in page and "web-2:12" in page and "every queue" in page
    assert page.count(">late<") == 1
    assert f"{JOBS}?queue=emails&amp;status=due" in page and f"{DEAD}?queue=emails" in page


def test_overview_with_an_empty_queue_and_auto_refresh(operator):
    page = text(operator.get(OVERVIEW, {"refresh": "10"}))
    assert "No job is waiting" in page and "No worker is running" in page
    assert '<meta http-equiv="refresh" content="10">' in page
    assert "http-equiv" not in text(operator.get(OVERVIEW, {"refresh": "1; url=https://example.com"}))


def test_the_admin_index_links_the_overview(operator):
    page = text(operator.get(reverse("admin:index")))
    assert OVERVIEW in page and "Queue overview" in page


def test_worker_list_is_read_only(operator, queue):
    queue.register_worker("w-1", hostname="h", pid=1, queues=["a", "b"], concurrency=3)
    page = text(operator.get(WORKERS))
    assert "w-1" in page and "a, b" in page
    worker = Worker.objects.get()
    assert (
        operator.post(reverse("admin:django_jobqueue_worker_change", args=[worker.pk]), {}).status_code == 403
    )
    assert (
        operator.post(
            reverse("admin:django_jobqueue_worker_delete", args=[worker.pk]), {"post": "yes"}
        ).status_code
        == 403
    )
    assert Worker.objects.count() == 1


# -- cancelling a running job --------------------------------------------------------------

NOT_STOPPED = "The running code is told to stop, and may already have done part of its work."


def test_cancel_button_asks_before_cancelling_a_running_job(operator, queue, jobs):
    running = jobs["running"]
    page = text(operator.get(job_url(running.pk)))
    assert f'href="{job_url(running.pk, "cancel")}"' in page, "a link to the question, not a form"
    for ask in (operator.get, operator.post):
        response = ask(job_url(running.pk, "cancel"))
        assert response.status_code == 200
        question = text(response)
        assert NOT_STOPPED in question and "ack is refused" in question and "does not run again" in question
        assert f"#{running.pk} tests.send_otp on emails, claimed by web-1:77" in question
        assert Job.objects.get(pk=running.pk).status == "running", "asking changes nothing"
    response = operator.post(job_url(running.pk, "cancel"), {"post": "yes"}, follow=True)
    assert f"Job #{running.pk}: Cancelled." in messages_of(response)
    assert not queue.ack(running, worker_id="web-1:77"), "the worker's ack is refused"
    assert not queue.nack(running, worker_id="web-1:77", error="boom", delay=0), "and so is its failure"
    assert Job.objects.get(pk=running.pk).status == "cancelled"
    assert [e.get_change_message() for e in log_entries(CHANGE)] == ["Cancelled."]


def test_cancel_button_on_a_ready_job_cancels_at_once(operator, jobs):
    job = jobs["due"]
    page = text(operator.get(job_url(job.pk)))
    assert f'action="{job_url(job.pk, "cancel")}"' in page
    response = operator.post(job_url(job.pk, "cancel"), follow=True)
    assert f"Job #{job.pk}: Cancelled." in messages_of(response)
    assert Job.objects.get(pk=job.pk).status == "cancelled"


def test_action_cancel_asks_first_when_a_running_job_is_selected(operator, queue, jobs):
    ids = [jobs[key].pk for key in ("due", "running", "done")]
    response = post_action(operator, JOBS, "cancel", ids)
    question = text(response)
    assert NOT_STOPPED in question and "Ready jobs among those selected are cancelled too" in question
    assert f"#{jobs['running'].pk} tests.send_otp" in question
    assert f"#{jobs['due'].pk} " not in question, "only the running jobs are listed"
    assert {Job.objects.get(pk=pk).status for pk in ids} == {"ready", "running", "done"}
    for pk in ids:
        assert f'name="_selected_action" value="{pk}"' in question
    assert 'name="action" value="cancel"' in question and 'name="post" value="yes"' in question
    assert not log_entries()


def test_action_cancel_of_ready_jobs_asks_nothing(operator, jobs):
    ids = [jobs["due"].pk, jobs["scheduled"].pk]
    response = post_action(operator, JOBS, "cancel", ids)
    assert "Cancelled 2 jobs." in messages_of(response)


def test_action_cancel_across_every_matching_job_asks_then_cancels_all(operator, queue, jobs):
    response = post_action(operator, f"{JOBS}?queue=emails", "cancel", [jobs["due"].pk], select_across="1")
    question = text(response)
    assert NOT_STOPPED in question and 'name="select_across" value="1"' in question
    assert Job.objects.get(pk=jobs["running"].pk).status == "running"
    response = post_action(
        operator, f"{JOBS}?queue=emails", "cancel", [jobs["due"].pk], select_across="1", post="yes"
    )
    assert "Cancelled 2 jobs." in messages_of(response)
    assert Job.objects.get(pk=jobs["running"].pk).status == "cancelled"
    assert Job.objects.get(pk=jobs["scheduled"].pk).status == "ready", "another queue's job"


# -- how values read: dates, empty values, durations ------------------------------------------

# 12:00 UTC is 05:00 in Los Angeles in June (PDT, UTC-7).
NOON_UTC = datetime(2026, 6, 1, 12, 0, 0, tzinfo=UTC)
IN_LOS_ANGELES = "2026-06-01 05:00:00"


@override_settings(TIME_ZONE="America/Los_Angeles")
def test_every_page_writes_a_date_one_way_in_the_current_time_zone(operator, queue, jobs, letters):
    letter = letters["otp"]
    DeadLetter.objects.filter(pk=letter.pk).update(failed_at=NOON_UTC, enqueued_at=NOON_UTC)
    Job.objects.filter(pk=jobs["done"].pk).update(created_at=NOON_UTC, finished_at=NOON_UTC)
    queue.register_worker("w-1", hostname="h", pid=1, queues=[], concurrency=3)
    Worker.objects.update(started_at=NOON_UTC)
    worker = Worker.objects.get()
    confirm = post_action(operator, DEAD, "delete_letters", [letter.pk])
    pages = {
        "dead letter list": operator.get(DEAD),
        "dead letter page": operator.get(dead_url(letter.pk)),
        "delete question": confirm,
        "job page": operator.get(job_url(jobs["done"].pk)),
        "worker list": operator.get(WORKERS),
        "worker page": operator.get(reverse("admin:django_jobqueue_worker_change", args=[worker.pk])),
        "overview": operator.get(OVERVIEW),
    }
    for what, response in pages.items():
        assert response.status_code == 200, what
        assert IN_LOS_ANGELES in text(response), what
    assert "America/Los_Angeles" in text(pages["overview"]), "the overview names the zone"
    assert "June 1, 2026" not in text(pages["worker list"]) + text(pages["worker page"])


def test_an_empty_value_reads_the_same_everywhere(operator, queue, jobs):
    queue.register_worker("w-1", hostname="h", pid=1, queues=[], concurrency=3)
    worker = Worker.objects.get()
    worker_page = text(operator.get(reverse("admin:django_jobqueue_worker_change", args=[worker.pk])))
    assert "every queue" in worker_page and "every queue" in text(operator.get(WORKERS))
    job_page = text(operator.get(job_url(jobs["due"].pk)))
    assert "(none)" not in job_page
    # Error, traceback and result are empty; the claim deadline of a ready job too.
    assert job_page.count('<div class="readonly"><span class="jq-quiet">—</span></div>') == 3
    assert '<div class="readonly">—</div>' in job_page
    assert '<div class="readonly">-</div>' not in job_page + worker_page


def test_durations_carry_their_unit(operator, queue, letters):
    job = queue.push("tests.noop", {}, visibility_timeout=30)
    job_page = text(operator.get(job_url(job.pk)))
    assert '<div class="readonly">30 s</div>' in job_page
    DeadLetter.objects.filter(pk=letters["otp"].pk).update(visibility_timeout=2.5)
    assert '<div class="readonly">2.5 s</div>' in text(operator.get(dead_url(letters["otp"].pk)))


def test_a_scheduled_job_says_when_it_runs(operator, queue):
    job = queue.push("tests.noop", {}, delay=7 * 60 + 30)
    page = text(operator.get(job_url(job.pk)))
    assert "runs in 7 min" in page and "waits until" not in page
    assert "runs in 7 min" in text(operator.get(JOBS)) or "in 7 min" in text(operator.get(JOBS))


def test_a_job_that_finally_succeeded_labels_the_old_error_as_an_earlier_attempt(operator, queue):
    job = queue.push("tests.send_otp", {}, max_attempts=5)
    for attempt in (1, 2):
        claimed = queue.pull(worker_id="w-1")
        assert claimed is not None and claimed.attempts == attempt
        queue.nack(claimed, worker_id="w-1", error=f"ProviderError: attempt {attempt}", delay=0)
    third = queue.pull(worker_id="w-1")
    running = text(operator.get(job_url(job.pk)))
    assert "Attempt 3 is running; an earlier attempt failed with this error." in running
    assert queue.ack(third, worker_id="w-1", result={"sent": True})
    page = text(operator.get(job_url(job.pk)))
    assert "Attempt 3 succeeded; an earlier attempt failed with this error." in page
    assert "Error of an earlier attempt" in page and "Last error" not in page
    assert "ProviderError: attempt 2" in page, "kept for the record"
    backoff = queue.push("tests.send_otp", {})
    claimed = queue.pull(worker_id="w-1")
    queue.nack(claimed, worker_id="w-1", error="ProviderError: down", delay=60)
    waiting = text(operator.get(job_url(backoff.pk)))
    assert "Last error" in waiting and "earlier attempt" not in waiting, "still the job's present trouble"


# -- dates at the ends of the calendar --------------------------------------------------------

YEAR_1 = datetime(1, 1, 1, 0, 0, 0, tzinfo=UTC)
YEAR_9999 = datetime(9999, 12, 31, 23, 59, 59, tzinfo=UTC)


@pytest.mark.parametrize("zone", ["Pacific/Kiritimati", "America/Los_Angeles"])
@pytest.mark.parametrize("when", [YEAR_1, YEAR_9999], ids=["year-1", "year-9999"])
def test_every_page_renders_a_date_at_the_ends_of_the_calendar(operator, queue, jobs, letters, zone, when):
    Job.objects.update(run_at=when, created_at=when, finished_at=when)
    Job.objects.filter(pk=jobs["running"].pk).update(locked_until=when)
    DeadLetter.objects.update(failed_at=when, enqueued_at=when)
    queue.register_worker("w-1", hostname="h", pid=1, queues=["emails"], concurrency=3)
    Worker.objects.update(started_at=when, last_heartbeat=when)
    worker = Worker.objects.get()
    with override_settings(TIME_ZONE=zone):
        urls = [JOBS, f"{JOBS}?status=scheduled", DEAD, OVERVIEW, WORKERS]
        urls += [job_url(job.pk) for job in jobs.values()]
        urls += [dead_url(letter.pk) for letter in letters.values()]
        urls.append(reverse("admin:django_jobqueue_worker_change", args=[worker.pk]))
        for url in urls:
            response = operator.get(url)
            assert response.status_code == 200, url
        question = post_action(operator, DEAD, "delete_letters", [letters["otp"].pk])
        assert question.status_code == 200
        page = text(operator.get(dead_url(letters["otp"].pk)))
    try:
        local = when.astimezone(zoneinfo.ZoneInfo(zone))
    except OverflowError:
        # Where the zone cannot reach the date, it is written in UTC and says so.
        expected = f"{when.year:04d}-{when:%m-%d %H:%M:%S} UTC"
    else:
        expected = f"{local.year:04d}-{local:%m-%d %H:%M:%S} "
    assert expected in page
