"""The admin's way around a batch, and the values a worker's and a dead letter's page show.

A batch's page links its jobs (all, and per state) and its dead letters; each
link opens the job or dead letter list filtered by the batch, a filter the
list names in its title and the operator can clear. A job's and a dead
letter's page link their batch. A worker started with ``--concurrency
MIN:MAX`` shows its range beside its slots; a dead letter's page shows the
progress its job last reported. Rows are made the real way, through
``batch()`` and ``QueueClient``, on committed transactions.
"""

from __future__ import annotations

import html
import re
from dataclasses import dataclass
from typing import Any

import pytest
from django.db import connection
from django.test import Client
from django.urls import reverse

from django_jobqueue import QueueClient, batch
from django_jobqueue.models import Batch, DeadLetter, Job, Worker
from django_jobqueue.queue import engine_for
from tests import jobs_for_workers  # noqa: F401 - registers workers.batch_part and workers.batch_done

PART, DONE = "workers.batch_part", "workers.batch_done"
WORKER = "w1"
JOBS = reverse("admin:django_jobqueue_job_changelist")
DEAD = reverse("admin:django_jobqueue_deadletter_changelist")
BATCHES = reverse("admin:django_jobqueue_batch_changelist")
OVERVIEW = reverse("admin:django_jobqueue_queueoverview_changelist")
WORKERS = reverse("admin:django_jobqueue_worker_changelist")


def batch_url(batch_id: int) -> str:
    return reverse("admin:django_jobqueue_batch_change", args=[batch_id])


def text(response: Any) -> str:
    assert response.status_code == 200, response
    return response.content.decode()


def links(page: str) -> dict[str, str]:
    """Each link's text (tags left out) -> its address, as a browser reads them."""
    found = re.findall(r'<a\b[^>]*\bhref="([^"]*)"[^>]*>(.*?)</a>', page, flags=re.S)
    return {
        html.unescape(re.sub(r"<[^>]+>", "", label)).strip(): html.unescape(href) for href, label in found
    }


def listed(page: str) -> set[int]:
    """The ids of the rows a list shows (each row's action checkbox)."""
    return {int(pk) for pk in re.findall(r'name="_selected_action" value="(\d+)"', page)}


def heading(page: str) -> str:
    match = re.search(r"<h1>(.*?)</h1>", page, flags=re.S)
    assert match, "the page has a title"
    return html.unescape(match.group(1)).strip()


def readonly(page: str, field: str) -> str:
    """What a detail page shows for ``field``: its first read-only value."""
    after = page.split(f"field-{field}", 1)
    assert len(after) == 2, f"the page has a field {field}"
    match = re.search(r'<div class="readonly">(.*?)</div>', after[1], flags=re.S)
    assert match is not None
    return match.group(1).strip()


def messages_of(response: Any) -> list[str]:
    return [str(message) for message in response.context["messages"]]


@dataclass
class Seeded:
    first: Batch
    second: Batch
    jobs: dict[str, int]  # the first batch's job rows, by state
    dead: list[int]  # the first batch's dead letters
    others: set[int]  # every job row that is not the first batch's
    loose: int  # a job of no batch
    progress_letter: int  # a dead letter of the first batch whose job reported progress


@pytest.fixture
def seeded(queue: QueueClient) -> Seeded:
    """Two batches on one queue and a job of none; the first batch's jobs in every state."""
    with batch(on_finish=DONE, payload={"path": "-"}) as first:
        mine = [queue.push(PART, {"path": "-", "n": n}, queue="parts") for n in range(6)]
        waiting = queue.push(PART, {"path": "-", "n": 6}, queue="parts", depends_on=[mine[5]])
    with batch(on_finish=DONE, payload={"path": "-"}) as second:
        theirs = [queue.push(PART, {"path": "-", "n": n}, queue="parts") for n in range(2)]
    loose = queue.push(PART, {"path": "-", "n": 99}, queue="parts")
    claimed = {job.pk: job for job in queue.pull_many("parts", worker_id=WORKER, limit=100)}
    assert len(claimed) == 9

    assert queue.ack(claimed[mine[0].pk], worker_id=WORKER)
    report = {"current": 7, "total": 10, "message": "row 7 of 10"}
    assert queue.record_progress([(claimed[mine[1].pk], report)], worker_id=WORKER)
    assert queue.fail(claimed[mine[1].pk], worker_id=WORKER, error="ImportError: row 7 is malformed")
    assert queue.fail(claimed[mine[2].pk], worker_id=WORKER, error="ImportError: row 3 is malformed")
    assert queue.cancel(mine[4])
    assert queue.release(claimed[mine[5].pk], worker_id=WORKER)
    assert queue.fail(claimed[theirs[0].pk], worker_id=WORKER, error="no")
    assert queue.ack(claimed[theirs[1].pk], worker_id=WORKER)
    assert queue.release(claimed[loose.pk], worker_id=WORKER)

    jobs = {
        "done": mine[0].pk,
        "running": mine[3].pk,
        "cancelled": mine[4].pk,
        "ready": mine[5].pk,
        "waiting": waiting.pk,
    }
    rows = Job.objects.filter(batch_id=first.id).values_list("pk", "status")
    assert dict(rows) == {pk: status for status, pk in jobs.items()}
    dead = sorted(DeadLetter.objects.filter(job_id__in=[mine[1].pk, mine[2].pk]).values_list("pk", flat=True))
    assert len(dead) == 2 and DeadLetter.objects.filter(batch_id=second.id).count() == 1
    others = set(Job.objects.exclude(pk__in=jobs.values()).values_list("pk", flat=True))
    assert loose.pk in others and len(others) == 3, "the second batch's done job, its callback, the loose one"
    return Seeded(
        first=Batch.objects.get(pk=first.id),
        second=Batch.objects.get(pk=second.id),
        jobs=jobs,
        dead=dead,
        others=others,
        loose=loose.pk,
        progress_letter=DeadLetter.objects.get(job_id=mine[1].pk).pk,
    )


# -- the batch list and a batch's page -------------------------------------------------


@pytest.mark.parametrize(("url", "title"), [(BATCHES, "Batches"), (WORKERS, "Workers")])
def test_the_read_only_lists_have_titles_of_their_own(operator: Client, seeded: Seeded, url: str, title: str):
    """As the job list is "Jobs": not Django's "Select batch to view", nothing here is edited."""
    page = text(operator.get(url))
    assert heading(page) == title
    assert "Select" not in page.split("<h1>", 1)[1].split("</h1>", 1)[0]
    assert f"<title>{title} |" in page


def test_a_batch_page_links_its_jobs_per_state_and_its_dead_letters(operator: Client, seeded: Seeded):
    batch_id = seeded.first.id
    found = links(text(operator.get(batch_url(batch_id))))
    assert found["5 jobs"] == f"{JOBS}?batch={batch_id}"
    for state in ("ready", "running", "waiting", "done", "cancelled"):
        assert found[f"1 {state}"] == f"{JOBS}?batch={batch_id}&status={state}", state
    assert found["2 dead letters"] == f"{DEAD}?batch={batch_id}"

    # Each link opens a list of exactly what it counted.
    jobs_page = text(operator.get(found["5 jobs"]))
    assert listed(jobs_page) == set(seeded.jobs.values())
    assert "5 jobs" in jobs_page
    for state, pk in seeded.jobs.items():
        assert listed(text(operator.get(found[f"1 {state}"]))) == {pk}, state
    assert listed(text(operator.get(found["2 dead letters"]))) == set(seeded.dead)


def test_a_batch_page_counts_a_waiting_job_as_live(operator: Client, seeded: Seeded):
    """The batch has not finished while a job of it waits on its dependencies: it is live."""
    page = text(operator.get(batch_url(seeded.first.id)))
    assert readonly(page, "outstanding") == "3", "ready, running and waiting"


def test_a_finished_batch_says_how_many_of_its_jobs_are_no_longer_kept(operator: Client, seeded: Seeded):
    """The second batch: one job done and pruned, one dead letter; its page counts what is left."""
    Job.objects.filter(batch_id=seeded.second.id, status="done").delete()  # as the prune does
    found = links(page := text(operator.get(batch_url(seeded.second.id))))
    assert "1 dead letter" in found
    assert "1 more is no longer kept" in page
    assert listed(text(operator.get(found["1 dead letter"]))) == set(
        DeadLetter.objects.filter(batch_id=seeded.second.id).values_list("pk", flat=True)
    )


# -- the job and dead letter lists, filtered by batch ------------------------------------


@pytest.mark.parametrize("rows", ["Jobs", "Dead letters"])
def test_a_list_filtered_by_batch_names_it_and_can_be_cleared(operator: Client, seeded: Seeded, rows: str):
    batch_id = seeded.first.id
    url, of_batch, every_row = (
        (JOBS, set(seeded.jobs.values()), set(seeded.jobs.values()) | seeded.others)
        if rows == "Jobs"
        else (DEAD, set(seeded.dead), set(DeadLetter.objects.values_list("pk", flat=True)))
    )
    response = operator.get(url, {"batch": batch_id})
    page = text(response)
    assert heading(page) == f"{rows} of batch #{batch_id}"
    assert listed(page) == of_batch
    changelist = response.context["cl"]
    assert changelist.has_active_filters
    [spec] = [spec for spec in changelist.filter_specs if spec.title == "batch"]
    choices = list(spec.choices(changelist))
    [chosen] = [choice for choice in choices if choice["selected"]]
    assert chosen["display"] == f"#{batch_id} {DONE}"
    assert f"#{batch_id} {DONE}" in page, "the sidebar names the batch"
    assert "Clear all filters" in page

    # Clearing the batch's filter lists every row again, under the list's own title.
    [every] = [choice for choice in choices if choice["display"] == "All"]
    cleared = text(operator.get(url + every["query_string"]))
    assert listed(cleared) == every_row
    assert heading(cleared) == rows


def test_the_batch_filter_goes_with_the_other_filters(operator: Client, seeded: Seeded):
    batch_id = seeded.first.id
    page = text(operator.get(JOBS, {"batch": batch_id, "status": "ready", "queue": "parts"}))
    assert listed(page) == {seeded.jobs["ready"]}
    assert heading(page) == f"Jobs of batch #{batch_id}"
    assert listed(text(operator.get(JOBS, {"batch": seeded.second.id}))) == set(
        Job.objects.filter(batch_id=seeded.second.id).values_list("pk", flat=True)
    )


def test_retry_all_matching_names_the_batch_it_retries(operator: Client, seeded: Seeded):
    url = reverse("admin:django_jobqueue_deadletter_retry_matching") + f"?batch={seeded.first.id}"
    page = text(operator.get(url))
    assert f"batch: #{seeded.first.id} {DONE}" in page
    operator.post(url, {"post": "yes"})
    assert not DeadLetter.objects.filter(batch_id=seeded.first.id).exists()
    assert DeadLetter.objects.filter(batch_id=seeded.second.id).count() == 1, "the other batch's is left"


@pytest.mark.parametrize("value", ["x", "0", "-1", "1.5", "99999999999999999999"])
def test_a_batch_value_that_cannot_be_one_empties_the_list_with_a_message(
    operator: Client, seeded: Seeded, value: str
):
    for url in (JOBS, DEAD):
        response = operator.get(url, {"batch": value}, follow=True)
        assert response.status_code == 200
        assert listed(text(response)) == set()
        assert f"“{value}” is not a batch this list can show." in messages_of(response)


def test_a_batch_with_no_row_lists_nothing(operator: Client, seeded: Seeded):
    gone = seeded.second.id + 1000
    page = text(operator.get(JOBS, {"batch": gone}))
    assert listed(page) == set()
    assert heading(page) == f"Jobs of batch #{gone}"


# -- a job's and a dead letter's page --------------------------------------------------


def test_a_jobs_page_links_its_batch(operator: Client, seeded: Seeded):
    batch_id = seeded.first.id
    found = links(text(operator.get(reverse("admin:django_jobqueue_job_change", args=[seeded.jobs["done"]]))))
    assert found[f"#{batch_id} {DONE}"] == batch_url(batch_id)
    page = text(operator.get(reverse("admin:django_jobqueue_job_change", args=[seeded.loose])))
    assert batch_url(batch_id) not in page
    assert readonly(page, "batch_link") == "—"


def test_a_dead_letters_page_links_its_batch(operator: Client, seeded: Seeded):
    batch_id = seeded.first.id
    page = text(operator.get(reverse("admin:django_jobqueue_deadletter_change", args=[seeded.dead[0]])))
    assert links(page)[f"#{batch_id} {DONE}"] == batch_url(batch_id)


def test_a_dead_letters_page_shows_the_progress_its_job_reported(operator: Client, seeded: Seeded):
    url = reverse("admin:django_jobqueue_deadletter_change", args=[seeded.progress_letter])
    page = text(operator.get(url))
    assert '<progress class="jq-progress" max="10" value="7"' in page
    assert ">7 / 10 (70%) — row 7 of 10<" in page
    assert "As its last attempt reported it." in page
    other = [pk for pk in seeded.dead if pk != seeded.progress_letter]
    without = text(operator.get(reverse("admin:django_jobqueue_deadletter_change", args=other)))
    assert "jq-progress" not in without.replace("jq-progress-", "")


# -- a worker's slots --------------------------------------------------------------------


def insert_as_the_release_before(worker_id: str, concurrency: int) -> None:
    """A worker row as a worker of the release before registers it: without the range's columns."""
    now = engine_for(connection).now
    with connection.cursor() as cursor:
        cursor.execute(
            "INSERT INTO django_jobqueue_worker (worker_id, hostname, pid, queues, concurrency, "
            f"started_at, last_heartbeat) VALUES (%s, %s, %s, %s, %s, {now}, {now})",
            [worker_id, "web-3", 13, "[]", concurrency],
        )


def test_a_workers_slot_range_shows_beside_its_slots(operator: Client, queue: QueueClient):
    queue.register_worker(
        "elastic", hostname="web-1", pid=11, queues=[], concurrency=2, concurrency_range=(2, 8)
    )
    assert queue.resize_worker("elastic", 4)
    queue.register_worker("fixed", hostname="web-2", pid=12, queues=["sms"], concurrency=3)
    insert_as_the_release_before("older", 5)

    overview = text(operator.get(OVERVIEW))
    assert '<td class="jq-num">4 (range 2–8)</td>' in overview
    assert '<td class="jq-num">3</td>' in overview and '<td class="jq-num">5</td>' in overview
    workers = text(operator.get(WORKERS))
    assert re.search(r'field-slots">4 \(range 2–8\)<', workers)
    assert re.search(r'field-slots">3<', workers) and re.search(r'field-slots">5<', workers)
    elastic = Worker.objects.get(worker_id="elastic")
    page = text(operator.get(reverse("admin:django_jobqueue_worker_change", args=[elastic.pk])))
    assert readonly(page, "slots") == "4 (range 2–8)"


def test_a_worker_taking_over_a_row_writes_its_own_range(queue: QueueClient):
    """A new worker registering under the id of an older one's stale row: the range is its own."""
    insert_as_the_release_before("w", 5)
    Worker.objects.filter(worker_id="w").update(hostname="web-9", pid=99)
    queue.register_worker("w", hostname="web-9", pid=99, queues=[], concurrency=1, concurrency_range=(1, 4))
    row = Worker.objects.get(worker_id="w")
    assert (row.concurrency, row.min_concurrency, row.max_concurrency) == (1, 1, 4)
    queue.register_worker("w", hostname="web-9", pid=99, queues=[], concurrency=6)
    row = Worker.objects.get(worker_id="w")
    assert (row.concurrency, row.min_concurrency, row.max_concurrency) == (6, None, None)


def test_a_range_that_does_not_hold_the_slots_is_left_out(operator: Client, queue: QueueClient):
    """A worker of the release before took over a newer worker's row: the range left there is not its."""
    queue.register_worker("w", hostname="web-1", pid=11, queues=[], concurrency=2, concurrency_range=(2, 8))
    Worker.objects.filter(worker_id="w").update(concurrency=12)  # its registration writes the count alone
    assert re.search(r'field-slots">12<', text(operator.get(WORKERS)))
    assert '<td class="jq-num">12</td>' in text(operator.get(OVERVIEW))


@pytest.mark.parametrize("bounds", [(0, 4), (5, 4), (1, True), ("1", 4)])
def test_a_bad_range_is_refused_before_anything_is_written(queue: QueueClient, bounds: Any):
    with pytest.raises(ValueError, match="concurrency_range"):
        queue.register_worker("w", hostname="h", pid=1, queues=[], concurrency=1, concurrency_range=bounds)
    assert not Worker.objects.exists()


def test_a_batchs_counts_read_with_thousands_separated_and_sort_the_list(operator: Client, seeded: Seeded):
    Batch.objects.filter(pk=seeded.first.id).update(total=12_000, done=9_017, failed=1_200)
    Batch.objects.filter(pk=seeded.second.id).update(total=40, done=31)
    page = text(operator.get(BATCHES))
    assert "9,017" in page and "1,200" in page
    assert "12,000" in text(operator.get(batch_url(seeded.first.id)))

    # Sorted by the done column (the fourth), most first, then least first.
    def order(query: str) -> list[int]:
        found = re.findall(r"/batch/(\d+)/change/", text(operator.get(BATCHES + query)))
        return [int(pk) for pk in dict.fromkeys(found)]

    assert order("?o=-4") == [seeded.first.id, seeded.second.id]
    assert order("?o=4") == [seeded.second.id, seeded.first.id]
