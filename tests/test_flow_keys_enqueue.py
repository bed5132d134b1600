"""The enqueue side of concurrency keys: options, their refusals, and every insert path.

A job's ``concurrency_key`` and ``concurrency_limit`` are declared at enqueue
(the limit may default to ``@job(concurrency_limit=)``), fixed on the row, and
travel with the job through every statement that writes or moves it: INSERT,
the array batch, COPY, the dead letters and back, the schedules' fires. How the
claim enforces them is tested elsewhere; jobs are put in the running state here
by hand, so these tests do not depend on the claim.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from importlib.util import find_spec
from typing import Any

import pytest
from django.conf import settings
from django.contrib.admin.sites import site
from django.db import connection, transaction
from django.test import Client
from django.test.utils import CaptureQueriesContext, override_settings
from django.urls import reverse
from django.utils import timezone

from django_jobqueue import enqueue, enqueue_many, job, registry
from django_jobqueue.checks import check_jobqueue_settings
from django_jobqueue.models import DeadLetter, Job
from django_jobqueue.models import Schedule as ScheduleRow
from django_jobqueue.queue.schedules import ScheduleBook
from django_jobqueue.queue.timetable import Schedule
from django_jobqueue.schedules import ScheduleError, declared_schedules, read_schedule

KEYED = "tests.flow_keys.keyed"  # @job(concurrency_limit=3): the default for keyed enqueues
PLAIN = "tests.flow_keys.plain"  # no default limit
UNREGISTERED = "tests.flow_keys.unregistered"
JOB_DEFAULT = 3


@job(name=KEYED, concurrency_limit=JOB_DEFAULT)
def keyed(n: int = 0) -> int:
    return n


@job(name=PLAIN)
def plain(n: int = 0) -> int:
    return n


def stored(made: Job) -> tuple[str | None, int | None]:
    """The key and limit the row holds, checked to be those the returned Job says."""
    row = Job.objects.get(pk=made.pk)
    assert (row.concurrency_key, row.concurrency_limit) == (made.concurrency_key, made.concurrency_limit)
    return row.concurrency_key, row.concurrency_limit


def running(made: Job, worker_id: str = "w1") -> None:
    """Put a job in the running state under ``worker_id``, as a claim would."""
    Job.objects.filter(pk=made.pk).update(
        status="running", locked_by=worker_id, attempts=1, locked_until=timezone.now() + timedelta(minutes=5)
    )


# -- each way to enqueue -------------------------------------------------------------


def test_every_way_to_enqueue_one_job_stores_the_key_and_limit(queue):
    assert stored(enqueue(PLAIN, concurrency_key="tenant:1", concurrency_limit=2)) == ("tenant:1", 2)
    assert stored(queue.push(PLAIN, {}, concurrency_key="tenant:2", concurrency_limit=5)) == ("tenant:2", 5)
    bound = plain.using(concurrency_key="tenant:3", concurrency_limit=1)
    assert stored(bound.enqueue(n=1)) == ("tenant:3", 1)
    (one,) = enqueue_many([(PLAIN, {}, {"concurrency_key": "tenant:4", "concurrency_limit": 10_000})])
    assert stored(one) == ("tenant:4", 10_000)
    assert stored(enqueue(UNREGISTERED, concurrency_key="é/租户:5", concurrency_limit=7)) == ("é/租户:5", 7)


def test_a_job_without_a_key_has_neither(queue):
    assert stored(enqueue(PLAIN)) == (None, None)
    assert stored(plain.enqueue()) == (None, None)
    assert stored(enqueue(PLAIN, concurrency_key=None, concurrency_limit=None)) == (None, None)


def test_the_job_default_applies_only_with_a_key(queue):
    assert stored(enqueue(KEYED, concurrency_key="tenant:1")) == ("tenant:1", JOB_DEFAULT)
    assert stored(keyed.using(concurrency_key="tenant:1").enqueue()) == ("tenant:1", JOB_DEFAULT)
    assert stored(queue.push(KEYED, {}, concurrency_key="tenant:1")) == ("tenant:1", JOB_DEFAULT)
    # Without a key, @job's limit is no limit of the job's.
    assert stored(keyed.enqueue()) == (None, None)
    assert stored(enqueue(KEYED)) == (None, None)


def test_the_enqueue_limit_wins_over_the_job_default(queue):
    assert stored(enqueue(KEYED, concurrency_key="tenant:1", concurrency_limit=1)) == ("tenant:1", 1)
    assert stored(keyed.using(concurrency_key="t", concurrency_limit=9).enqueue()) == ("t", 9)
    (one,) = enqueue_many([(KEYED, {}, {"concurrency_key": "t", "concurrency_limit": 4})])
    assert stored(one) == ("t", 4)


# -- batches: each insert path ---------------------------------------------------------


def batch_items(size: int, *, unique: bool) -> list[Any]:
    """Items cycling through an explicit limit, @job's default, no key, and another job's key."""
    cycle: list[tuple[str, dict[str, Any]]] = [
        (KEYED, {"concurrency_key": "tenant:a", "concurrency_limit": 5}),
        (KEYED, {"concurrency_key": "tenant:b"}),  # KEYED's own limit
        (KEYED, {}),  # no key; in a plain batch, the per-name fast path after the first
        (PLAIN, {"concurrency_key": "tenant:a", "concurrency_limit": 2}),
    ]
    items: list[Any] = []
    for i in range(size):
        name, options = cycle[i % len(cycle)]
        options = {**options, "unique_key": f"u{i}"} if unique else options
        items.append((name, {"n": i}, options) if options else (name, {"n": i}))
    return items


def expected_pairs(items: list[Any]) -> list[tuple[str | None, int | None]]:
    pairs: list[tuple[str | None, int | None]] = []
    for item in items:
        options = item[2] if len(item) == 3 else {}
        key = options.get("concurrency_key")
        limit = options.get("concurrency_limit", JOB_DEFAULT if key is not None else None)
        pairs.append((key, limit))
    return pairs


def insert_path(statements: list[str]) -> str:
    if any(sql.startswith("COPY") for sql in statements):
        return "copy"
    if any("unnest(" in sql for sql in statements if sql.startswith("INSERT")):
        return "arrays"
    assert any(" VALUES " in sql for sql in statements if sql.startswith("INSERT"))
    return "values"


@pytest.mark.parametrize("unique", [False, True], ids=["plain", "unique-keys"])
@pytest.mark.parametrize("size", [6, 40])
def test_every_batch_path_stores_each_items_key_and_limit(queue, on_postgresql, size, unique):
    items = batch_items(size, unique=unique)
    with CaptureQueriesContext(connection) as queries:
        made = enqueue_many(items)
    # PostgreSQL: COPY for 16 or more jobs without unique keys, else one array INSERT.
    if not on_postgresql:
        assert insert_path([q["sql"] for q in queries.captured_queries]) == "values"
    else:
        expected = "copy" if size >= 16 and not unique else "arrays"
        assert insert_path([q["sql"] for q in queries.captured_queries]) == expected
    pairs = expected_pairs(items)
    assert [(j.concurrency_key, j.concurrency_limit) for j in made] == pairs
    rows = Job.objects.in_bulk([j.pk for j in made])
    assert [(rows[j.pk].concurrency_key, rows[j.pk].concurrency_limit) for j in made] == pairs


def test_a_large_batch_goes_by_copy_with_its_keys(queue, postgresql_only):
    items = [
        (PLAIN, {"n": i}, {"concurrency_key": f"tenant:{i % 50}", "concurrency_limit": 2}) for i in range(700)
    ]
    with CaptureQueriesContext(connection) as queries:
        made = enqueue_many(items)
    assert insert_path([q["sql"] for q in queries.captured_queries]) == "copy"
    assert Job.objects.filter(concurrency_limit=2).count() == 700
    assert Job.objects.filter(concurrency_key="tenant:49").count() == 14
    assert made[-1].concurrency_key == "tenant:49" and stored(made[-1]) == ("tenant:49", 2)


def test_a_unique_key_and_a_concurrency_key_together_just_work(queue):
    first = enqueue(PLAIN, unique_key="sync:7", concurrency_key="tenant:7", concurrency_limit=1)
    again = enqueue(PLAIN, unique_key="sync:7", concurrency_key="tenant:7", concurrency_limit=1)
    assert again.pk == first.pk and Job.objects.count() == 1
    # In a batch too: the live job stands in for a second of its unique key.
    batch = enqueue_many(
        [
            (PLAIN, {}, {"unique_key": "sync:7", "concurrency_key": "tenant:7", "concurrency_limit": 1}),
            (PLAIN, {}, {"unique_key": "sync:8", "concurrency_key": "tenant:7", "concurrency_limit": 1}),
        ]
    )
    assert batch[0].pk == first.pk and Job.objects.count() == 2
    assert stored(batch[1]) == ("tenant:7", 1)


@pytest.mark.skipif(
    find_spec("django.tasks") is None and find_spec("django_tasks") is None,
    reason="needs Django's Tasks framework (Django 6, or django-tasks on 5.2)",
)
def test_a_django_task_has_no_key(queue):
    from tests import tasks_for_workers as tasks

    row = Job.objects.get(pk=int(tasks.add.enqueue(1, 2).id))
    assert (row.concurrency_key, row.concurrency_limit) == (None, None)


# -- refusals -------------------------------------------------------------------------

BAD_OPTIONS = [
    pytest.param(
        PLAIN, {"concurrency_key": "t:1"}, "concurrency_key needs a concurrency_limit", id="no-limit"
    ),
    pytest.param(
        UNREGISTERED,
        {"concurrency_key": "t:1"},
        "concurrency_key needs a concurrency_limit",
        id="unregistered",
    ),
    pytest.param(PLAIN, {"concurrency_limit": 2}, "concurrency_limit needs a concurrency_key", id="no-key"),
    pytest.param(
        KEYED, {"concurrency_limit": 2}, "concurrency_limit needs a concurrency_key", id="no-key-default"
    ),
    pytest.param(KEYED, {"concurrency_key": ""}, "non-empty string", id="empty-key"),
    pytest.param(KEYED, {"concurrency_key": "   "}, "non-empty string", id="blank-key"),
    pytest.param(KEYED, {"concurrency_key": 42}, "non-empty string", id="int-key"),
    pytest.param(KEYED, {"concurrency_key": "k" * 256}, "at most 255 characters", id="long-key"),
    pytest.param(KEYED, {"concurrency_key": "a\nb"}, "control characters", id="control-key"),
    pytest.param(KEYED, {"concurrency_key": "a\x7fb"}, "control characters", id="delete-key"),
    pytest.param(KEYED, {"concurrency_key": "tenant:\ud800"}, "lone surrogate", id="surrogate-key"),
    pytest.param(KEYED, {"concurrency_key": "t", "concurrency_limit": 0}, "from 1 to 10,000", id="zero"),
    pytest.param(KEYED, {"concurrency_key": "t", "concurrency_limit": -1}, "from 1 to 10,000", id="negative"),
    pytest.param(KEYED, {"concurrency_key": "t", "concurrency_limit": 10_001}, "from 1 to 10,000", id="huge"),
    pytest.param(KEYED, {"concurrency_key": "t", "concurrency_limit": True}, "from 1 to 10,000", id="bool"),
    pytest.param(KEYED, {"concurrency_key": "t", "concurrency_limit": 1.5}, "from 1 to 10,000", id="float"),
    pytest.param(KEYED, {"concurrency_key": "t", "concurrency_limit": "2"}, "from 1 to 10,000", id="string"),
]


@contextmanager
def refused(match: str) -> Iterator[None]:
    """Expect a ``ValueError`` matching ``match``, with not one query on the way."""
    with CaptureQueriesContext(connection) as queries, pytest.raises(ValueError, match=match):
        yield
    assert len(queries) == 0, "refused before any SQL"


@pytest.mark.parametrize(("name", "options", "match"), BAD_OPTIONS)
def test_a_bad_pair_is_refused_on_every_path_and_writes_nothing(queue, name, options, match):
    with refused(match):
        enqueue(name, **options)
    with refused(match):
        queue.push(name, {}, **options)
    if name != UNREGISTERED:
        function = keyed if name == KEYED else plain
        with refused(match):
            function.using(**options).enqueue()
    with refused(rf"item 2: .*{match}"):
        enqueue_many([(name, {}), (name, {}), (name, {}, options)])
    assert not Job.objects.exists()


def test_a_key_without_a_limit_says_which_options_could_give_one(queue):
    with pytest.raises(ValueError) as raised:
        enqueue(PLAIN, concurrency_key="tenant:1")
    message = str(raised.value)
    assert "concurrency_limit" in message and "@job(concurrency_limit=...)" in message and PLAIN in message


@pytest.mark.parametrize(
    ("name", "options", "match"), BAD_OPTIONS[:1] + BAD_OPTIONS[2:3] + BAD_OPTIONS[10:11]
)
def test_a_refusal_leaves_the_callers_transaction_usable(queue, name, options, match):
    with transaction.atomic():
        enqueue(PLAIN)
        with pytest.raises(ValueError, match=match):
            enqueue(name, **options)
        with pytest.raises(ValueError, match=match):
            enqueue_many([(name, {}, options)])
        enqueue(PLAIN, concurrency_key="tenant:1", concurrency_limit=1)
    assert Job.objects.count() == 2


def test_a_bad_item_deep_in_a_large_batch_writes_nothing_and_the_transaction_goes_on(queue):
    items: list[Any] = [
        (PLAIN, {"n": i}, {"concurrency_key": "t", "concurrency_limit": 2}) for i in range(700)
    ]
    items[650] = (PLAIN, {"n": 650}, {"concurrency_key": "t"})
    with transaction.atomic():
        enqueue(PLAIN)
        # On PostgreSQL the batch goes by COPY, checked as it streams: abandoned and rolled back.
        with pytest.raises(ValueError, match="item 650: concurrency_key needs a concurrency_limit"):
            enqueue_many(items)
        enqueue(PLAIN)
    assert Job.objects.count() == 2 and not Job.objects.filter(concurrency_key="t").exists()


@pytest.mark.parametrize("bad", [0, 10_001, True, "1", 2.0])
def test_job_refuses_a_bad_default_limit_when_the_module_is_imported(bad):
    with pytest.raises(ValueError, match="concurrency_limit must be a whole number from 1 to 10,000"):

        @job(name="tests.flow_keys.bad", concurrency_limit=bad)
        def bad_job() -> None: ...

    assert registry.lookup("tests.flow_keys.bad") is None


# -- dead letters: kept, and restored by a retry ------------------------------------------


def test_a_dead_letter_keeps_the_key_and_a_retry_restores_it(queue):
    made = enqueue(PLAIN, concurrency_key="tenant:1", concurrency_limit=2)
    running(made)
    assert queue.fail(made.pk, worker_id="w1", error="boom")
    letter = DeadLetter.objects.get(job_id=made.pk)
    assert (letter.concurrency_key, letter.concurrency_limit) == ("tenant:1", 2)
    revived = queue.retry_dead_letter(letter)
    assert stored(revived) == ("tenant:1", 2) and revived.concurrency_key == "tenant:1"


def test_spent_nacks_and_expired_claims_keep_the_key_and_a_batch_retry_restores_it(queue):
    nacked = enqueue(PLAIN, {"n": 1}, concurrency_key="tenant:1", concurrency_limit=2, max_attempts=1)
    expired = enqueue(KEYED, {"n": 2}, concurrency_key="tenant:2", max_attempts=1)
    unkeyed = enqueue(PLAIN, {"n": 3}, max_attempts=1)
    for made in (nacked, expired, unkeyed):
        running(made)
    assert queue.nack(nacked.pk, worker_id="w1", error="boom")
    assert queue.nack(unkeyed.pk, worker_id="w1", error="boom")
    Job.objects.filter(pk=expired.pk).update(locked_until=timezone.now() - timedelta(minutes=5))
    assert queue.tick_timeouts() == 1
    letters = {d.job_id: (d.concurrency_key, d.concurrency_limit) for d in DeadLetter.objects.all()}
    assert letters == {
        nacked.pk: ("tenant:1", 2),
        expired.pk: ("tenant:2", JOB_DEFAULT),
        unkeyed.pk: (None, None),
    }
    assert queue.retry_dead_letters(DeadLetter.objects.all()) == 3
    assert {(j.payload["n"], j.concurrency_key, j.concurrency_limit) for j in Job.objects.all()} == {
        (1, "tenant:1", 2),
        (2, "tenant:2", JOB_DEFAULT),
        (3, None, None),
    }


# -- schedules --------------------------------------------------------------------------

START = datetime(2026, 6, 1, 12, 0, 30, tzinfo=UTC)


def fire_once(schedule: Schedule) -> Job:
    """The job of ``schedule``'s first fire time after ``START``."""
    book = ScheduleBook()
    book.sync([schedule], now=START)
    fired = book.fire_due([schedule], now=START + timedelta(seconds=31))
    assert len(fired) == 1 and fired[0].error is None and len(fired[0].job_ids) == 1
    return Job.objects.get(pk=fired[0].job_ids[0])


@pytest.mark.parametrize(
    ("entry", "expected"),
    [
        ({"job": PLAIN, "concurrency_key": "tenant:9", "concurrency_limit": 4}, ("tenant:9", 4)),
        ({"job": KEYED, "concurrency_key": "tenant:9"}, ("tenant:9", JOB_DEFAULT)),
        ({"job": KEYED, "concurrency_key": "tenant:9", "concurrency_limit": 1}, ("tenant:9", 1)),
        ({"job": KEYED}, (None, None)),
    ],
)
def test_a_schedules_jobs_carry_its_key_and_limit(queue, entry, expected):
    schedule = read_schedule("flow.minutely", {**entry, "every": 60})
    made = fire_once(schedule)
    assert (made.concurrency_key, made.concurrency_limit) == expected
    assert stored(ScheduleBook().run_now(schedule)) == expected


def test_a_schedule_declared_in_the_settings_carries_them(queue):
    declared = {"tenant-sync": {"job": PLAIN, "every": 60, "concurrency_key": "t:1", "concurrency_limit": 2}}
    with override_settings(JOBQUEUE={**settings.JOBQUEUE, "SCHEDULES": declared}):
        (schedule,) = [s for s in declared_schedules() if s.name == "tenant-sync"]
    made = fire_once(schedule)
    assert (made.concurrency_key, made.concurrency_limit) == ("t:1", 2)


def test_a_schedule_without_a_key_keeps_the_signature_it_had():
    # A row written before these keys existed must still match its unchanged declaration.
    schedule = Schedule(name="s", job=PLAIN, every=60)
    assert not {"concurrency_key", "concurrency_limit"} & set(schedule.definition())
    keyed_schedule = Schedule(name="s", job=KEYED, every=60, concurrency_key="t")
    assert keyed_schedule.signature != schedule.signature
    assert keyed_schedule.definition()["concurrency_key"] == "t"


@pytest.mark.parametrize(
    ("entry", "match"),
    [
        ({"job": PLAIN, "concurrency_key": "t"}, "concurrency_key needs a concurrency_limit"),
        ({"job": KEYED, "concurrency_limit": 2}, "concurrency_limit needs a concurrency_key"),
        ({"job": KEYED, "concurrency_key": ""}, "non-empty string"),
        ({"job": KEYED, "concurrency_key": "x" * 256}, "at most 255"),
        ({"job": KEYED, "concurrency_key": "t", "concurrency_limit": 0}, "from 1 to 10,000"),
        ({"job": KEYED, "concurrency_key": "t", "concurrency_limit": True}, "from 1 to 10,000"),
    ],
)
def test_a_bad_schedule_key_or_limit_is_a_check_error_naming_the_schedule(entry, match):
    entry = {**entry, "every": 60}
    with pytest.raises(ScheduleError, match=rf"schedule 'tenant-sync': .*{match}"):
        read_schedule("tenant-sync", entry)
    with override_settings(JOBQUEUE={**settings.JOBQUEUE, "SCHEDULES": {"tenant-sync": entry}}):
        errors = [m for m in check_jobqueue_settings() if m.id == "django_jobqueue.E011"]
    assert len(errors) == 1 and "'tenant-sync'" in errors[0].msg and re.search(match, errors[0].msg)


# -- the admin ----------------------------------------------------------------------------

JOBS = reverse("admin:django_jobqueue_job_changelist")
SCHEDULES = reverse("admin:django_jobqueue_schedule_changelist")


def page(client: Client, url: str) -> str:
    response = client.get(url)
    assert response.status_code == 200
    return response.content.decode()


def readonly_value(text: str, label: str) -> str | None:
    """The text of the read-only field ``label`` on a detail page; None if there is none."""
    found = re.search(rf"<label>{label}:</label>\s*<div class=\"readonly\">(.*?)</div>", text, re.S)
    return found.group(1) if found is not None else None


def test_job_and_dead_letter_pages_show_the_key_and_limit(operator, queue):
    made = enqueue(PLAIN, concurrency_key="tenant:<42>", concurrency_limit=2)
    shown = page(operator, reverse("admin:django_jobqueue_job_change", args=[made.pk]))
    assert readonly_value(shown, "Concurrency key") == "tenant:&lt;42&gt;", "escaped"
    assert readonly_value(shown, "Concurrency limit") == "2 at once"
    unkeyed = page(operator, reverse("admin:django_jobqueue_job_change", args=[enqueue(PLAIN).pk]))
    assert readonly_value(unkeyed, "Concurrency key") == readonly_value(unkeyed, "Concurrency limit") == "—"
    running(made)
    assert queue.fail(made.pk, worker_id="w1", error="boom")
    letter = DeadLetter.objects.get(job_id=made.pk)
    shown = page(operator, reverse("admin:django_jobqueue_deadletter_change", args=[letter.pk]))
    assert readonly_value(shown, "Concurrency key") == "tenant:&lt;42&gt;"
    assert readonly_value(shown, "Concurrency limit") == "2 at once"


def test_a_schedules_page_shows_the_key_and_limit_when_it_declares_a_key(operator):
    declared = {
        "keyed-default": {"job": KEYED, "every": 60, "concurrency_key": "tenant:7"},
        "keyed-own": {"job": PLAIN, "every": 60, "concurrency_key": "tenant:8", "concurrency_limit": 5},
        "unkeyed": {"job": PLAIN, "every": 60},
    }
    with override_settings(JOBQUEUE={**settings.JOBQUEUE, "SCHEDULES": declared}):
        page(operator, SCHEDULES)  # gives each declared schedule its row
        rows = {row.name: row.pk for row in ScheduleRow.objects.all()}
        pages = {
            name: page(operator, reverse("admin:django_jobqueue_schedule_change", args=[pk]))
            for name, pk in rows.items()
        }
    assert readonly_value(pages["keyed-default"], "Concurrency key") == "tenant:7"
    assert readonly_value(pages["keyed-default"], "Concurrency limit") == "the job&#x27;s own"
    assert readonly_value(pages["keyed-own"], "Concurrency limit") == "5 at once"
    assert "Concurrency" not in pages["unkeyed"]


def test_the_job_search_finds_ready_and_running_jobs_by_their_key(operator, queue):
    ready = enqueue(PLAIN, concurrency_key="tenant:9", concurrency_limit=2)
    busy = enqueue(PLAIN, concurrency_key="tenant:9", concurrency_limit=2)
    running(busy)
    enqueue(PLAIN, concurrency_key="tenant:10", concurrency_limit=2)
    named = enqueue("tenant:9")  # a job whose name is the term is found as before
    response = operator.get(JOBS, {"q": "tenant:9"})
    assert {j.pk for j in response.context["cl"].result_list} == {ready.pk, busy.pk, named.pk}


def test_the_job_search_by_key_reads_indexes_only(queue, postgresql_only):
    """The keys and the finished jobs, the bulk of the table, by indexes; the live ones by primary key.

    On PostgreSQL the live jobs have no index on name (an enqueue and a claim
    would pay for it): the search reads them backwards by id, each checked.
    The keys are looked up apart, in a subquery that reads their indexes.
    """
    enqueue_many(
        [(PLAIN, {}, {"concurrency_key": f"tenant:{i}", "concurrency_limit": 1}) for i in range(300)]
    )
    enqueue_many([(PLAIN, {}, {}) for _ in range(3000)])
    Job.objects.filter(concurrency_key__isnull=True).update(status="done")
    job_admin = site._registry[Job]
    with transaction.atomic(), connection.cursor() as cursor:
        cursor.execute("ANALYZE django_jobqueue_job")
        # With sequential scans priced out, a term that no index can find still
        # reads the whole table: by a backwards scan of the primary key, filtered.
        cursor.execute("SET LOCAL enable_seqscan = off")
        for term in ("tenant:9", "#12"):
            plan = (
                Job.objects.filter(job_admin.search_filter(term, "default")).order_by("-id")[:100].explain()
            )
            assert "Seq Scan" not in plan, plan
            keys, rows = plan.split("Sort Key", 1)
            assert keys.count("Bitmap Index Scan on jobqueue_unique_key_idx_") == 2, plan
            finished, live = rows.split("on django_jobqueue_job_live", 1)
            assert "Bitmap Heap Scan on django_jobqueue_job_finished" in finished, plan
            assert "Bitmap Index Scan on jobqueue_name_id_idx_finished" in finished, plan
            live_scan = finished.splitlines()[-1]
            assert "Index Scan Backward using django_jobqueue_job_live_pkey" in live_scan, plan
