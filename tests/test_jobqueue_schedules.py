"""``manage.py jobqueue schedules``: each declared schedule and its state, as a table or JSON; reads only."""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterator
from datetime import datetime, timedelta
from io import StringIO
from typing import Any
from zoneinfo import ZoneInfo

import pytest
from django.conf import settings
from django.core.management import CommandError, call_command
from django.db import connection
from django.test.utils import CaptureQueriesContext, override_settings

from django_jobqueue import job, registry
from django_jobqueue.models import Job, Schedule
from django_jobqueue.queue.schedules import ScheduleBook
from django_jobqueue.schedules import declared_schedules
from tests.test_jobqueue_command import shell_env
from tests.worker_support import run_manage

AMSTERDAM = ZoneInfo("Europe/Amsterdam")
SCHEDULES = {
    "nightly-report": {
        "job": "tests.sched.report",
        "cron": "0 3 * * *",
        "timezone": "Europe/Amsterdam",
        "payload": {"kind": "daily"},
        "queue": "reports",
    },
}


def run(*args: str) -> str:
    out = StringIO()
    call_command("jobqueue", *args, stdout=out)
    return out.getvalue()


def listed(*args: str) -> dict[str, dict[str, Any]]:
    """``schedules --json``, by schedule name."""
    entries = json.loads(run("schedules", "--json", *args))
    assert isinstance(entries, list)
    return {entry["name"]: entry for entry in entries}


def with_schedules(schedules: dict[str, Any]) -> override_settings:
    return override_settings(JOBQUEUE={**settings.JOBQUEUE, "SCHEDULES": schedules})


@pytest.fixture
def declared(queue: Any) -> Iterator[None]:
    """A schedule in the settings, and one by the ``@job(every=...)`` shorthand; jobs registered here."""

    @job(name="tests.sched.report")
    def report(kind: str) -> None: ...

    @job(name="tests.sched.ping", every=30)
    def ping() -> None: ...

    try:
        with with_schedules(SCHEDULES):
            yield
    finally:
        registry.unregister("tests.sched.report")
        registry.unregister("tests.sched.ping")


def parse(text: str) -> datetime:
    moment = datetime.fromisoformat(text)
    assert moment.tzinfo is not None, text
    return moment


def test_one_entry_per_declared_schedule(declared):
    now = ScheduleBook().now()
    entries = listed()
    assert sorted(entries) == ["nightly-report", "tests.sched.ping"]

    nightly = entries["nightly-report"]
    assert {k: nightly[k] for k in ("job", "cron", "every", "timezone", "queue", "catch_up")} == {
        "job": "tests.sched.report",
        "cron": "0 3 * * *",
        "every": None,
        "timezone": "Europe/Amsterdam",
        "queue": "reports",
        "catch_up": "latest",
    }
    next_fire = parse(nightly["next_fire_at"])
    assert now < next_fire <= now + timedelta(days=1)
    assert (next_fire.astimezone(AMSTERDAM).hour, next_fire.minute) == (3, 0)
    assert (nightly["last_fire_at"], nightly["last_job_id"], nightly["paused"]) == (None, None, False)

    ping = entries["tests.sched.ping"]
    assert (ping["job"], ping["cron"], ping["every"], ping["payload"]) == ("tests.sched.ping", None, 30, {})
    next_ping = parse(ping["next_fire_at"])
    assert now < next_ping <= now + timedelta(seconds=30)
    assert next_ping.timestamp() % 30 == 0, "every: multiples of 30 s since the epoch"


def test_the_table_reads_well(declared):
    lines = run("schedules").splitlines()
    assert lines[0].split() == [
        "schedule",
        "job",
        "when",
        "timezone",
        "next",
        "fire",
        "(UTC)",
        "last",
        "fire",
        "(UTC)",
        "paused",
    ]
    nightly = next(line for line in lines if line.startswith("nightly-report"))
    assert "cron 0 3 * * *" in nightly and "Europe/Amsterdam" in nightly and "(in " in nightly
    assert nightly.split()[-2:] == ["—", "no"]
    ping = next(line for line in lines if line.startswith("tests.sched.ping"))
    assert "every 30 s" in ping
    assert (
        lines[-1]
        == "Not yet started (no worker has run since it was declared): nightly-report, tests.sched.ping"
    )


def test_last_fire_shows_once_a_worker_fired_it(declared):
    book = ScheduleBook()
    schedules = declared_schedules()
    # Midday (UTC) of the day before the database's: hours from the nightly fire time (03:00
    # Amsterdam), whose fire time would otherwise be on time, and enqueued beside the latest missed
    # one, in the minute after it. The day before: the command shows that fire time against the
    # clock, "ago" only once it has passed (today's is still ahead before 02:00 UTC).
    now = (book.now() - timedelta(days=1)).replace(hour=12, minute=0, second=0, microsecond=0)
    book.sync(schedules, now=now - timedelta(days=2))
    fired = {each.schedule: each for each in book.fire_due(schedules, now=now)}

    entries = listed()
    nightly = next(s for s in schedules if s.name == "nightly-report")
    last = nightly.latest_until(now)
    assert last is not None and fired["nightly-report"].fire_times == (last,)
    assert parse(entries["nightly-report"]["last_fire_at"]) == last
    assert entries["nightly-report"]["last_job_id"] == fired["nightly-report"].job_ids[-1]
    job_row = Job.objects.get(pk=entries["nightly-report"]["last_job_id"])
    assert (job_row.name, job_row.queue, job_row.payload) == (
        "tests.sched.report",
        "reports",
        {"kind": "daily"},
    )
    assert parse(entries["tests.sched.ping"]["last_fire_at"]) == fired["tests.sched.ping"].fire_times[-1]
    assert "Not yet started" not in run("schedules")
    nightly_line = next(line for line in run("schedules").splitlines() if line.startswith("nightly-report"))
    assert f"{last:%Y-%m-%d %H:%M:%S} (" in nightly_line and " ago)" in nightly_line


def test_paused_shows_after_pause(declared):
    book = ScheduleBook()
    book.sync(declared_schedules())
    assert book.pause(["nightly-report"]) == ["nightly-report"]
    entries = listed()
    assert (entries["nightly-report"]["paused"], entries["tests.sched.ping"]["paused"]) == (True, False)
    lines = {line.split()[0]: line for line in run("schedules").splitlines()[1:] if line}
    assert {name: line.split()[-1] for name, line in lines.items()} == {
        "nightly-report": "yes",
        "tests.sched.ping": "no",
    }
    # A paused schedule has no next fire time until it is resumed: the admin's meaning too.
    assert entries["nightly-report"]["next_fire_at"] is None
    assert entries["tests.sched.ping"]["next_fire_at"] is not None
    assert "Europe/Amsterdam  paused " in lines["nightly-report"], lines["nightly-report"]
    book.resume(["nightly-report"])
    assert listed()["nightly-report"]["paused"] is False
    assert listed()["nightly-report"]["next_fire_at"] is not None


def stored() -> list[tuple[Any, ...]]:
    return sorted(Schedule.objects.values_list(*(f.attname for f in Schedule._meta.concrete_fields)))


def test_the_command_writes_no_rows(declared):
    book = ScheduleBook()
    schedules = declared_schedules()
    assert not Schedule.objects.exists()
    with CaptureQueriesContext(connection) as queries:
        run("schedules")
        run("schedules", "--json")
    assert not Schedule.objects.exists(), "a schedule no worker has synced gets no row from the command"
    assert queries.captured_queries
    assert all(q["sql"].lstrip().upper().startswith("SELECT") for q in queries.captured_queries), [
        q["sql"] for q in queries.captured_queries
    ]

    now = book.now()
    book.sync(schedules, now=now - timedelta(hours=1))
    book.fire_due(schedules, now=now)
    book.pause(["tests.sched.ping"])
    rows, jobs = stored(), list(Job.objects.order_by("pk").values_list("pk", "run_at"))
    run("schedules")
    run("schedules", "--json")
    assert (stored(), list(Job.objects.order_by("pk").values_list("pk", "run_at"))) == (rows, jobs)


def test_no_schedule_declared(queue):
    with with_schedules({}):
        assert run("schedules") == "No schedule is declared (JOBQUEUE['SCHEDULES'], @job(cron=/every=)).\n"
        assert json.loads(run("schedules", "--json")) == []


def test_database_option(declared):
    assert sorted(listed("--database", "default")) == ["nightly-report", "tests.sched.ping"]
    with pytest.raises(CommandError, match="'elsewhere' is not a key of DATABASES"):
        run("schedules", "--database", "elsewhere")


def test_a_bad_declaration_is_a_clear_error(declared):
    bad = {
        **SCHEDULES,
        "broken": {"job": "tests.sched.report", "cron": "61 * * * *", "payload": {"kind": "x"}},
    }
    with (
        with_schedules(bad),
        pytest.raises(CommandError, match=r"schedule 'broken': bad 'cron' '61 \* \* \* \*'"),
    ):
        run("schedules")
    assert not Schedule.objects.exists()


SHELL_SCHEDULES = {"texts": {"job": "send_otp", "every": 60, "payload": {"account_id": "1"}}}


def shell(*args: str, schedules: dict[str, Any]) -> subprocess.CompletedProcess[str]:
    return run_manage("jobqueue", *args, env={**shell_env(), "JOBQUEUE_SCHEDULES": json.dumps(schedules)})


def test_from_a_shell_exit_status_0_1_and_2(queue):
    """0 with the list; 1 for a bad declaration (system checks, or the command itself); 2 for bad args."""
    done = shell("schedules", "--json", schedules=SHELL_SCHEDULES)
    assert done.returncode == 0, done.stderr
    (entry,) = json.loads(done.stdout)
    assert (entry["name"], entry["job"], entry["every"], entry["paused"]) == ("texts", "send_otp", 60, False)

    bad = {"texts": {"job": "no.such.job", "every": 60}}
    checked = shell("schedules", schedules=bad)
    assert (checked.returncode, checked.stdout) == (1, ""), checked.stderr
    assert "(django_jobqueue.E011) schedule 'texts': job 'no.such.job' is not registered" in checked.stderr
    unchecked = shell("--skip-checks", "schedules", schedules=bad)
    assert (unchecked.returncode, unchecked.stdout) == (1, ""), unchecked.stderr
    assert "CommandError: schedule 'texts': job 'no.such.job' is not registered" in unchecked.stderr

    wrong = shell("schedules", "--since", "1", schedules=SHELL_SCHEDULES)
    assert wrong.returncode == 2 and "unrecognized arguments: --since" in wrong.stderr
    assert not Schedule.objects.exists()
