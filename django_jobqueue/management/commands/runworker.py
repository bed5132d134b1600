"""``manage.py runworker``: run jobs from the queue until stopped."""

from __future__ import annotations

import logging
import os
import sys
from argparse import ArgumentParser, ArgumentTypeError
from typing import Any

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError

from ...conf import jobqueue_settings
from ...loader import load_job_modules
from ...queue.validation import check_queue, check_worker_id
from ...worker.supervisor import WorkerConfig, default_worker_id, run_worker

logger = logging.getLogger(__name__)


def queue_and_weight(text: str) -> tuple[str, int]:
    """Parse ``NAME[:WEIGHT]``. Queue names may hold ``:``, so only a trailing ``:<digits>`` is a weight;
    a queue whose name ends that way is given with an explicit weight (``a:1:1``)."""
    name, colon, weight = text.rpartition(":")
    if not colon or not weight.isdigit():
        name, weight = text, "1"
    try:
        check_queue(name)
    except ValueError as exc:
        raise ArgumentTypeError(str(exc)) from None
    if int(weight) < 1:
        raise ArgumentTypeError(f"the weight of queue {name!r} must be 1 or more")
    return name, int(weight)


def positive_int(text: str) -> int:
    value = int(text)
    if value < 1:
        raise ArgumentTypeError(f"must be 1 or more, got {value}")
    return value


def seconds(text: str, *, allow_zero: bool) -> float:
    value = float(text)
    if not (value >= 0 if allow_zero else value > 0) or value == float("inf"):
        raise ArgumentTypeError(f"must be {'0 or more' if allow_zero else 'more than 0'} seconds, got {text}")
    return value


def positive_seconds(text: str) -> float:
    return seconds(text, allow_zero=False)


def seconds_or_zero(text: str) -> float:
    return seconds(text, allow_zero=True)


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
            "several queues. Default: every queue, highest priority first.",
        )
        parser.add_argument(
            "--concurrency", type=positive_int, default=1, help="Jobs run at once, each in a thread."
        )
        parser.add_argument(
            "--worker-id", help="Name of this worker in claims and logs. Default: <hostname>-<pid>-<random>."
        )
        parser.add_argument(
            "--burst", action="store_true", help="Exit once no job is due now and none is running."
        )
        parser.add_argument(
            "--max-jobs", type=positive_int, help="Exit after claiming this many jobs, once they finish."
        )
        parser.add_argument(
            "--visibility-timeout",
            type=positive_seconds,
            metavar="S",
            help="Claim jobs for this long between heartbeats, instead of each job's own timeout.",
        )
        parser.add_argument(
            "--poll-interval",
            type=positive_seconds,
            metavar="S",
            help="Look for due jobs at least this often. Default: JOBQUEUE['POLL_INTERVAL'].",
        )
        parser.add_argument(
            "--shutdown-timeout",
            type=seconds_or_zero,
            default=25.0,
            metavar="S",
            help="On SIGTERM/SIGINT, wait this long for running jobs before handing them back "
            "(default 25; keep it below your process manager's grace period).",
        )
        parser.add_argument(
            "--database", help="The database alias of the queue. Default: JOBQUEUE['DATABASE']."
        )

    def handle(self, *args: Any, **options: Any) -> None:
        config = self.config(options)
        modules = load_job_modules()
        logger.info("loaded job modules: %s", ", ".join(modules) or "(none)")
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
        return WorkerConfig(
            worker_id=worker_id,
            using=using,
            queues=tuple(options["queues"]),
            concurrency=options["concurrency"],
            burst=options["burst"],
            max_jobs=options["max_jobs"],
            visibility_timeout=options["visibility_timeout"],
            poll_interval=options["poll_interval"] or float(jobqueue_settings.POLL_INTERVAL),
            shutdown_timeout=options["shutdown_timeout"],
            default_visibility_timeout=float(jobqueue_settings.VISIBILITY_TIMEOUT),
        )
