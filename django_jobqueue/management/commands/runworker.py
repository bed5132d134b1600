"""``manage.py runworker``: run jobs from the queue until stopped."""

from __future__ import annotations

import logging
import os
import sys
from argparse import ArgumentParser, ArgumentTypeError
from typing import Any

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError
from django.db import connections

from ...checks import synchronous_commit_errors
from ...conf import jobqueue_settings
from ...loader import load_job_modules
from ...queue.flow import configured_limits
from ...queue.validation import check_poll_interval, check_visibility_timeout, check_worker_id
from ...schedules import ScheduleError, declared_schedules
from ...worker.config import WorkerConfig, default_worker_id
from ...worker.console import LOG_FORMATS, console_logging
from ...worker.pools import DEFAULT_TASKS, DEFAULT_THREADS, POOLS, default_concurrency
from ...worker.pools.autoscale import DEFAULT_RESIZE_INTERVAL, DEFAULT_SHRINK_AFTER, SlotRange
from ...worker.pools.processes.children import ChildLimits
from ...worker.run.executor import DEFAULT_CANCEL_GRACE
from ...worker.supervisor import run_worker
from ..arguments import (
    MAX_CONCURRENCY,
    checked_seconds,
    concurrency,
    database_alias,
    keyword_value,
    megabytes,
    metrics_host,
    metrics_port,
    positive_int,
    queue_and_weight,
    resize_seconds,
    shutdown_seconds,
)

logger = logging.getLogger(__name__)


def default_slots(pool: str) -> SlotRange:
    """The slots of a worker started without ``--concurrency``."""
    count = min(default_concurrency(pool), MAX_CONCURRENCY)
    return SlotRange(count, count)


DEFAULT_METRICS_HOST = "127.0.0.1"


class Command(BaseCommand):
    help = (
        "Run jobs from the queue until SIGTERM or SIGINT: claim up to --concurrency jobs at a time, "
        "keep their claims alive, rescue expired claims, and on a signal let running jobs finish "
        "for up to --shutdown-timeout seconds before handing the rest back."
    )

    def add_arguments(self, parser: ArgumentParser) -> None:
        parser.add_argument(
            "--queue",
            action="append",
            dest="queues",
            type=queue_and_weight,
            default=[],
            metavar="NAME[:WEIGHT]",
            help="A queue to serve, with its share of the slots (default weight 1); repeat for "
            "several queues. The text after the last ':' is the weight, so a queue whose name "
            "holds ':' is given with one (a:b:1). Default: every queue, highest priority first.",
        )
        parser.add_argument(
            "--concurrency",
            type=concurrency,
            default=None,
            metavar="N|MIN:MAX",
            help=f"Jobs run at once, each in a slot (1 to {MAX_CONCURRENCY}; default {DEFAULT_THREADS}, "
            f"with --pool processes one per CPU, with --pool asyncio {DEFAULT_TASKS}). "
            "MIN:MAX starts MIN slots, adds slots while due jobs wait, up to MAX, and retires slots "
            "that were not needed for --shrink-after seconds, down to MIN.",
        )
        parser.add_argument(
            "--resize-interval",
            type=checked_seconds(resize_seconds),
            metavar="S",
            help="--concurrency MIN:MAX: resize at most once in this many seconds: double the slots "
            f"while due jobs wait, or retire the unneeded ones (default {DEFAULT_RESIZE_INTERVAL:g}).",
        )
        parser.add_argument(
            "--shrink-after",
            type=checked_seconds(resize_seconds),
            metavar="S",
            help="--concurrency MIN:MAX: retire the slots that were not needed for this many seconds "
            f"(default {DEFAULT_SHRINK_AFTER:g}).",
        )
        parser.add_argument(
            "--worker-id", help="Name of this worker in claims and logs. Default: <hostname>-<pid>-<random>."
        )
        parser.add_argument(
            "--burst", action="store_true", help="Exit once no job is due now and none is running."
        )
        parser.add_argument(
            "--no-schedules",
            action="store_true",
            help="Fire no periodic jobs (JOBQUEUE['SCHEDULES'], @job(cron=/every=)); other workers do. "
            "A --burst worker never fires them.",
        )
        parser.add_argument(
            "--max-jobs", type=positive_int, help="Exit after claiming this many jobs, once they finish."
        )
        parser.add_argument(
            "--visibility-timeout",
            type=checked_seconds(lambda value: check_visibility_timeout(value, "--visibility-timeout")),
            metavar="S",
            help="Claim jobs for this long between heartbeats, instead of each job's own timeout.",
        )
        parser.add_argument(
            "--poll-interval",
            type=checked_seconds(lambda value: check_poll_interval(value, "--poll-interval")),
            metavar="S",
            help="Look for due jobs at least this often. Default: JOBQUEUE['POLL_INTERVAL'].",
        )
        parser.add_argument(
            "--shutdown-timeout",
            type=checked_seconds(shutdown_seconds),
            default=25.0,
            metavar="S",
            help="On SIGTERM/SIGINT, wait this long for running jobs before handing them back "
            "(default 25; keep it below your process manager's grace period).",
        )
        parser.add_argument(
            "--pool",
            choices=POOLS,
            default="threads",
            help="Run each slot's jobs in a thread of this process (threads, the default), in a child "
            "process of its own (processes: CPU-bound jobs use every core, and a job that must be "
            "stopped by force is killed), or as tasks of one event loop (asyncio: async def jobs that "
            "wait on the network, many at once; plain functions run in up to 10 threads beside it).",
        )
        parser.add_argument(
            "--cancel-grace",
            type=checked_seconds(shutdown_seconds),
            default=DEFAULT_CANCEL_GRACE,
            metavar="S",
            help="Seconds a job told to stop (cancelled, or past its timeout) gets before it is stopped "
            "by force: its child killed, or its thread interrupted or given up "
            f"(default {DEFAULT_CANCEL_GRACE:g}).",
        )
        parser.add_argument(
            "--max-jobs-per-child",
            type=positive_int,
            metavar="N",
            help="--pool processes: replace a child after it ran this many jobs.",
        )
        parser.add_argument(
            "--max-memory-per-child",
            type=megabytes,
            metavar="MB",
            help="--pool processes: replace a child after a job that left it above this resident memory.",
        )
        parser.add_argument(
            "--metrics-port",
            type=metrics_port,
            default=0,
            metavar="PORT",
            help="Serve Prometheus metrics on /metrics and a health check on /healthz at this port "
            "(default 0: off). See docs/observability.md.",
        )
        parser.add_argument(
            "--metrics-host",
            type=metrics_host,
            metavar="HOST",
            help=f"The address --metrics-port listens on (default {DEFAULT_METRICS_HOST}: this machine "
            "only; 0.0.0.0 or :: for every interface).",
        )
        parser.add_argument(
            "--log-format",
            choices=LOG_FORMATS,
            default="text",
            help="The worker's console lines: text (the default) or json, one object per line.",
        )
        parser.add_argument(
            "--database",
            type=database_alias,
            help="The database whose queue to serve: JOBQUEUE['DATABASE'] (the default) "
            "or one of JOBQUEUE['DATABASES'].",
        )

    def handle(self, *args: Any, **options: Any) -> None:
        config = self.config(self.parsed(options))
        refuse_an_open_transaction(config.using)
        # call_command(stderr=...) hands its stream over; from a shell it is the process's own.
        stream = options.get("stderr") or sys.stderr
        with console_logging(stream, options["verbosity"], options.get("log_format") or "text"):
            self.run(config)

    def run(self, config: WorkerConfig) -> None:
        modules = load_job_modules()
        logger.info("loaded job modules: %s", ", ".join(modules) or "(none)")
        if config.fire_schedules and not config.burst:
            try:
                declared_schedules()  # the system checks say the same, unless skipped
            except ScheduleError as exc:
                raise CommandError(f"refusing to start: {exc}") from None
        try:
            # A limit misread would let jobs past it; the system checks say the same (E014), unless skipped.
            configured_limits()
        except ValueError as exc:
            raise CommandError(f"refusing to start: {exc} (see docs/flow-control.md)") from None
        for error in synchronous_commit_errors():  # every round would fail on it (E016)
            raise CommandError(f"refusing to start: {error.msg}")
        supervisor = run_worker(config)
        if supervisor.refused is not None:
            raise CommandError(f"refusing to start: {supervisor.refused}")
        if supervisor.clean is None:
            raise CommandError("the worker's claiming loop crashed; see the traceback above")
        if not supervisor.clean:
            # Job threads still running after their claims were handed back: end
            # the process now rather than let interpreter shutdown wait on them.
            logging.shutdown()
            sys.stdout.flush()
            sys.stderr.flush()
            os._exit(0)

    def parsed(self, options: dict[str, Any]) -> dict[str, Any]:
        """``options`` with each of this command's own values read as its argument type reads it.

        ``call_command("runworker", queue=["emails"], poll_interval="0.5")``
        hands the values over as given, past the parser; from the command line
        they were parsed already, and reading a parsed value again gives it
        back. A value the option does not take is refused with its name.
        """
        parser = ArgumentParser(add_help=False)
        self.add_arguments(parser)
        result = dict(options)
        for action in parser._actions:
            value = options.get(action.dest)
            if value is None:
                continue
            try:
                result[action.dest] = keyword_value(action, value)
            except (ArgumentTypeError, ValueError) as exc:
                raise CommandError(f"{max(action.option_strings, key=len)}: {exc}") from None
        return result

    def config(self, options: dict[str, Any]) -> WorkerConfig:
        using = options["database"] or jobqueue_settings.DATABASE
        if using not in settings.DATABASES:
            raise CommandError(f"--database {using!r} is not a key of DATABASES")
        names = [name for name, _weight in options["queues"]]
        if len(set(names)) != len(names):
            raise CommandError("a queue is given twice with --queue")
        try:
            worker_id = check_worker_id(options["worker_id"] or default_worker_id())
        except ValueError as exc:
            raise CommandError(f"--worker-id: {exc}") from None
        limits = ChildLimits(options.get("max_jobs_per_child"), options.get("max_memory_per_child"))
        pool = options.get("pool") or "threads"
        if pool != "processes" and limits != ChildLimits():
            raise CommandError("--max-jobs-per-child and --max-memory-per-child need --pool processes")
        slots = self.slot_range(options, pool)
        port = options.get("metrics_port") or 0
        host = options.get("metrics_host")
        if host is not None and not port:
            raise CommandError("--metrics-host needs --metrics-port")
        return WorkerConfig(
            worker_id=worker_id,
            using=using,
            queues=tuple(options["queues"]),
            concurrency=slots.minimum,
            max_concurrency=None if slots.fixed else slots.maximum,
            resize_interval=options.get("resize_interval") or DEFAULT_RESIZE_INTERVAL,
            shrink_after=options.get("shrink_after") or DEFAULT_SHRINK_AFTER,
            burst=options["burst"],
            max_jobs=options["max_jobs"],
            visibility_timeout=options["visibility_timeout"],
            poll_interval=options["poll_interval"] or float(jobqueue_settings.POLL_INTERVAL),
            shutdown_timeout=options["shutdown_timeout"],
            default_visibility_timeout=float(jobqueue_settings.VISIBILITY_TIMEOUT),
            fire_schedules=not options["no_schedules"],
            pool=pool,
            cancel_grace=options.get("cancel_grace", DEFAULT_CANCEL_GRACE),
            child_limits=limits,
            verbosity=options.get("verbosity", 1),
            metrics_host=host or DEFAULT_METRICS_HOST,
            metrics_port=port,
            synchronous_commit=jobqueue_settings.WORKER_SYNCHRONOUS_COMMIT,
        )

    @staticmethod
    def slot_range(options: dict[str, Any], pool: str = "threads") -> SlotRange:
        """``--concurrency`` as a range; refuse the resize options without one to apply them to."""
        slots: SlotRange = options.get("concurrency") or default_slots(pool)
        resizing = [option for option in ("resize_interval", "shrink_after") if options.get(option)]
        if resizing and slots.fixed:
            names = " and ".join(f"--{option.replace('_', '-')}" for option in resizing)
            raise CommandError(f"{names} need --concurrency MIN:MAX with MIN below MAX")
        return slots


def refuse_an_open_transaction(using: str) -> None:
    """Refuse to run inside a transaction of the caller's that holds the queue's connection.

    The worker's slots query on connections of their own, which cannot see
    what that transaction wrote before it commits (a ``django.test.TestCase``'s
    jobs, rolled back at its end), and on SQLite would wait on its write lock.
    """
    if connections[using].in_atomic_block:
        raise CommandError(
            f"runworker cannot run inside an open transaction on database {using!r} (such as a "
            "django.test.TestCase's, or pytest-django's db fixture's): its slots use connections of "
            "their own, which do not see the jobs that transaction enqueued, and on SQLite would wait "
            "on its lock. In a test, run the jobs with django_jobqueue.testing.run_jobs(), which runs them "
            "inside the test's transaction (docs/testing.md)."
        )
