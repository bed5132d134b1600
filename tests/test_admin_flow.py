"""The queue overview's flow control: pauses, limits, the busiest concurrency keys, and who may pause."""

from __future__ import annotations

import re
from collections.abc import Callable
from datetime import timedelta
from typing import Any

import pytest
from django.contrib.admin.models import CHANGE, LogEntry
from django.contrib.contenttypes.models import ContentType
from django.test import Client, override_settings
from django.urls import reverse
from django.utils import timezone

from django_jobqueue import QueueClient
from django_jobqueue.models import Job, QueueState

from .test_admin import JOBS, OVERVIEW, messages_of, text

PAUSE = reverse("admin:django_jobqueue_queueoverview_pause")
RESUME = reverse("admin:django_jobqueue_queueoverview_resume")
LIMITS = {"emails": {"concurrency": 10, "rate_limit": "100/m"}, "webhooks": {"rate_limit": "5/s"}}


def keyed(job: Job, key: str, limit: int = 2, **changes: Any) -> None:
    """Give ``job`` a concurrency key, as an enqueue with one does (and any other column changes)."""
    Job.objects.filter(pk=job.pk).update(concurrency_key=key, concurrency_limit=limit, **changes)


def running(job: Job, key: str, limit: int = 2, *, expired: bool = False) -> None:
    until = timezone.now() + timedelta(seconds=-5 if expired else 30)
    keyed(job, key, limit, status="running", locked_by="web-1:77", locked_until=until)


def queue_row(page: str, queue: str) -> str:
    """The overview's table row of ``queue``, as HTML."""
    match = re.search(
        rf'<tr class="jq-queue[^"]*">\s*<td><a href="[^"]*\?queue={queue}">.*?</tr>', page, re.S
    )
    assert match, f"no row for {queue}"
    return match.group(0)


# -- what the overview shows --------------------------------------------------------


def test_the_overview_shows_pauses_and_limits_even_of_queues_without_jobs(operator, queue):
    queue.push("tests.noop", {}, queue="emails")
    queue.pause_queue("emails")
    queue.pause_queue("idle")
    with override_settings(JOBQUEUE={"QUEUES": LIMITS}):
        response = operator.get(OVERVIEW)
    page = text(response)
    shown = {q.queue: q for q in response.context["overview"].queues}
    assert list(shown) == ["emails", "idle", "webhooks"]
    assert shown["emails"].paused and shown["idle"].paused and not shown["webhooks"].paused
    assert ">paused</span>" in queue_row(page, "emails") and ">paused</span>" in queue_row(page, "idle")
    assert ">paused</span>" not in queue_row(page, "webhooks")
    assert "10 at once, 100/m" in queue_row(page, "emails")
    assert "5/s" in queue_row(page, "webhooks")
    assert '<td class="jq-limits">—</td>' in queue_row(page, "idle")


def test_ready_jobs_with_a_key_are_counted_and_listed_with_the_others(operator, queue):
    plain = queue.push("tests.noop", {}, queue="emails")
    with_key = queue.push("tests.noop", {}, queue="emails")
    later = queue.push("tests.noop", {}, queue="emails", delay=600)
    keyed(with_key, "tenant:1")
    keyed(later, "tenant:1")
    emails = next(q for q in operator.get(OVERVIEW).context["overview"].queues if q.queue == "emails")
    assert (emails.ready, emails.scheduled) == (2, 1)

    def listed(status: str) -> set[int]:
        return {job.pk for job in operator.get(JOBS, {"status": status}).context["cl"].result_list}

    assert listed("due") == {plain.pk, with_key.pk}
    assert listed("scheduled") == {later.pk}
    assert listed("ready") == {plain.pk, with_key.pk, later.pk}


def test_the_overview_shows_the_ten_busiest_keys_by_running_jobs(operator, queue):
    jobs = iter(queue.push_many([("tests.noop", {}, {"queue": "sync"})] * 90))
    for n in range(12):  # key k-n runs n + 1 jobs
        for _ in range(n + 1):
            running(next(jobs), f"k-{n:02d}", limit=20)
    for _ in range(5):  # expired claims hold no slot: k-00 stays at one
        running(next(jobs), "k-00", expired=True)
    keyed(next(jobs), "k-waiting")  # ready, not running
    response = operator.get(OVERVIEW)
    busiest = response.context["busiest_keys"]
    assert [(k.key, k.running, k.limit) for k in busiest] == [
        (f"k-{n:02d}", n + 1, 20) for n in range(11, 1, -1)
    ]
    page = text(response)
    assert "Busiest concurrency keys" in page and "k-11" in page and "k-01" not in page


def test_with_no_keyed_job_running_the_keys_table_says_so(operator, queue):
    assert "No job with a concurrency key is running." in text(operator.get(OVERVIEW))


def test_a_bad_queues_setting_still_shows_the_overview_and_says_why(operator, queue):
    with override_settings(JOBQUEUE={"QUEUES": {"emails": {"concurrency": 0}}}):
        response = operator.get(OVERVIEW)
    assert response.status_code == 200
    assert messages_of(response)[0].startswith("The queues’ limits are not shown: JOBQUEUE['QUEUES']")


# -- pausing and resuming -----------------------------------------------------------


def queue_state_log() -> list[tuple[int, str, str]]:
    content_type = ContentType.objects.get_for_model(QueueState)
    entries = LogEntry.objects.filter(content_type=content_type).order_by("pk")
    return [(e.action_flag, e.object_repr, e.change_message) for e in entries]


def test_pause_then_resume_from_the_overview(operator, queue):
    queue.push("tests.noop", {}, queue="emails")
    assert 'name="queue" value="emails"' in text(operator.get(OVERVIEW))
    response = operator.post(PAUSE, {"queue": "emails"}, follow=True)
    assert response.redirect_chain == [(OVERVIEW, 302)]
    assert messages_of(response) == [
        "Paused queue “emails”: no worker claims from it until it is resumed; "
        "enqueueing still works and running jobs finish."
    ]
    assert queue.paused_queues() == ["emails"]
    row = queue_row(text(response), "emails")
    assert ">Resume</button>" in row and ">Pause</button>" not in row

    response = operator.post(RESUME, {"queue": "emails"}, follow=True)
    assert messages_of(response) == ["Resumed queue “emails”: workers claim from it again."]
    assert queue.paused_queues() == []
    assert ">Pause</button>" in queue_row(text(response), "emails")
    assert queue_state_log() == [
        (CHANGE, "emails (paused)", "Paused: no worker claims from the queue until it is resumed."),
        (CHANGE, "emails (running)", "Resumed: workers claim from the queue again."),
    ]


def test_pausing_twice_or_resuming_a_running_queue_says_so_and_logs_nothing(operator, queue):
    queue.pause_queue("emails")
    assert messages_of(operator.post(PAUSE, {"queue": "emails"}, follow=True)) == [
        "Queue “emails” was already paused."
    ]
    assert messages_of(operator.post(RESUME, {"queue": "sms"}, follow=True)) == [
        "Queue “sms” was not paused."
    ]
    assert queue_state_log() == []


@pytest.mark.parametrize("posted", [{}, {"queue": ""}, {"queue": "no spaces"}, {"queue": "x" * 64}])
def test_a_malformed_queue_name_changes_nothing(operator, queue, posted):
    response = operator.post(PAUSE, posted, follow=True)
    assert messages_of(response)[0].startswith("Nothing was changed: queue name")
    assert not QueueState.objects.exists()


def test_the_buttons_change_nothing_on_get(operator, queue):
    for url in (PAUSE, RESUME):
        assert operator.get(url, {"queue": "emails"}).status_code == 405
    assert not QueueState.objects.exists()


def test_a_post_without_the_csrf_token_is_refused(queue, django_user_model):
    user = django_user_model.objects.create_superuser("csrf", "c@example.com", "pw")
    client = Client(enforce_csrf_checks=True)
    client.force_login(user)
    assert client.post(PAUSE, {"queue": "emails"}).status_code == 403
    assert queue.paused_queues() == []
    queue.push("tests.noop", {}, queue="emails")
    token = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', text(client.get(OVERVIEW)))
    assert token
    client.post(PAUSE, {"queue": "emails", "csrfmiddlewaretoken": token.group(1)})
    assert queue.paused_queues() == ["emails"]


def test_view_only_staff_see_no_button_and_are_refused(login: Callable[..., Client], queue):
    queue.push("tests.noop", {}, queue="emails")
    queue.pause_queue("sms")
    viewer = login("viewer", "view_job")
    page = text(viewer.get(OVERVIEW))
    assert "emails" in page and ">paused</span>" in page
    assert ">Pause</button>" not in page and ">Resume</button>" not in page
    assert viewer.post(PAUSE, {"queue": "emails"}).status_code == 403
    assert viewer.post(RESUME, {"queue": "sms"}).status_code == 403
    assert queue.paused_queues() == ["sms"]
    assert queue_state_log() == []


def test_the_permission_to_change_jobs_is_the_permission_to_pause(login: Callable[..., Client], queue):
    queue.push("tests.noop", {}, queue="emails")
    changer = login("changer", "change_job")
    assert ">Pause</button>" in text(changer.get(OVERVIEW))
    assert changer.post(PAUSE, {"queue": "emails"}).status_code == 302
    assert QueueClient().paused_queues() == ["emails"]
    other = login("dead-letters-only", "change_deadletter", "view_deadletter")
    assert other.post(RESUME, {"queue": "emails"}).status_code == 403
    assert QueueClient().paused_queues() == ["emails"]


def test_strangers_are_sent_to_the_login_page(client, queue):
    response = client.post(PAUSE, {"queue": "emails"})
    assert response.status_code == 302 and "/login/" in response["Location"]
    assert not QueueState.objects.exists()
