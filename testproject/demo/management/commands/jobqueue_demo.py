"""``manage.py jobqueue_demo``: the sign-up-and-OTP story, end to end, on a fresh SQLite file.

The demo always runs on its own database file (``var/demo.sqlite3`` unless
``--db`` says otherwise), whatever ``DATABASE_URL`` says: it starts itself
again with ``DATABASE_URL`` pointing at that file, short backoff settings and
its periodic job (``JOBQUEUE_SCHEDULES``), so that the worker processes it
starts inherit the same environment.
"""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import sys
import time
from argparse import ArgumentParser
from datetime import datetime
from pathlib import Path
from types import FrameType
from typing import Any, NoReturn

from django.conf import settings
from django.core.management import call_command, get_commands
from django.core.management.base import BaseCommand, CommandError
from django.db import connections
from django.utils import timezone
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn

from django_jobqueue.models import Job

from ... import provider
from ...fleet import WorkerFleet, log_tail
from ...jobs import queue_summary, send_otp
from ...models import Account
from ...report import ProgressDisplay, collect_outcome, collect_schedule, snapshot
from ...signup import SignupCrashed, register_user, resend_code
from ...summary import RunFacts, Timings, print_summary, shell_path, summary_data

QUEUE = "otp"
RESEND_TAPS = 3
# The periodic job: two long-running workers fire it while the burst workers
# drain the OTP queue, and the database lets each fire time through once.
SCHEDULE = "queue-summary"
EVERY = 2  # seconds
CLOCK_WORKERS = 2
MIN_FIRES = 2
SCHEDULES = {SCHEDULE: {"job": queue_summary.name, "every": EVERY}}
# Marks the SQLite files this command created, so that it never deletes another.
APPLICATION_ID = 0x4A514445
RUNNING_ON = "JOBQUEUE_DEMO_DATABASE"
# Retries within seconds instead of minutes; completed jobs kept so they can be counted.
DEMO_ENV = {
    "JOBQUEUE_BACKOFF_BASE": "0.25",
    "JOBQUEUE_BACKOFF_MAX": "2",
    "JOBQUEUE_KEEP_COMPLETED": "86400",
    "JOBQUEUE_LOG_LEVEL": "INFO",
    "JOBQUEUE_SCHEDULES": json.dumps(SCHEDULES),
    "PYTHONUNBUFFERED": "1",
}


class Command(BaseCommand):
    help = (
        "Register users whose OTP jobs go through a flaky fake provider, drain the queue with "
        "two runworker --burst processes while two long-running workers fire a periodic job, "
        "and summarise. Runs on its own SQLite file."
    )

    def add_arguments(self, parser: ArgumentParser) -> None:
        parser.add_argument("--users", type=int, default=200, help="users to register, 1-999 (default 200)")
        parser.add_argument("--workers", type=int, default=2, help="worker processes at a time (default 2)")
        parser.add_argument("--concurrency", type=int, default=4, help="threads per worker (default 4)")
        parser.add_argument(
            "--seed", type=int, default=provider.DEFAULT_SEED, help="scripts the provider's failures"
        )
        parser.add_argument(
            "--db", help="the demo's SQLite file, recreated each run (default var/demo.sqlite3)"
        )
        parser.add_argument("--timeout", type=float, default=120.0, help="give up after this many seconds")
        parser.add_argument("--summary-json", help="also write the summary to this file as JSON")

    def handle(self, *args: Any, **options: Any) -> None:
        users, workers, concurrency = options["users"], options["workers"], options["concurrency"]
        if not 1 <= users < provider.NUMBERS:
            raise CommandError(f"--users must be between 1 and {provider.NUMBERS - 1}")
        if workers < 1 or concurrency < 1:
            raise CommandError("--workers and --concurrency must be at least 1")
        if "runworker" not in get_commands():
            raise CommandError("manage.py runworker is not available; the demo needs it to run its workers")
        db_path = (
            Path(options["db"] or Path(settings.BASE_DIR) / "var" / "demo.sqlite3").expanduser().resolve()
        )
        restarted = os.environ.get(RUNNING_ON) == str(db_path)
        if not (restarted and _is_default_database(db_path)):
            if restarted:
                raise CommandError(
                    f"could not make {db_path} the default database: the settings must read DATABASE_URL"
                )
            _restart_on(db_path, options)

        console = Console(
            highlight=False,
            no_color=options["no_color"],
            force_terminal=True if options["force_color"] else None,
        )
        started = time.monotonic()
        _intro(console, users, workers, concurrency)

        migrate_started = time.monotonic()
        _fresh_database(db_path)
        migrate_time = time.monotonic() - migrate_started
        _done(console, f"Fresh database [bold]{shell_path(db_path)}[/] (migrated in {migrate_time:.1f} s)")

        signup_started = time.monotonic()
        crash_phone = provider.phone_number(users)
        original_jobs, crashed_job_id = _register(
            console, users, crash_at=users // 2, crash_phone=crash_phone
        )
        signup_time = time.monotonic() - signup_started
        _done(
            console,
            f"{users} sign-up{_s(users)} in {signup_time:.1f} s: "
            "account + send_otp job, one transaction each",
        )
        _done(
            console,
            f"Sign-up of {crash_phone} crashed after queueing job #{crashed_job_id}: both rolled back",
        )
        taps = list(Account.objects.order_by("pk")[:RESEND_TAPS])
        new_jobs = sum(1 for account in taps if resend_code(account).pk != original_jobs[account.pk])
        _done(
            console,
            f'{len(taps)} tap{_s(len(taps))} on "resend code" while the first was queued: '
            f"{new_jobs} new jobs (unique_key)",
        )

        log_dir = db_path.parent / "demo-logs"
        log_dir.mkdir(exist_ok=True)
        for old in log_dir.glob("demo-*.log"):
            old.unlink()
        fleet = WorkerFleet(
            manage_py=Path(settings.BASE_DIR) / "manage.py",
            queue=QUEUE,
            size=workers,
            concurrency=concurrency,
            env=os.environ,
            log_dir=log_dir,
        )
        clock = WorkerFleet(
            manage_py=Path(settings.BASE_DIR) / "manage.py",
            queue=queue_summary.spec.queue or "default",
            size=CLOCK_WORKERS,
            concurrency=1,
            env=os.environ,
            log_dir=log_dir,
            burst=False,
            name="demo-clock",
        )
        console.print(
            f"\nDraining with {workers} × [bold]runworker --burst --queue {QUEUE} "
            f"--concurrency {concurrency}[/]"
            "\n[dim](a burst exits when nothing is due; another starts when a retry comes due)[/]"
            f"\nMeanwhile {CLOCK_WORKERS} × [bold]runworker --queue {clock.queue}[/] fire the periodic job "
            f"[bold]{SCHEDULE}[/] every {EVERY} s"
            "\n[dim](every long-running worker fires it; the database lets each fire time through once)[/]\n"
        )
        drain_started = time.monotonic()
        # SIGTERM as well as Ctrl-C stops the workers before the demo exits.
        previous = signal.signal(signal.SIGTERM, _interrupt)
        try:
            for _ in range(CLOCK_WORKERS):
                clock.start()
            _drain(console, fleet, total=users, timeout=options["timeout"])
            drain_time = time.monotonic() - drain_started
            _wait_for_fires(clock, drained_at=timezone.now(), timeout=options["timeout"])
        except KeyboardInterrupt:
            raise CommandError("interrupted: the workers were sent SIGTERM and have exited") from None
        finally:
            clock.stop()
            signal.signal(signal.SIGTERM, previous)
        _run_last_summaries(clock, timeout=options["timeout"])
        schedule = collect_schedule(SCHEDULE, queue_summary.name, EVERY, clock)

        outcome = collect_outcome(QUEUE, options["seed"], _max_attempts())
        facts = RunFacts(
            rolled_back_phone=crash_phone,
            rolled_back_job_id=crashed_job_id,
            resend_taps=len(taps),
            resend_new_jobs=new_jobs,
            workers=workers,
            concurrency=concurrency,
            bursts=fleet.started,
            seed=options["seed"],
            db_path=db_path,
            log_dir=log_dir,
            timings=Timings(migrate_time, signup_time, drain_time, time.monotonic() - started),
        )
        print_summary(console, outcome, facts, schedule)
        if options["summary_json"]:
            Path(options["summary_json"]).write_text(
                json.dumps(summary_data(outcome, facts, schedule), indent=2) + "\n"
            )
        if not outcome.consistent:
            raise CommandError("the tables do not add up; see the summary above")
        if not schedule.once_per_fire_time:
            raise CommandError(f"{SCHEDULE} did not make one job per fire time; see the summary above")


def _restart_on(db_path: Path, options: dict[str, Any]) -> NoReturn:
    """Run this command again in a fresh interpreter whose default database is ``db_path``."""
    argv = [sys.executable, str(Path(settings.BASE_DIR) / "manage.py"), "jobqueue_demo"]
    for option in ("users", "workers", "concurrency", "seed", "timeout", "summary_json"):
        if options[option] is not None:
            argv += [f"--{option.replace('_', '-')}", str(options[option])]
    argv += ["--db", str(db_path)]
    argv += [flag for flag in ("--no-color", "--force-color") if options[flag[2:].replace("-", "_")]]
    env = {
        **os.environ,
        **DEMO_ENV,
        "DATABASE_URL": f"sqlite:///{db_path}",
        RUNNING_ON: str(db_path),
        provider.SEED_ENV: str(options["seed"]),
    }
    sys.stdout.flush()
    sys.stderr.flush()
    os.execve(sys.executable, argv, env)


def _is_default_database(db_path: Path) -> bool:
    default = settings.DATABASES["default"]
    return default["ENGINE"] == "django.db.backends.sqlite3" and Path(default["NAME"]).resolve() == db_path


def _fresh_database(db_path: Path) -> None:
    """Delete the demo's previous file (only one it created) and migrate a new one."""
    connections.close_all()
    if db_path.exists() and db_path.stat().st_size > 0:
        with sqlite3.connect(db_path) as old:
            (application_id,) = old.execute("PRAGMA application_id").fetchone()
            (tables,) = old.execute("SELECT COUNT(*) FROM sqlite_master").fetchone()
        old.close()
        # Django 6's system checks open the database before this runs, which leaves
        # an empty file (a WAL header, no tables): nothing in it to lose.
        if application_id != APPLICATION_ID and tables:
            raise CommandError(f"{db_path} exists and was not made by this demo; choose another --db")
    db_path.parent.mkdir(parents=True, exist_ok=True)
    for suffix in ("", "-wal", "-shm", "-journal"):
        Path(f"{db_path}{suffix}").unlink(missing_ok=True)
    new = sqlite3.connect(db_path)
    new.execute(f"PRAGMA application_id = {APPLICATION_ID}")
    new.commit()
    new.close()
    call_command("migrate", interactive=False, verbosity=0)


def _register(console: Console, users: int, *, crash_at: int, crash_phone: str) -> tuple[dict[int, int], int]:
    """Register ``users`` users, and crash one extra sign-up halfway; return job ids by account."""
    jobs: dict[int, int] = {}
    crashed_job_id = 0
    progress = Progress(
        TextColumn("  Signing up"),
        BarColumn(),
        MofNCompleteColumn(),
        console=console,
        transient=True,
        disable=not console.is_terminal,
    )
    with progress:
        task = progress.add_task("sign-ups", total=users)
        for index in range(users):
            if index == crash_at:
                crashed_job_id = _crash_one_signup(crash_phone)
            account, otp_job = register_user(provider.phone_number(index))
            jobs[account.pk] = otp_job.pk
            progress.advance(task)
    return jobs, crashed_job_id


def _crash_one_signup(phone: str) -> int:
    """Crash a sign-up after its job was queued; check that the rollback left nothing; return the job id."""
    jobs_before = Job.objects.count()
    try:
        register_user(phone, crash_after_enqueue=True)
    except SignupCrashed as crash:
        job_id = crash.otp_job.pk
    else:
        raise CommandError("the sign-up meant to crash did not")
    # Checked at once: SQLite may hand the same ids to the next sign-up.
    if Account.objects.filter(phone=phone).exists() or Job.objects.filter(pk=job_id).exists():
        raise CommandError(f"the crashed sign-up of {phone} left rows behind")
    if Job.objects.count() != jobs_before:
        raise CommandError(f"the crashed sign-up of {phone} changed the number of jobs")
    return job_id


def _drain(console: Console, fleet: WorkerFleet, *, total: int, timeout: float) -> None:
    """Keep burst workers running until no job is left ready or running."""
    deadline = time.monotonic() + timeout
    with ProgressDisplay(console, total, fleet) as display:
        try:
            while True:
                for worker, code in fleet.reap():
                    if code != 0:
                        raise CommandError(
                            f"{worker.worker_id} exited with status {code}; the end of its log:\n"
                            + log_tail(worker.log_path)
                        )
                snap = snapshot(QUEUE)
                if snap.live == 0 and not fleet.alive:
                    display.update(snap, final=True)
                    return
                fleet.top_up(snap.due)
                fleet.read_logs()
                display.update(snap)
                if time.monotonic() > deadline:
                    raise CommandError(f"the queue was not drained after {timeout:g} s")
                time.sleep(0.1)
        finally:
            fleet.stop()


def _wait_for_fires(clock: WorkerFleet, *, drained_at: datetime, timeout: float) -> None:
    """Wait until the periodic job has fired ``MIN_FIRES`` times, once after the drain, and each job ran.

    The summary of a fire time after ``drained_at`` sees every OTP job's end.

    Return early in the fire interval, so that the workers usually stop before
    the next fire time; a job of one that comes anyway is run by
    ``_run_last_summaries``.
    """
    deadline = time.monotonic() + timeout
    while True:
        for worker, code in clock.reap():
            raise CommandError(
                f"{worker.worker_id} exited with status {code}; the end of its log:\n"
                + log_tail(worker.log_path)
            )
        jobs = list(Job.objects.filter(name=queue_summary.name).values_list("status", "run_at"))
        settled = (
            len(jobs) >= MIN_FIRES
            and all(status == "done" for status, _ in jobs)
            and any(run_at > drained_at for _, run_at in jobs)
        )
        if settled and EVERY - time.time() % EVERY > EVERY / 3:
            return
        if time.monotonic() > deadline:
            raise CommandError(f"{SCHEDULE} had not fired {MIN_FIRES} times after {timeout:g} s")
        time.sleep(0.05)


def _run_last_summaries(clock: WorkerFleet, *, timeout: float) -> None:
    """Run the periodic jobs fired just before the workers stopped, with one burst worker.

    On a slow machine a fire time can come between the last look and the
    workers' stop: its job is in the table, due, and a burst (which fires
    nothing itself) runs it.
    """
    if not Job.objects.filter(name=queue_summary.name).exclude(status="done").exists():
        return
    finisher = WorkerFleet(
        manage_py=clock.manage_py,
        queue=clock.queue,
        size=1,
        concurrency=1,
        env=clock.env,
        log_dir=clock.log_dir,
        name="demo-last-summary",
    )
    worker = finisher.start()
    try:
        code = worker.process.wait(timeout=timeout)
    finally:
        finisher.stop()
    if code != 0:
        raise CommandError(f"{worker.worker_id} exited with status {code}:\n" + log_tail(worker.log_path))


def _interrupt(signum: int, frame: FrameType | None) -> None:
    raise KeyboardInterrupt


def _max_attempts() -> int:
    return send_otp.spec.max_attempts or 1


def _intro(console: Console, users: int, workers: int, concurrency: int) -> None:
    console.print()
    console.rule("[bold]django-jobqueue[/] · sign-ups that text a one-time password", align="left")
    console.print(
        f"{users} people sign up. Each sign-up saves an account and queues a [bold]send_otp[/] job in the "
        f"same transaction. {workers} worker processes ({concurrency} threads each) send the codes "
        "through a fake WhatsApp provider that is slow, sometimes down for a while, and sometimes "
        "refuses a number for good. The queue retries what may still work and dead-letters the rest.\n"
    )


def _s(count: int) -> str:
    return "" if count == 1 else "s"


def _done(console: Console, message: str) -> None:
    console.print(f"[green]✓[/] {message}")
