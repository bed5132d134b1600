"""``manage.py jobqueue``: status (table and JSON), pause and resume, retry-dead, prune and tick."""

from __future__ import annotations

import json
from datetime import timedelta
from io import StringIO
from typing import Any

import pytest
from django.core.management import CommandError, call_command
from django.test import override_settings
from django.utils import timezone

from django_jobqueue import QueueClient
from django_jobqueue.management.commands.jobqueue import Command
from django_jobqueue.models import DeadLetter, Job
from tests.worker_support import database_url, run_manage


def run(*args: str) -> str:
    out = StringIO()
    call_command("jobqueue", *args, stdout=out)
    return out.getvalue()


def make_dead(client: QueueClient, /, name: str = "tests.send_otp", **options: Any) -> DeadLetter:
    job = client.push(name, {"user_id": "42"}, **options)
    Job.objects.filter(pk=job.pk).update(status="running", locked_by="w", attempts=1)
    assert client.fail(job.pk, worker_id="w", error="number not on WhatsApp")
    return DeadLetter.objects.get(job_id=job.pk)


@pytest.fixture
def busy(queue: QueueClient) -> None:
    """Two queues with work in each state, and a worker."""
    queue.push("tests.send_otp", {}, queue="emails")
    queue.push("tests.send_otp", {}, queue="emails", delay=600)
    queue.push("tests.build_report", {}, queue="reports")
    done = queue.push("tests.send_otp", {}, queue="emails", priority=10)
    claimed = queue.pull("emails", worker_id="w")
    assert claimed is not None and claimed.pk == done.pk
    queue.ack(claimed, worker_id="w")
    queue.pull("reports", worker_id="w")
    make_dead(queue, queue="emails")
    Job.objects.filter(status="ready", queue="emails", run_at__lte=timezone.now()).update(
        run_at=timezone.now() - timedelta(minutes=12)
    )
    queue.register_worker("web-1:77", hostname="web-1", pid=77, queues=["emails"], concurrency=4)


def test_status_prints_a_table(busy):
    lines = run("status").splitlines()
    header = "queue ready scheduled running waiting dead oldest ready done (1 h) paused limits"
    assert lines[0].split() == header.split()
    rows = {line.split()[0]: line.split() for line in lines[1:4]}
    assert rows["emails"][:6] == ["emails", "1", "1", "0", "0", "1"]
    assert rows["emails"][6:] == ["12", "min", "1", "—", "—"]
    assert rows["reports"] == ["reports", "0", "0", "1", "0", "0", "—", "0", "—", "—"]
    assert rows["total"] == ["total", "1", "1", "1", "0", "1", "12", "min", "1"]
    assert "1 worker(s):" in lines
    assert lines[lines.index("1 worker(s):") + 1].split()[-1] == "listen"
    [worker] = [line.split() for line in lines if line.split()[:1] == ["web-1:77"]]
    assert worker[:3] == ["web-1:77", "web-1", "77"]
    assert worker[-1] == "unknown", "a row that says nothing of its LISTEN (an older worker's)"


@pytest.mark.parametrize("state", ["live", "deaf", "off", "checking"])
def test_status_shows_whether_each_workers_listen_hears(queue, state):
    queue.register_worker("web-2:9", hostname="web-2", pid=9, queues=[], concurrency=1, listen="checking")
    queue.record_listen("web-2:9", state)
    [line] = [line for line in run("status").splitlines() if "web-2:9" in line]
    assert line.split()[-1] == state
    assert json.loads(run("status", "--json"))["workers"][0]["listen"] == state


def test_status_json_for_scripts(busy):
    status = json.loads(run("status", "--json"))
    emails = next(q for q in status["queues"] if q["queue"] == "emails")
    assert {k: emails[k] for k in ("ready", "scheduled", "running", "dead", "done_last_hour")} == {
        "ready": 1,
        "scheduled": 1,
        "running": 0,
        "dead": 1,
        "done_last_hour": 1,
    }
    assert 700 < emails["oldest_ready_age"] < 800
    assert status["total"]["running"] == 1
    assert status["workers"][0]["worker_id"] == "web-1:77" and status["workers"][0]["late"] is False
    assert status["database_time"]


LIMITS = {"emails": {"concurrency": 10, "rate_limit": "100/m"}, "webhooks": {"rate_limit": "5/s"}}


def test_status_shows_pauses_and_limits_even_of_queues_without_jobs(busy, queue):
    queue.pause_queue("emails")
    queue.pause_queue("idle")
    with override_settings(JOBQUEUE={"QUEUES": LIMITS}):
        lines = run("status").splitlines()
    rows = {line.split()[0]: line.split() for line in lines[1:6]}
    assert rows["emails"][9:] == ["paused", "10", "at", "once,", "100/m"]
    assert rows["idle"] == ["idle", "0", "0", "0", "0", "0", "—", "0", "paused", "—"]
    assert rows["webhooks"] == ["webhooks", "0", "0", "0", "0", "0", "—", "0", "—", "5/s"]
    assert rows["reports"][8:] == ["—", "—"]
    assert rows["total"] == ["total", "1", "1", "1", "0", "1", "12", "min", "1"]


def test_status_json_gains_each_queues_pause_and_limits(busy, queue):
    queue.pause_queue("emails")
    queue.pause_queue("idle")
    with override_settings(JOBQUEUE={"QUEUES": LIMITS}):
        status = json.loads(run("status", "--json"))
    by_name = {q["queue"]: q for q in status["queues"]}
    assert list(by_name) == ["emails", "idle", "reports", "webhooks"]
    assert (by_name["emails"]["paused"], by_name["emails"]["limits"]) == (
        True,
        {"concurrency": 10, "rate_limit": "100/m"},
    )
    assert by_name["idle"] == {
        "queue": "idle",
        "ready": 0,
        "scheduled": 0,
        "running": 0,
        "dead": 0,
        "waiting": 0,
        "done_last_hour": 0,
        "oldest_ready_age": None,
        "paused": True,
        "limits": {"concurrency": None, "rate_limit": None},
    }
    assert by_name["webhooks"]["limits"] == {"concurrency": None, "rate_limit": "5/s"}
    assert not by_name["reports"]["paused"]
    assert set(status["total"]) == {
        "ready",
        "scheduled",
        "running",
        "dead",
        "waiting",
        "done_last_hour",
        "oldest_ready_age",
    }


def test_status_past_skipped_checks_leaves_out_bad_limits_and_says_so(busy):
    err = StringIO()
    with override_settings(JOBQUEUE={"QUEUES": {"emails": {"concurrency": 0}}}):
        call_command("jobqueue", "status", "--json", stdout=StringIO(), stderr=err, skip_checks=True)
    assert err.getvalue().startswith("The limits are not shown: JOBQUEUE['QUEUES']['emails']['concurrency']")


def test_pause_and_resume_say_what_happened(queue):
    assert run("pause", "emails") == "Paused queue 'emails': no worker claims from it until it is resumed.\n"
    assert run("pause", "emails") == "Queue 'emails' was already paused.\n"
    assert queue.paused_queues() == ["emails"]
    assert run("resume", "emails") == "Resumed queue 'emails': workers claim from it again.\n"
    assert run("resume", "emails") == "Queue 'emails' was not paused.\n"
    assert run("resume", "never-paused") == "Queue 'never-paused' was not paused.\n"
    assert queue.paused_queues() == []


@pytest.mark.parametrize(
    "args", [("pause",), ("pause", "no spaces"), ("resume", "x" * 64), ("pause", "a", "b")]
)
def test_pause_and_resume_refuse_a_bad_queue_name(queue, args):
    with pytest.raises(CommandError):
        run(*args)
    assert queue.paused_queues() == []


def test_status_of_an_empty_queue(queue):
    out = run("status")
    assert out.splitlines()[1].split()[0] == "total" and "No worker is running." in out
    assert json.loads(run("status", "--json"))["queues"] == []


def test_retry_dead_by_id(queue):
    first, second = make_dead(queue), make_dead(queue, queue="sms")
    out = run("retry-dead", str(first.pk), str(second.pk))
    assert "Retried 2 dead letter(s)." in out
    assert f"dead letter #{first.pk} -> job #" in out
    assert not DeadLetter.objects.exists()
    assert sorted(Job.objects.values_list("queue", "attempts")) == [("default", 0), ("sms", 0)]


def test_retry_dead_all_narrowed_by_queue_and_name(queue):
    for _ in range(3):
        make_dead(queue, queue="emails")
    make_dead(queue, "tests.build_report", queue="emails")
    kept = make_dead(queue, queue="sms")
    assert "Retried 3 dead letter(s)." in run(
        "retry-dead", "--all", "--queue", "emails", "--name", "tests.send_otp"
    )
    assert "Retried 1 dead letter(s)." in run("retry-dead", "--all", "--queue", "emails")
    assert list(DeadLetter.objects.all()) == [kept]
    out = run("retry-dead", "--all", "-v", "2")
    assert f"dead letter #{kept.pk} -> job #" in out and "Retried 1 dead letter(s)." in out
    assert run("retry-dead", "--all") == "Retried 0 dead letter(s).\n"


def test_retry_dead_reports_ids_it_did_not_retry(queue):
    letter = make_dead(queue, queue="emails")
    with pytest.raises(CommandError, match=r"Not retried .*: #999999"):
        run("retry-dead", str(letter.pk), "999999")
    assert Job.objects.count() == 1, "the ids found were retried"
    other = make_dead(queue, queue="emails")
    with pytest.raises(CommandError, match=f"#{other.pk}"):
        run("retry-dead", str(other.pk), "--queue", "sms")
    assert DeadLetter.objects.filter(pk=other.pk).exists()


@pytest.mark.parametrize(
    "args",
    [
        ("retry-dead",),
        ("retry-dead", "1", "--all"),
        ("retry-dead", "abc"),
        ("retry-dead", "0"),
        ("retry-dead", "--all", "--queue", "no spaces"),
        ("status", "--bogus"),
        ("unknown",),
        (),
    ],
)
def test_bad_arguments_are_refused(queue, args):
    make_dead(queue)
    with pytest.raises(CommandError):
        run(*args)
    assert DeadLetter.objects.count() == 1


def test_prune_deletes_finished_jobs_older_than_kept(queue):
    old = queue.push("a", {})
    queue.push("b", {})
    for _ in range(2):
        claimed = queue.pull(worker_id="w")
        queue.ack(claimed, worker_id="w")
    Job.objects.filter(pk=old.pk).update(finished_at=timezone.now() - timedelta(days=2))
    assert "Pruned 1 finished job(s)." in run("prune")
    assert "Pruned 1 finished job(s)." in run("prune", "--older-than", "0")
    assert not Job.objects.exists()
    with pytest.raises(CommandError):
        run("prune", "--older-than", "-5")


def test_tick_hands_expired_claims_back(queue):
    queue.push("a", {})
    queue.pull(worker_id="w")
    Job.objects.update(locked_until=timezone.now() - timedelta(seconds=5))
    assert "Handled 1 expired claim(s)." in run("tick")
    assert Job.objects.get().status == "ready"
    assert "Handled 0 expired claim(s)." in run("tick")


def shell_env() -> dict[str, str]:
    return {
        "DJANGO_SETTINGS_MODULE": "testproject.settings",
        "PATH": "/usr/bin:/bin",
        "DATABASE_URL": database_url(),
    }


def test_the_command_runs_from_a_shell(queue, busy):
    """As a health check would run it: a process, its exit code and its JSON."""
    env = shell_env()
    done = run_manage("jobqueue", "status", "--json", env=env)
    assert done.returncode == 0, done.stderr
    assert {q["queue"] for q in json.loads(done.stdout)["queues"]} == {"emails", "reports"}
    bad = run_manage("jobqueue", "retry-dead", env=env)
    assert bad.returncode == 2 and "--all" in bad.stderr


@pytest.mark.parametrize(
    ("args", "status", "message"),
    [
        (("retry-dead",), 2, "retry-dead: error: give dead letter ids, or --all (narrowed by"),
        (("retry-dead", "1", "--all"), 2, "retry-dead: error: give dead letter ids or --all, not both"),
        (("retry-dead", "abc"), 2, "argument ID: 'abc' is not a dead letter id"),
        (("prune", "--older-than", "-5"), 2, "argument --older-than: '-5' is not a number of seconds"),
        (("unknown",), 2, "invalid choice: 'unknown'"),
        (("retry-dead", "999999"), 1, "Not retried (gone, or not matching --queue / --name): #999999"),
    ],
)
def test_exit_status_2_for_bad_arguments_and_1_for_a_failure(queue, args, status, message):
    """As docs/commands.md says: argparse's 2 for a bad argument, 1 when the work fails."""
    make_dead(queue)
    done = run_manage("jobqueue", *args, env=shell_env())
    assert (done.returncode, done.stdout if status == 2 else "") == (status, ""), done.stderr
    assert message in done.stderr
    assert DeadLetter.objects.count() == 1, "nothing was retried"


def test_retry_dead_without_ids_or_all_says_which_is_missing(queue):
    with pytest.raises(CommandError) as refused:
        run("retry-dead", "--queue", "sms")
    assert str(refused.value) == "Error: give dead letter ids, or --all (narrowed by --queue and --name)"


def subcommand_parsers() -> dict[str, Any]:
    parser = Command().create_parser("manage.py", "jobqueue")
    (subcommands,) = [action for action in parser._actions if action.dest == "subcommand"]
    return dict(subcommands.choices)


def test_each_subcommand_describes_itself_and_its_own_verbosity():
    parsers = subcommand_parsers()
    assert set(parsers) == {"status", "schedules", "pause", "resume", "retry-dead", "prune", "tick"}
    for name, sub in parsers.items():
        assert sub.description and len(sub.description) > 60, name
        (verbosity,) = [action for action in sub._actions if action.dest == "sub_verbosity"]
        if name == "retry-dead":
            assert "one line per dead letter" in verbosity.help
        else:
            assert "dead letter" not in verbosity.help and "same at every level" in verbosity.help, name
