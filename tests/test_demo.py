"""The README's first command, end to end: ``manage.py jobqueue_demo`` and its workers as real processes.

The demo makes its own SQLite file; these tests read it back with the
standard library's ``sqlite3`` and hold the printed summary to the tables.
Besides the OTP jobs it runs a periodic job, ``queue-summary``, fired by two
long-running workers while burst workers drain the ``otp`` queue.
"""

from __future__ import annotations

import json
import os
import re
import signal
import sqlite3
import subprocess
import sys
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from django.db import connection

from testproject.demo import provider
from tests.worker_support import wait_until

ROOT = Path(__file__).resolve().parent.parent
USERS = 30  # one full block of the provider's script, so every kind of failure occurs
SEED = 3
MAX_ATTEMPTS = 4  # send_otp's
SCHEDULE, SUMMARY_JOB, EVERY = "queue-summary", "demo.queue_summary", 2  # the demo's periodic job


pytestmark = pytest.mark.skipif(
    connection.vendor != "sqlite",
    reason="the demo always runs on its own SQLite file, whatever DATABASE_URL says, "
    "so the SQLite run already covers it",
)


def run_demo(*args: str) -> subprocess.CompletedProcess[str]:
    env = {key: value for key, value in os.environ.items() if key != "JOBQUEUE_DEMO_DATABASE"}
    return subprocess.run(
        [sys.executable, "manage.py", "jobqueue_demo", *args],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=180,
    )


@pytest.fixture(scope="module")
def demo(
    tmp_path_factory: pytest.TempPathFactory,
) -> tuple[subprocess.CompletedProcess[str], Path, dict[str, Any]]:
    """One run of the demo, shared by the tests that read its output and its database."""
    workdir = tmp_path_factory.mktemp("demo")
    db = workdir / "demo.sqlite3"
    summary_file = workdir / "summary.json"
    args = ["--users", str(USERS), "--seed", str(SEED), "--db", str(db), "--summary-json", str(summary_file)]
    result = run_demo(*args)
    assert result.returncode == 0, f"stdout:\n{result.stdout}\nstderr:\n{result.stderr}"
    return result, db, json.loads(summary_file.read_text())


def rows(db: Path, sql: str) -> list[tuple[Any, ...]]:
    with sqlite3.connect(db) as conn:
        found = conn.execute(sql).fetchall()
    conn.close()
    return found


def test_every_account_ends_with_its_code_or_a_dead_letter(demo):
    _, db, summary = demo
    accounts = {
        str(pk): (phone, sent_at)
        for pk, phone, sent_at in rows(db, "SELECT id, phone, otp_sent_at FROM demo_account")
    }
    dead = {
        json.loads(payload)["account_id"]: (attempts, error)
        for payload, attempts, error in rows(
            db, "SELECT payload, attempts, error FROM django_jobqueue_deadletter WHERE queue = 'otp'"
        )
    }
    sent = {pk for pk, (_, sent_at) in accounts.items() if sent_at is not None}

    assert len(accounts) == USERS
    assert sent.isdisjoint(dead)
    assert sent | set(dead) == set(accounts)
    live = "SELECT COUNT(*) FROM django_jobqueue_job WHERE queue = 'otp' AND status IN ('ready', 'running')"
    assert rows(db, live) == [(0,)]
    done = rows(db, "SELECT COUNT(*) FROM django_jobqueue_job WHERE queue = 'otp' AND status = 'done'")
    assert done == [(len(sent),)]

    assert summary["registered"] == USERS
    assert summary["sent"] == len(sent)
    assert len(summary["dead_letters"]) == len(dead)
    assert summary["jobs_left_live"] == 0
    assert summary["consistent"] is True
    assert summary["resend_new_jobs"] == 0


def test_each_number_meets_the_fate_the_provider_scripted(demo):
    _, db, summary = demo
    attempts_of_done = {
        json.loads(payload)["account_id"]: attempts
        for payload, attempts in rows(
            db, "SELECT payload, attempts FROM django_jobqueue_job WHERE queue = 'otp' AND status = 'done'"
        )
    }
    dead = {
        json.loads(payload)["account_id"]: (attempts, error)
        for payload, attempts, error in rows(
            db, "SELECT payload, attempts, error FROM django_jobqueue_deadletter"
        )
    }
    kinds = set()
    for pk, phone in rows(db, "SELECT id, phone FROM demo_account"):
        script = provider.script_for(phone, SEED)
        if script.not_on_whatsapp:
            kinds.add("not on WhatsApp")
            attempts, error = dead[str(pk)]
            assert attempts == 1, phone
            assert "number not on WhatsApp" in error
        elif script.outage:
            kinds.add("outage")
            attempts, error = dead[str(pk)]
            assert attempts == MAX_ATTEMPTS, phone
            assert "HTTP 503" in error
        else:
            kinds.add(f"{script.temporary_failures} failures")
            assert attempts_of_done[str(pk)] == script.temporary_failures + 1, phone
    assert kinds == {"not on WhatsApp", "outage", "0 failures", "1 failures", "2 failures", "3 failures"}
    assert summary["matches_script"] is True
    assert summary["retried"] == sum(1 for a in attempts_of_done.values() if a > 1) + sum(
        1 for a, _ in dead.values() if a > 1
    )


def test_the_crashed_sign_up_left_nothing_behind(demo):
    _, db, summary = demo
    phone = summary["rolled_back_phone"]
    assert rows(db, f"SELECT COUNT(*) FROM demo_account WHERE phone = '{phone}'") == [(0,)]
    account_ids = {str(pk) for (pk,) in rows(db, "SELECT id FROM demo_account")}
    payload_ids = {
        json.loads(p)["account_id"]
        for (p,) in rows(db, "SELECT payload FROM django_jobqueue_job WHERE name = 'send_otp'")
    }
    assert payload_ids <= account_ids


def test_the_printed_summary_reads_well_without_a_terminal(demo):
    result, db, summary = demo
    out = result.stdout
    assert "\x1b[" not in out, "no colours or cursor movement when stdout is not a terminal"
    for heading in ("Summary", "OTPs sent", "Dead-lettered", "Wall time", "What to look at next"):
        assert heading in out
    assert re.search(rf"OTPs sent\W+{summary['sent']}\b", out)
    assert "number not on WhatsApp" in out
    assert f"DATABASE_URL=sqlite:///{db}" in out  # whole, so that it can be copied
    assert summary["wall_seconds"] < 60
    assert (db.parent / "demo-logs" / "demo-worker-1.log").exists()


def stored_time(text: str) -> datetime:
    return datetime.fromisoformat(text).replace(tzinfo=UTC)


def test_the_periodic_job_fired_once_per_fire_time_from_two_workers(demo):
    result, db, summary = demo
    jobs = rows(
        db,
        f"SELECT id, run_at, queue, status, result FROM django_jobqueue_job WHERE name = '{SUMMARY_JOB}' "
        "ORDER BY run_at",
    )
    fire_times = [stored_time(run_at) for _, run_at, _, _, _ in jobs]
    assert len(jobs) >= 2, "the demo waits for two fire times at least"
    assert len(set(fire_times)) == len(jobs), "one job per fire time"
    assert all(moment.timestamp() % EVERY == 0 for moment in fire_times), "multiples of 2 s since the epoch"
    assert {(queue, status) for _, _, queue, status, _ in jobs} == {("summary", "done")}
    assert json.loads(jobs[-1][4])["done"] == summary["sent"], "the last summary saw every OTP sent"

    ((last_fire_at, paused),) = rows(
        db, f"SELECT last_fire_at, paused FROM django_jobqueue_schedule WHERE name = '{SCHEDULE}'"
    )
    assert (stored_time(last_fire_at), paused) == (fire_times[-1], 0)

    # Both long-running workers fired schedules; between them they logged each job once.
    logs = {path.stem: path.read_text() for path in (db.parent / "demo-logs").glob("demo-clock-*.log")}
    assert sorted(logs) == ["demo-clock-1", "demo-clock-2"]
    fired = [
        int(job_id)
        for log in logs.values()
        for job_id in re.findall(rf"schedule {SCHEDULE} fired for \S+: job (\d+)", log)
    ]
    assert sorted(fired) == [job_id for job_id, *_ in jobs]
    assert all("schedules=1" in log for log in logs.values())
    assert "schedules=off burst" in (db.parent / "demo-logs" / "demo-worker-1.log").read_text()

    schedule = summary["schedule"]
    assert (schedule["jobs"], schedule["fire_times"], schedule["once_per_fire_time"]) == (
        len(jobs),
        len(jobs),
        True,
    )
    assert re.search(rf"Periodic job fired\W+{len(jobs)}\b", result.stdout)
    assert f"{SCHEDULE}: {len(jobs)} fire times, {len(jobs)} jobs" in result.stdout


def test_it_never_deletes_a_database_it_did_not_make(tmp_path):
    db = tmp_path / "precious.sqlite3"
    with sqlite3.connect(db) as conn:
        conn.execute("CREATE TABLE precious (id INTEGER)")
    conn.close()

    result = run_demo("--users", "5", "--db", str(db))

    assert result.returncode != 0
    assert "was not made by this demo" in result.stderr
    assert rows(db, "SELECT name FROM sqlite_master") == [("precious",)]


def next_steps(out: str) -> list[str]:
    """The commands under "What to look at next", one a line, indented by four spaces."""
    return [
        line.strip() for line in out.split("What to look at next", 1)[1].splitlines() if line[:4] == "    "
    ]


def one(commands: list[str], part: str) -> str:
    (command,) = [command for command in commands if part in command]
    return command


def test_the_next_steps_work_when_pasted_alone_and_the_worker_waits_out_the_backoffs(tmp_path):
    db = tmp_path / "demo.sqlite3"
    result = run_demo("--users", "25", "--seed", str(SEED), "--db", str(db))
    assert result.returncode == 0, result.stderr
    commands = next_steps(result.stdout)
    # A fresh shell: nothing of the demo's environment.
    shell_env = {
        key: value
        for key, value in os.environ.items()
        if not key.startswith(("DATABASE_URL", "JOBQUEUE_", "DEMO_", "DJANGO_"))
    }

    def paste(command: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            ["bash", "-c", command], cwd=ROOT, env=shell_env, capture_output=True, text=True, timeout=60
        )

    (dead,) = rows(db, "SELECT COUNT(*) FROM django_jobqueue_deadletter")[0]
    assert dead == 2, "one number not on WhatsApp, one behind an outage, in 25"
    retried = paste(one(commands, "jobqueue retry-dead"))
    assert retried.returncode == 0, retried.stderr
    assert f"Retried {dead} dead letter(s)." in retried.stdout
    assert rows(db, "SELECT COUNT(*) FROM django_jobqueue_deadletter") == [(0,)]

    # Before a worker without the demo's schedule starts, and forgets it.
    schedules = paste(one(commands, "jobqueue schedules"))
    assert schedules.returncode == 0, schedules.stderr
    (line,) = [line for line in schedules.stdout.splitlines() if line.startswith(SCHEDULE)]
    assert "every 2 s" in line and " ago)" in line and line.split()[-1] == "no", schedules.stdout

    worker = subprocess.Popen(
        ["bash", "-c", one(commands, "manage.py runworker")],
        cwd=ROOT,
        env=shell_env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )
    try:
        live = "SELECT COUNT(*) FROM django_jobqueue_job WHERE status IN ('ready', 'running')"
        wait_until(lambda: rows(db, live) == [(0,)], timeout=60, message="the replayed jobs to finish")
    finally:
        os.killpg(worker.pid, signal.SIGINT)  # Ctrl-C
        output, _ = worker.communicate(timeout=30)
    assert worker.returncode == 0, output
    # The outage's job went through every attempt, its backoffs included, before it was dead again.
    attempts = sorted(a for (a,) in rows(db, "SELECT attempts FROM django_jobqueue_deadletter"))
    assert attempts == [1, MAX_ATTEMPTS], output
    assert output.count("outcome=retry") == MAX_ATTEMPTS - 1, output

    status = paste(one(commands, "jobqueue status"))
    assert status.returncode == 0, status.stderr
    # ready, scheduled, running, waiting: none; dead: 2.
    assert re.search(r"^otp\s+0\s+0\s+0\s+0\s+2\b", status.stdout, re.MULTILINE), status.stdout
