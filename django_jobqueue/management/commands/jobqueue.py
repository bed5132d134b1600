"""``manage.py jobqueue``: the queue from a shell, a script or a health check.

    jobqueue status [--json]
    jobqueue schedules [--json]
    jobqueue pause QUEUE
    jobqueue resume QUEUE
    jobqueue retry-dead (ID ... | --all) [--queue Q] [--name N]
    jobqueue prune [--older-than SECONDS]
    jobqueue tick

Each subcommand parses its arguments and calls ``QueueClient``, ``stats`` or
``ScheduleBook``; none runs SQL of its own.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from ... import stats
from ...models import DeadLetter
from ...queue import QueueClient, RetriedDeadLetter
from ...queue.schedules import ScheduleBook, ScheduleState
from ...queue.validation import check_name, check_queue
from ...schedules import ScheduleError, declared_schedules
from ..arguments import database_alias

# Each subcommand's one-line help (the list in ``jobqueue --help``), then the rest of its description.
STATUS_HELP = (
    "Per queue: ready, scheduled, running, dead; live workers, and whether their LISTEN hears.",
    "Also how long the oldest ready job has waited, the jobs done in the last hour, whether the queue "
    "is paused and its JOBQUEUE['QUEUES'] limits. --json prints the same for scripts and health checks.",
)
SCHEDULES_HELP = (
    "Per periodic job: its job, when it fires, the next and the last fire time, paused or not.",
    "One line per schedule declared in JOBQUEUE['SCHEDULES'] or by @job(cron=/every=), with the "
    "state workers keep in the database; reads only. --json prints the same for scripts.",
)
RETRY_HELP = (
    "Put dead letters back on their queues.",
    "Each becomes a new ready job with its attempts reset; give dead letter ids, or --all. "
    "Exits with status 1, after retrying the others, if an id given was not retried.",
)
PRUNE_HELP = (
    "Delete done and cancelled jobs older than KEEP_COMPLETED.",
    "Workers do this every five minutes; dead letters are never pruned.",
)
PAUSE_HELP = (
    "Stop every worker claiming from a queue, until it is resumed.",
    "Enqueueing still works and running jobs finish. The pause is kept in the database: it holds "
    "for every worker, and across restarts.",
)
RESUME_HELP = (
    "Let workers claim from a paused queue again.",
    "On PostgreSQL idle workers of the queue start at once; elsewhere at their next poll.",
)
TICK_HELP = (
    "Hand expired claims back (or to the dead letters when spent).",
    "Workers do this on their own timer; run it when none is running.",
)
VERBOSITY_HELP_RETRY = (
    "0 or 1: the total, and one line per dead letter given by id; 2 or 3: one line per dead letter, "
    "with --all too."
)
VERBOSITY_HELP_SAME = "Accepted for Django's usual -v; this subcommand prints the same at every level."

STATUS_COLUMNS = (
    "queue",
    "ready",
    "scheduled",
    "running",
    "waiting",
    "dead",
    "oldest ready",
    "done (1 h)",
    "paused",
    "limits",
)
SCHEDULE_COLUMNS = ("schedule", "job", "when", "timezone", "next fire (UTC)", "last fire (UTC)", "paused")
WORKER_COLUMNS = ("worker", "host", "pid", "queues", "concurrency", "last heartbeat", "listen")


def positive_id(text: str) -> int:
    if not text.isdigit() or int(text) < 1:
        raise argparse.ArgumentTypeError(f"{text!r} is not a dead letter id")
    return int(text)


def seconds_or_zero(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not 0 <= value < float("inf"):
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of seconds, 0 or more")
    return value


def checked(check: Any) -> Any:
    def parse(text: str) -> str:
        try:
            return str(check(text))
        except ValueError as exc:
            raise argparse.ArgumentTypeError(str(exc)) from None

    return parse


def table(header: tuple[str, ...], rows: Sequence[tuple[str, ...]], numeric: set[int]) -> list[str]:
    """Align ``rows`` under ``header``; columns in ``numeric`` to the right."""
    widths = [max(len(row[i]) for row in [header, *rows]) for i in range(len(header))]

    def line(row: tuple[str, ...]) -> str:
        cells = [
            cell.rjust(w) if i in numeric else cell.ljust(w)
            for i, (cell, w) in enumerate(zip(row, widths, strict=True))
        ]
        return "  ".join(cells).rstrip()

    return [line(header), *(line(row) for row in rows)]


def status_row(queue: stats.QueueStats, *, is_total: bool = False) -> tuple[str, ...]:
    """One line of ``status``: a queue's figures, or the totals (which have no pause or limits)."""
    state = ("", "") if is_total else ("paused" if queue.paused else "—", stats.describe_limits(queue.limits))
    return (
        queue.queue,
        f"{queue.ready:,}",
        f"{queue.scheduled:,}",
        f"{queue.running:,}",
        f"{queue.waiting:,}",
        f"{queue.dead:,}",
        stats.format_age(queue.oldest_ready_age),
        f"{queue.done_last_hour:,}",
        *state,
    )


def schedule_row(state: ScheduleState, now: datetime) -> tuple[str, ...]:
    schedule = state.schedule
    when = f"every {schedule.every} s" if schedule.every is not None else f"cron {schedule.cron}"
    return (
        schedule.name,
        schedule.job,
        when,
        schedule.timezone if schedule.cron is not None else "—",
        "paused" if state.paused else moment(state.next_fire_at, now),
        moment(state.last_fire_at, now),
        "yes" if state.paused else "no",
    )


def moment(at: datetime | None, now: datetime) -> str:
    """``2026-12-01 03:00:00 (in 2 h 5 min)``: a UTC time and how far it is from the database's now."""
    if at is None:
        return "—"
    seconds = (at - now).total_seconds()
    distance = f"in {stats.format_age(seconds)}" if seconds > 0 else f"{stats.format_age(-seconds)} ago"
    return f"{at.astimezone(UTC):%Y-%m-%d %H:%M:%S} ({distance})"


class Command(BaseCommand):
    help = (
        "Show the queue's state and its periodic jobs, pause and resume queues, retry dead letters, "
        "prune finished jobs, rescue expired claims."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        common = CommandParser(add_help=False)
        common.add_argument(
            "--database",
            default=None,
            type=database_alias,
            help="The queue's database: JOBQUEUE['DATABASE'] (the default) or one of JOBQUEUE['DATABASES'].",
        )
        subcommands = parser.add_subparsers(dest="subcommand", required=True, metavar="SUBCOMMAND")

        def add(name: str, text: tuple[str, str], verbosity_help: str) -> CommandParser:
            return self.subcommand(subcommands, name, [common], text, verbosity_help)

        status = add("status", STATUS_HELP, VERBOSITY_HELP_SAME)
        status.add_argument("--json", action="store_true", help="Print JSON, for scripts and health checks.")
        schedules = add("schedules", SCHEDULES_HELP, VERBOSITY_HELP_SAME)
        schedules.add_argument("--json", action="store_true", help="Print a JSON list, for scripts.")
        retry = add("retry-dead", RETRY_HELP, VERBOSITY_HELP_RETRY)
        retry.add_argument("ids", nargs="*", type=positive_id, metavar="ID", help="Dead letter ids.")
        retry.add_argument(
            "--all", action="store_true", help="Every dead letter (narrowed by --queue, --name)."
        )
        retry.add_argument("--queue", type=checked(check_queue), help="Only dead letters of this queue.")
        retry.add_argument("--name", type=checked(check_name), help="Only dead letters of this job name.")
        self.retry_parser = retry
        prune = add("prune", PRUNE_HELP, VERBOSITY_HELP_SAME)
        prune.add_argument(
            "--older-than",
            type=seconds_or_zero,
            default=None,
            metavar="SECONDS",
            help="Instead of KEEP_COMPLETED: prune jobs finished more than this long ago (0 or more).",
        )
        for name, text in (("pause", PAUSE_HELP), ("resume", RESUME_HELP)):
            add(name, text, VERBOSITY_HELP_SAME).add_argument(
                "queue", type=checked(check_queue), metavar="QUEUE", help="The queue's name."
            )
        add("tick", TICK_HELP, VERBOSITY_HELP_SAME)

    def subcommand(
        self,
        subcommands: Any,
        name: str,
        parents: list[CommandParser],
        text: tuple[str, str],
        verbosity_help: str,
    ) -> CommandParser:
        """Add subcommand ``name`` with its help, its description and a ``-v`` that says what it does."""
        summary, description = text
        sub: CommandParser = subcommands.add_parser(
            name, parents=parents, help=summary, description=f"{summary} {description}"
        )
        # Django's -v belongs to the command, before the subcommand; this one may
        # follow it. Its own name, or a subparser's default would hide the other.
        sub.add_argument(
            "-v",
            "--verbosity",
            dest="sub_verbosity",
            type=int,
            choices=[0, 1, 2, 3],
            default=None,
            help=verbosity_help,
        )
        return sub

    def handle(self, *args: Any, **options: Any) -> None:
        given = options.get("sub_verbosity")
        self.verbosity = int(options["verbosity"] if given is None else given)
        client = QueueClient(options["database"])
        subcommand = options["subcommand"]
        if subcommand == "status":
            self.status(client, as_json=options["json"])
        elif subcommand == "schedules":
            self.schedules(client.using, as_json=options["json"])
        elif subcommand == "retry-dead":
            self.retry_dead(client, options["ids"], options["all"], options["queue"], options["name"])
        elif subcommand == "prune":
            try:
                pruned = client.prune(options["older_than"])
            except ValueError as exc:
                raise CommandError(str(exc)) from None
            self.stdout.write(f"Pruned {pruned:,} finished job(s).")
        elif subcommand in ("pause", "resume"):
            self.pause(client, options["queue"], paused=subcommand == "pause")
        elif subcommand == "tick":
            handled = client.tick_timeouts()
            self.stdout.write(f"Handled {handled:,} expired claim(s).")

    def status(self, client: QueueClient, *, as_json: bool) -> None:
        overview = stats.overview(client.using, minutes=False)
        if overview.limits_problem is not None:  # only past --skip-checks: the check is E014
            self.stderr.write(f"The limits are not shown: {overview.limits_problem}.")
        if as_json:
            self.stdout.write(json.dumps(overview.as_json(), indent=2))
            return
        rows = [status_row(queue) for queue in overview.queues]
        rows.append(status_row(overview.total, is_total=True))
        for line in table(STATUS_COLUMNS, rows, numeric={1, 2, 3, 4, 5, 6, 7}):
            self.stdout.write(line)
        self.stdout.write("")
        if not overview.workers:
            self.stdout.write("No worker is running.")
            return
        self.stdout.write(f"{len(overview.workers)} worker(s):")
        workers = [
            (
                worker.worker_id,
                worker.hostname,
                str(worker.pid),
                ", ".join(worker.queues) or "every queue",
                str(worker.concurrency),
                f"{stats.format_age(worker.heartbeat_age)} ago" + (" (late)" if worker.late else ""),
                worker.listen or "unknown",  # a worker of a release that does not record it
            )
            for worker in overview.workers
        ]
        for line in table(WORKER_COLUMNS, workers, numeric={2, 4}):
            self.stdout.write(f"  {line}")

    def pause(self, client: QueueClient, queue: str, *, paused: bool) -> None:
        if paused:
            changed = client.pause_queue(queue)
            done = "Paused queue {}: no worker claims from it until it is resumed."
            self.stdout.write((done if changed else "Queue {} was already paused.").format(repr(queue)))
        else:
            changed = client.resume_queue(queue)
            done = "Resumed queue {}: workers claim from it again."
            self.stdout.write((done if changed else "Queue {} was not paused.").format(repr(queue)))

    def schedules(self, using: str, *, as_json: bool) -> None:
        # The @job(cron=/every=) shorthands were registered when the app became ready.
        try:
            declared = declared_schedules()
        except ScheduleError as exc:
            # The system checks (E011) stop a bad declaration before this, unless skipped.
            raise CommandError(f"{exc} (see docs/schedules.md)") from None
        book = ScheduleBook(using)
        now = book.now()
        states = book.states(declared, now)
        if as_json:
            self.stdout.write(json.dumps([state.as_json() for state in states], indent=2))
            return
        if not states:
            self.stdout.write("No schedule is declared (JOBQUEUE['SCHEDULES'], @job(cron=/every=)).")
            return
        rows = [schedule_row(state, now) for state in states]
        for line in table(SCHEDULE_COLUMNS, rows, numeric=set()):
            self.stdout.write(line)
        waiting = [state.schedule.name for state in states if state.row_id is None]
        if waiting:
            self.stdout.write("")
            self.stdout.write(
                "Not yet started (no worker has run since it was declared): " + ", ".join(waiting)
            )

    def retry_dead(
        self, client: QueueClient, ids: list[int], everything: bool, queue: str | None, name: str | None
    ) -> None:
        if not ids and not everything:
            self.retry_parser.error("give dead letter ids, or --all (narrowed by --queue and --name)")
        if ids and everything:
            self.retry_parser.error("give dead letter ids or --all, not both")
        chosen = DeadLetter.objects.using(client.using).all()
        if ids:
            chosen = chosen.filter(pk__in=ids)
        if queue is not None:
            chosen = chosen.filter(queue=queue)
        if name is not None:
            chosen = chosen.filter(name=name)
        found: set[int] = set()

        def report(batch: list[RetriedDeadLetter]) -> None:
            for entry in batch:
                found.add(entry.dead_letter_id)
                if ids or self.verbosity > 1:
                    self.stdout.write(
                        f"dead letter #{entry.dead_letter_id} -> job #{entry.job_id} "
                        f"({entry.name} on {entry.queue})"
                    )

        retried = client.retry_dead_letters(chosen, on_batch=report)
        self.stdout.write(f"Retried {retried:,} dead letter(s).")
        missing = sorted(set(ids) - found)
        if missing:
            raise CommandError(
                "Not retried (gone, or not matching --queue / --name): "
                + ", ".join(f"#{pk}" for pk in missing)
            )
