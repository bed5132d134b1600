"""The demo's closing screen: what happened, what failed and why, and where to look next."""

from __future__ import annotations

import json
import shlex
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rich import box
from rich.console import Console, Group
from rich.markup import escape
from rich.table import Table
from rich.text import Text

from . import provider
from .report import Outcome, ScheduleRun

MAX_NUMBERS = 3


@dataclass(frozen=True)
class Timings:
    migrate: float
    signup: float
    drain: float
    total: float


@dataclass(frozen=True)
class RunFacts:
    """What the command did, as opposed to what the tables say happened."""

    rolled_back_phone: str
    rolled_back_job_id: int
    resend_taps: int
    resend_new_jobs: int
    workers: int
    concurrency: int
    bursts: int
    seed: int
    db_path: Path
    log_dir: Path
    timings: Timings


def summary_data(outcome: Outcome, facts: RunFacts, schedule: ScheduleRun) -> dict[str, Any]:
    """The summary as JSON-ready data, for ``--summary-json``."""
    return {
        **outcome.as_dict(),
        "schedule": schedule.as_dict(),
        "rolled_back_phone": facts.rolled_back_phone,
        "rolled_back_job_id": facts.rolled_back_job_id,
        "resend_taps": facts.resend_taps,
        "resend_new_jobs": facts.resend_new_jobs,
        "bursts": facts.bursts,
        "seed": facts.seed,
        "wall_seconds": round(facts.timings.total, 2),
        "database": str(facts.db_path),
    }


def print_summary(console: Console, outcome: Outcome, facts: RunFacts, schedule: ScheduleRun) -> None:
    console.print()
    console.print(_totals(outcome, facts, schedule))
    if outcome.dead_letters:
        console.print(_dead_letters(outcome))
    console.print(_checks(outcome, facts, schedule))
    _next_steps(console, facts, schedule)


def _totals(outcome: Outcome, facts: RunFacts, schedule: ScheduleRun) -> Table:
    table = Table(
        title="Summary", title_justify="left", title_style="bold", box=box.ROUNDED, show_header=False
    )
    table.add_column(style="bold", no_wrap=True)
    table.add_column(justify="right", no_wrap=True)
    table.add_column(style="dim")
    t = facts.timings
    rows = [
        ("Users registered", outcome.registered, "account + send_otp job, one transaction each"),
        ("Sign-ups rolled back", 1, "crashed after queueing: no account, no job"),
        ('"Resend code" taps', facts.resend_taps, f"{facts.resend_new_jobs} new jobs: unique_key held"),
        (
            "OTPs sent",
            outcome.sent,
            f"{outcome.sent_first_try} at once, {outcome.sent_after_retries} after retries",
        ),
        ("Retried", outcome.retried, f"jobs run more than once; {outcome.attempts} attempts in all"),
        ("Dead-lettered", len(outcome.dead_letters), "given up: see below" if outcome.dead_letters else ""),
        (
            "Worker processes",
            facts.bursts,
            f"--burst runs, {facts.workers} at a time, {facts.concurrency} threads",
        ),
        (
            "Periodic job fired",
            schedule.jobs,
            f"{schedule.name}, every {schedule.every} s, by {schedule.workers} long-running workers"
            + (f"; the last counted {_counted(schedule.last_result)}" if schedule.last_result else ""),
        ),
        (
            "Wall time",
            f"{t.total:.1f} s",
            f"migrate {t.migrate:.1f} · sign-ups {t.signup:.1f} · drain {t.drain:.1f}",
        ),
    ]
    for label, value, note in rows:
        table.add_row(label, str(value), note)
    return table


def _dead_letters(outcome: Outcome) -> Table:
    table = Table(
        title="Dead letters: kept with payload, error and traceback, ready to replay",
        title_justify="left",
        title_style="bold",
        box=box.SIMPLE_HEAD,
    )
    table.add_column("jobs", justify="right")
    table.add_column("attempts", justify="right")
    table.add_column("error", style="red")
    table.add_column("numbers", style="dim", no_wrap=True)
    for error, deads in outcome.dead_letters_by_error():
        fewest, most = min(d.attempts for d in deads), max(d.attempts for d in deads)
        numbers = "\n".join(dead.phone for dead in deads[:MAX_NUMBERS])
        if len(deads) > MAX_NUMBERS:
            numbers += f"\nand {len(deads) - MAX_NUMBERS} more"
        table.add_row(
            str(len(deads)),
            str(fewest) if fewest == most else f"{fewest}–{most}",
            escape(error),
            numbers,
        )
    return table


def _counted(result: dict[str, int]) -> str:
    return f"{result.get('done', 0)} sent, {result.get('dead', 0)} dead"


def _checks(outcome: Outcome, facts: RunFacts, schedule: ScheduleRun) -> Group:
    lines = []
    if outcome.consistent:
        lines.append(
            Text.assemble(
                ("✓ ", "bold green"),
                f"Every account has its code or a dead letter ({outcome.sent} + {len(outcome.dead_letters)}"
                f" = {outcome.registered}); no job is left ready or running.",
            )
        )
    else:
        lines.append(
            Text.assemble(
                ("✗ ", "bold red"),
                f"Inconsistent: {outcome.jobs_left_live} jobs still live, "
                f"{len(outcome.accounts_without_outcome)} accounts with neither a code nor a dead letter, "
                f"{len(outcome.accounts_with_both)} with both.",
            )
        )
    mark, style = ("✓ ", "bold green") if outcome.matches_script else ("✗ ", "bold red")
    lines.append(
        Text.assemble(
            (mark, style),
            f"The provider's script for seed {facts.seed} predicted {outcome.expected_sent} sent and "
            f"{outcome.expected_dead} dead letters; the tables say {outcome.sent} and "
            f"{len(outcome.dead_letters)}.",
        )
    )
    fired = ", ".join(f"{worker} {count}" for worker, count in sorted(schedule.fired_by.items()))
    mark, style = ("✓ ", "bold green") if schedule.once_per_fire_time else ("✗ ", "bold red")
    lines.append(
        Text.assemble(
            (mark, style),
            f"{schedule.name}: {schedule.fire_times} fire times, {schedule.jobs} jobs; each of the "
            f"{schedule.workers} workers tried every fire time, and each went through once ({fired}).",
        )
    )
    return Group(Text(), *lines, Text())


def _next_steps(console: Console, facts: RunFacts, schedule: ScheduleRun) -> None:
    """Print commands whole, never wrapped or cut, so that they can be copied."""
    python = shlex.quote(shell_path(Path(sys.executable)))
    manage = f"{_demo_env(facts)} {python} manage.py"
    # The example project declares no schedule unless told: the demo's is in its environment.
    declared = {schedule.name: {"job": schedule.job, "every": schedule.every}}
    with_schedule = f"JOBQUEUE_SCHEDULES={shlex.quote(json.dumps(declared))} {manage}"
    steps = [
        (
            "Browse the jobs and dead letters in the admin (http://127.0.0.1:8000/admin/):",
            [f"{manage} createsuperuser", f"{manage} runserver"],
        ),
        (
            "Replay the dead letters, then run a worker until each is done or dead again, and stop it "
            "with Ctrl-C (runworker --burst would exit while retries wait out their backoff):",
            [f"{manage} jobqueue retry-dead --all --queue otp", f"{manage} runworker --queue otp"],
        ),
        ("See what is ready, waiting for a retry, running or dead:", [f"{manage} jobqueue status"]),
        (
            f"See when {schedule.name} fired last and fires next (docs/schedules.md):",
            [f"{with_schedule} jobqueue schedules"],
        ),
        ("Read the workers' logs:", [f"less {shlex.quote(shell_path(facts.log_dir / 'demo-worker-1.log'))}"]),
        # The demo makes its own database and sets its own seed: no variables needed.
        ("Tell the story again, differently:", [f"{python} manage.py jobqueue_demo --users 500 --seed 42"]),
        ("Run workers in production: docs/workers.md (systemd, Kubernetes, threads, deploys)", []),
        ("Why send_otp checks otp_sent_at first: docs/idempotency.md", []),
    ]
    console.rule("[bold]What to look at next[/]", align="left", style="cyan")
    for title, commands in steps:
        console.print(f"[cyan]›[/] {title}", soft_wrap=True)
        for command in commands:
            console.print(f"    [bold]{escape(command)}[/]", soft_wrap=True)
    console.print()


def _demo_env(facts: RunFacts) -> str:
    """The variables that put a command on the demo's database, so that each works when pasted alone.

    Without ``DATABASE_URL`` it would open the example project's default file;
    without the seed, the provider would follow another script than the demo's.
    """
    env = "DATABASE_URL=" + shlex.quote(f"sqlite:///{facts.db_path}")
    if facts.seed != provider.DEFAULT_SEED:
        env += f" {provider.SEED_ENV}={facts.seed}"
    return env


def shell_path(path: Path) -> str:
    """``path`` relative to the working directory when it is inside it, for copy and paste."""
    try:
        return str(path.relative_to(Path.cwd()))
    except ValueError:
        return str(path)
