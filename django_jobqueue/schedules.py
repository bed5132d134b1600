"""Periodic jobs: the schedules a project declares, read and checked.

A schedule comes from ``JOBQUEUE["SCHEDULES"]`` or from ``@job(cron=...)`` /
``@job(every=...)``. This module reads and checks the declarations; their fire
times are computed in ``queue/timetable.py``, which of them have been enqueued
is the database's to say (``queue/schedules.py``), and the worker's scheduler
fires them (``worker/services/scheduler.py``). See docs/schedules.md.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from datetime import UTC, datetime, timedelta
from typing import Any
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from cronsim import CronSim, CronSimError
from django.conf import settings

from . import registry
from .conf import jobqueue_settings
from .exceptions import JobPayloadError
from .queue.preparation import concurrency_of
from .queue.timetable import MAX_CATCH_UP, Schedule
from .queue.validation import check_name, check_priority, check_queue, encode_payload_and_copy

__all__ = [
    "MAX_CATCH_UP",
    "Schedule",
    "ScheduleError",
    "declared_schedules",
    "read_schedule",
    "schedule_problems",
]

CATCH_UP_CHOICES = ("latest", "none", "all")
KEYS = frozenset(
    {
        "job",
        "cron",
        "every",
        "payload",
        "queue",
        "priority",
        "timezone",
        "catch_up",
        "concurrency_key",
        "concurrency_limit",
    }
)
# Longest supported `every`: a year. Longer periods belong in cron.
MAX_EVERY = 366 * 86400


class ScheduleError(ValueError):
    """A schedule that cannot fire as declared; the message names it."""


# -- reading the declarations ----------------------------------------------------


def declared_schedules() -> list[Schedule]:
    """Every schedule of the settings and of ``@job(cron=/every=)``, checked, sorted by name.

    Raise ``ScheduleError`` naming the first bad one; the system checks report
    them all (``schedule_problems``).
    """
    schedules, problems = _read_schedules()
    if problems:
        raise ScheduleError(problems[0])
    return schedules


def schedule_problems() -> list[str]:
    """Why each bad schedule cannot fire, one message each naming its schedule."""
    return _read_schedules()[1]


def _read_schedules() -> tuple[list[Schedule], list[str]]:
    declared: dict[str, tuple[str, Any]] = {}
    problems: list[str] = []
    raw = jobqueue_settings.SCHEDULES
    if not isinstance(raw, Mapping):
        return [], [f"JOBQUEUE['SCHEDULES'] must be a dict of name -> schedule, not {type(raw).__name__}"]
    for name, entry in raw.items():
        declared[name] = ("JOBQUEUE['SCHEDULES']", entry)
    for spec in registry.specs():
        if spec.schedule is None:
            continue
        where = f"@job {spec.name!r}"
        if spec.name in declared:
            first = declared[spec.name][0]
            problems.append(f"schedule {spec.name!r} is declared twice: in {first} and by {where}")
            continue
        declared[spec.name] = (where, {"job": spec.name, **spec.schedule})
    schedules = []
    for name in sorted(declared, key=str):
        where, entry = declared[name]
        try:
            schedules.append(read_schedule(name, entry))
        except ScheduleError as exc:
            problems.append(str(exc))
    return schedules, problems


def read_schedule(name: object, entry: object) -> Schedule:
    """Check one declaration and return it as a ``Schedule``; raise ``ScheduleError`` naming it."""
    if not isinstance(name, str):
        raise ScheduleError(f"schedule name {name!r} must be a string")
    try:
        check_name(name)
    except ValueError as exc:
        raise ScheduleError(f"schedule {name!r}: bad name: {exc}") from None
    label = f"schedule {name!r}"
    if not isinstance(entry, Mapping):
        raise ScheduleError(f"{label} must be a dict with 'job' and 'cron' or 'every'")
    unknown = sorted(set(entry) - KEYS, key=str)
    if unknown:
        raise ScheduleError(
            f"{label} has unknown key(s) {', '.join(map(repr, unknown))}; known: {', '.join(sorted(KEYS))}"
        )
    try:
        return _build(name, entry)
    except (ValueError, TypeError, JobPayloadError) as exc:
        raise ScheduleError(f"{label}: {exc}") from None


def _build(name: str, entry: Mapping[str, Any]) -> Schedule:
    job = entry.get("job")
    if not isinstance(job, str) or not job:
        raise ValueError("'job' must name a registered job")
    spec = registry.lookup(job)
    if spec is None:
        raise ValueError(f"job {job!r} is not registered (no @job function by that name is loaded)")
    cron, every = entry.get("cron"), entry.get("every")
    if (cron is None) == (every is None):
        raise ValueError("give exactly one of 'cron' and 'every'")
    payload = entry.get("payload", {})
    if not isinstance(payload, dict):
        raise ValueError(f"'payload' must be a JSON object (a dict), not {type(payload).__name__}")
    encode_payload_and_copy(payload, jobqueue_settings.MAX_PAYLOAD_BYTES)
    problem = spec.payload_problem(payload)
    if problem:
        raise ValueError(problem)
    queue = entry.get("queue")
    priority = entry.get("priority")
    zone = entry.get("timezone")
    catch_up = entry.get("catch_up", "latest")
    if catch_up not in CATCH_UP_CHOICES:
        choices = ", ".join(map(repr, CATCH_UP_CHOICES))
        raise ValueError(f"'catch_up' must be one of {choices}, not {catch_up!r}")
    key, limit = entry.get("concurrency_key"), entry.get("concurrency_limit")
    # The enqueue's own refusals, now rather than at each fire time. The limit
    # is kept as declared: None leaves the job's @job default in force.
    concurrency_of(job, spec, {"concurrency_key": key, "concurrency_limit": limit})
    return Schedule(
        name=name,
        job=job,
        cron=_check_cron(cron) if cron is not None else None,
        every=_check_every(every) if every is not None else None,
        payload=payload,
        queue=check_queue(queue) if queue is not None else None,
        priority=check_priority(priority) if priority is not None else None,
        timezone=_check_timezone(zone),
        catch_up=catch_up,
        concurrency_key=key,
        concurrency_limit=limit,
    )


def _check_cron(expression: object) -> str:
    if not isinstance(expression, str):
        raise ValueError(f"'cron' must be a string of five fields, not {type(expression).__name__}")
    fields = expression.split()
    if len(fields) != 5:
        raise ValueError(
            f"'cron' must have five fields (minute hour day-of-month month day-of-week), "
            f"got {len(fields)} in {expression!r}"
        )
    normal = " ".join(fields)
    try:
        # Parsing checks each field; a date that never comes ("0 0 30 2 *") fails on the first step.
        next(CronSim(normal, datetime(2000, 1, 1, tzinfo=UTC)))
    except (CronSimError, StopIteration) as exc:
        raise ValueError(f"bad 'cron' {expression!r}: {exc or 'it never fires'}") from None
    return normal


def _check_every(every: object) -> int:
    if isinstance(every, timedelta):
        seconds = every.total_seconds()
    elif isinstance(every, int | float) and not isinstance(every, bool):
        seconds = float(every)
    else:
        raise ValueError(f"'every' must be a whole number of seconds, not {type(every).__name__}")
    if not math.isfinite(seconds) or seconds != int(seconds):
        raise ValueError(f"'every' must be a whole number of seconds, got {every!r}")
    if not 1 <= seconds <= MAX_EVERY:
        raise ValueError(f"'every' must be from 1 to {MAX_EVERY} seconds, got {every!r}")
    return int(seconds)


def _check_timezone(zone: object) -> str:
    if zone is None:
        zone = settings.TIME_ZONE or "UTC"
    if not isinstance(zone, str):
        raise ValueError(f"'timezone' must be an IANA name such as 'Europe/Amsterdam', not {zone!r}")
    try:
        ZoneInfo(zone)
    except (ZoneInfoNotFoundError, ValueError):
        raise ValueError(f"unknown 'timezone' {zone!r} (an IANA name such as 'Europe/Amsterdam')") from None
    return zone
