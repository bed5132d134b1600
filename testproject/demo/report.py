"""What the demo shows: the queue's counters while it drains, and the outcome read back from the tables."""

from __future__ import annotations

import re
import time
from dataclasses import asdict, dataclass, field
from types import TracebackType
from typing import Any

from django.db.models import Count, Q
from django.utils import timezone
from rich import box
from rich.console import Console, Group, RenderableType
from rich.live import Live
from rich.panel import Panel
from rich.progress_bar import ProgressBar
from rich.table import Table
from rich.text import Text

from django_jobqueue.models import DeadLetter, Job
from django_jobqueue.queue.schedules import ScheduleBook
from django_jobqueue.schedules import declared_schedules

from . import provider
from .fleet import WorkerFleet
from .models import Account

OUTCOME = re.compile(r"\boutcome=(\w+)")
OUTCOME_STYLES = {"done": "green", "retry": "yellow", "dead": "red"}
PLAIN_BAR = 12  # characters of the progress bar printed when stdout is not a terminal


@dataclass(frozen=True)
class Snapshot:
    """The queue's jobs by state, read in one query."""

    due: int = 0  # ready, and their run_at has come
    waiting: int = 0  # ready, waiting for a backoff or a Retry(delay=...)
    running: int = 0
    done: int = 0
    dead: int = 0

    @property
    def live(self) -> int:
        return self.due + self.waiting + self.running

    @property
    def finished(self) -> int:
        return self.done + self.dead


def snapshot(queue: str) -> Snapshot:
    now = timezone.now()
    counts = Job.objects.filter(queue=queue).aggregate(
        due=Count("id", filter=Q(status="ready", run_at__lte=now)),
        waiting=Count("id", filter=Q(status="ready", run_at__gt=now)),
        running=Count("id", filter=Q(status="running")),
        done=Count("id", filter=Q(status="done")),
    )
    return Snapshot(dead=DeadLetter.objects.filter(queue=queue).count(), **counts)


class ProgressDisplay:
    """A live panel on a terminal; on a pipe or in CI, one plain line a second."""

    def __init__(self, console: Console, total: int, fleet: WorkerFleet) -> None:
        self.console = console
        self.total = total
        self.fleet = fleet
        self.started = time.monotonic()
        self.live: Live | None = None
        self.last_counters: Snapshot | None = None
        self.last_printed = -1.0

    def __enter__(self) -> ProgressDisplay:
        if self.console.is_terminal:
            self.live = Live(console=self.console, refresh_per_second=10, transient=False)
            self.live.__enter__()
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        if self.live is not None:
            self.live.__exit__(exc_type, exc, tb)

    def update(self, snap: Snapshot, *, final: bool = False) -> None:
        elapsed = time.monotonic() - self.started
        if self.live is not None:
            self.live.update(self.render(snap, elapsed), refresh=final)
            return
        if not final and (snap == self.last_counters or elapsed - self.last_printed < 1.0):
            return
        filled = PLAIN_BAR * snap.finished // self.total if self.total else PLAIN_BAR
        self.console.print(
            f"{elapsed:4.1f} s [{'#' * filled}{'.' * (PLAIN_BAR - filled)}] {snap.finished:>3}/{self.total}"
            f"  due {snap.due:>3}  waiting {snap.waiting:>2}  running {snap.running}"
            f"  sent {snap.done:>3}  dead {snap.dead:>2}",
            markup=False,
            highlight=False,
            soft_wrap=True,
        )
        self.last_counters, self.last_printed = snap, elapsed

    def render(self, snap: Snapshot, elapsed: float) -> RenderableType:
        head = Table.grid(padding=(0, 2))
        head.add_row(
            Text("OTP jobs", style="bold"),
            ProgressBar(total=self.total, completed=snap.finished, width=36),
            Text(f"{snap.finished}/{self.total} finished"),
            Text(f"{elapsed:.1f} s", style="dim"),
        )
        counts = Table(box=box.SIMPLE_HEAD, show_edge=False, pad_edge=False, padding=(0, 2))
        for title, style in (
            ("due now", "cyan"),
            ("waiting to retry", "yellow"),
            ("running", "blue"),
            ("sent", "green"),
            ("dead-lettered", "red"),
        ):
            counts.add_column(title, justify="right", style=style)
        counts.add_row(*(str(n) for n in (snap.due, snap.waiting, snap.running, snap.done, snap.dead)))
        workers = Text("workers  ", style="bold")
        if self.fleet.alive:
            for worker in self.fleet.alive:
                workers.append("● ", style="green").append(f"{worker.worker_id} (pid {worker.pid})  ")
        else:
            workers.append("none running" + ("; next burst when a retry comes due" if snap.live else ""))
        workers.append(f"  bursts started: {self.fleet.started}", style="dim")
        recent = Table.grid(padding=(0, 1))
        recent.add_column(style="dim", no_wrap=True, min_width=len("demo-worker-10"))
        recent.add_column(no_wrap=True, overflow="ellipsis")
        for worker_id, line in self.fleet.recent:
            outcome = OUTCOME.search(line)
            style = OUTCOME_STYLES.get(outcome.group(1), "") if outcome else "dim"
            recent.add_row(worker_id, Text(line, style=style))
        return Panel(
            Group(head, Text(), counts, workers, Text(), recent),
            title="[bold]runworker --burst[/] draining the [bold]otp[/] queue",
            title_align="left",
            border_style="blue",
        )


@dataclass(frozen=True)
class DeadRow:
    """One dead letter, with the number of the account it was for."""

    id: int
    account_id: str
    phone: str
    attempts: int
    error: str


@dataclass
class Outcome:
    """The demo's result, read back from the tables once the queue is empty."""

    registered: int
    sent: int
    sent_first_try: int
    sent_after_retries: int
    retried: int  # jobs, finished or dead, that needed more than one attempt
    attempts: int
    dead_letters: list[DeadRow] = field(default_factory=list)
    jobs_left_live: int = 0
    accounts_without_outcome: list[str] = field(default_factory=list)
    accounts_with_both: list[str] = field(default_factory=list)
    expected_sent: int = 0
    expected_dead: int = 0

    @property
    def consistent(self) -> bool:
        return (
            self.jobs_left_live == 0
            and not self.accounts_without_outcome
            and not self.accounts_with_both
            and self.sent + len(self.dead_letters) == self.registered
        )

    @property
    def matches_script(self) -> bool:
        return (self.sent, len(self.dead_letters)) == (self.expected_sent, self.expected_dead)

    def dead_letters_by_error(self) -> list[tuple[str, list[DeadRow]]]:
        """The dead letters grouped by error, the largest group first."""
        groups: dict[str, list[DeadRow]] = {}
        for letter in self.dead_letters:
            groups.setdefault(letter.error, []).append(letter)
        return sorted(groups.items(), key=lambda group: -len(group[1]))

    def as_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["consistent"] = self.consistent
        data["matches_script"] = self.matches_script
        return data


def collect_outcome(queue: str, seed: int, max_attempts: int) -> Outcome:
    """Read the outcome of the run from the accounts, the jobs and the dead letters."""
    phones: dict[str, str] = {}
    sent: set[str] = set()
    for pk, phone, sent_at in Account.objects.values_list("pk", "phone", "otp_sent_at"):
        phones[str(pk)] = phone
        if sent_at is not None:
            sent.add(str(pk))
    dead_letters = []
    for letter in DeadLetter.objects.filter(queue=queue).order_by("failed_at", "id"):
        account_id = str(letter.payload.get("account_id"))
        phone = phones.get(account_id, "?")
        dead_letters.append(DeadRow(letter.pk, account_id, phone, letter.attempts, letter.error.strip()))
    dead = {letter.account_id for letter in dead_letters}
    done = list(Job.objects.filter(queue=queue, status="done").values_list("attempts", flat=True))
    runs = done + [letter.attempts for letter in dead_letters]
    scripted_sent = sum(
        provider.script_for(phone, seed).delivered_within(max_attempts) for phone in phones.values()
    )
    return Outcome(
        registered=len(phones),
        sent=len(sent),
        sent_first_try=sum(1 for attempts in done if attempts == 1),
        sent_after_retries=sum(1 for attempts in done if attempts > 1),
        retried=sum(1 for attempts in runs if attempts > 1),
        attempts=sum(runs),
        dead_letters=dead_letters,
        jobs_left_live=Job.objects.filter(queue=queue, status__in=["ready", "running"]).count(),
        accounts_without_outcome=sorted(phones[pk] for pk in set(phones) - sent - dead),
        accounts_with_both=sorted(phones[pk] for pk in sent & dead),
        expected_sent=scripted_sent,
        expected_dead=len(phones) - scripted_sent,
    )


@dataclass(frozen=True)
class ScheduleRun:
    """What a periodic job did during the demo, read back from its jobs, its row and the workers' logs."""

    name: str
    job: str
    every: int
    workers: int  # long-running workers that fired it
    jobs: int  # jobs enqueued by its fire times
    fire_times: int  # distinct fire times among them: equal to ``jobs`` if none was enqueued twice
    fired_by: dict[str, int]  # "schedule … fired" log lines per worker
    on_the_grid: bool  # every fire time a multiple of ``every`` seconds since the epoch
    done: int
    last_fire_at: str | None  # ISO 8601, from the schedule's row
    last_result: dict[str, int] | None  # what the newest finished job counted

    @property
    def once_per_fire_time(self) -> bool:
        return self.jobs == self.fire_times == sum(self.fired_by.values())

    def as_dict(self) -> dict[str, Any]:
        return {**asdict(self), "once_per_fire_time": self.once_per_fire_time}


def collect_schedule(name: str, job: str, every: int, fleet: WorkerFleet) -> ScheduleRun:
    """Read back what schedule ``name`` fired, and which of ``fleet``'s workers logged firing it."""
    jobs = list(Job.objects.filter(name=job).order_by("run_at").values_list("run_at", "status", "result"))
    fire_times = {run_at for run_at, _, _ in jobs}
    line = re.compile(rf"\bschedule {re.escape(name)} fired for ")
    fired_by = {}
    for worker, _ in fleet.finished:
        text = worker.log_path.read_text(errors="replace")
        fired_by[worker.worker_id] = len(line.findall(text))
    results = [result for _, status, result in jobs if status == "done" and isinstance(result, dict)]
    (state,) = [state for state in ScheduleBook().states(declared_schedules()) if state.schedule.name == name]
    return ScheduleRun(
        name=name,
        job=job,
        every=every,
        workers=len(fleet.finished),
        jobs=len(jobs),
        fire_times=len(fire_times),
        fired_by=fired_by,
        on_the_grid=all(run_at.timestamp() % every == 0 for run_at in fire_times),
        done=sum(1 for _, status, _ in jobs if status == "done"),
        last_fire_at=state.last_fire_at.isoformat() if state.last_fire_at is not None else None,
        last_result=results[-1] if results else None,
    )
