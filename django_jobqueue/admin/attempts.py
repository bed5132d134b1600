"""A job's or dead letter's attempts as a timeline: its history, then the attempt the row itself tells of.

The history (``queue/ops/history.py``) holds one entry per attempt that did
not end in done. A running job's current attempt and a done job's last one
are read off the row (``last_attempted_at``, ``locked_by``, ``finished_at``).
Every value is escaped by the template: an error is whatever a job raised.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from django.template.loader import render_to_string
from django.utils.dateparse import parse_datetime
from django.utils.safestring import SafeString

from ..models import DeadLetter, Job, JobStatus
from .display import EMPTY, seconds, timestamp

TEMPLATE = "admin/django_jobqueue/attempt_history.html"


@dataclass(frozen=True)
class AttemptRow:
    """One line of the timeline, as the template shows it."""

    attempt: str
    worker: str
    started: str
    duration: str
    outcome: str
    error: str


def timeline(row: Job | DeadLetter) -> SafeString:
    """The attempts of ``row``, oldest first, rendered by ``TEMPLATE``."""
    history = row.attempt_history if isinstance(row.attempt_history, list) else []
    rows = [_from_entry(entry) for entry in history if isinstance(entry, dict)]
    if isinstance(row, Job) and (current := _from_job(row)) is not None:
        rows.append(current)
    return render_to_string(TEMPLATE, {"attempts": rows, "empty": EMPTY})


def _from_entry(entry: dict[str, Any]) -> AttemptRow:
    duration = entry.get("duration")
    return AttemptRow(
        attempt=_text(entry.get("attempt")),
        worker=_text(entry.get("worker")),
        started=_started(entry.get("started_at")),
        duration=seconds(float(duration)) if isinstance(duration, int | float) else EMPTY,
        outcome=_text(entry.get("outcome")),
        error=str(entry.get("error") or ""),
    )


def _from_job(job: Job) -> AttemptRow | None:
    """The attempt the row tells of: running now, or the one that finished it as done."""
    if job.last_attempted_at is None or job.status not in (JobStatus.RUNNING, JobStatus.DONE):
        return None
    running = job.status == JobStatus.RUNNING
    duration = EMPTY
    if not running and job.finished_at is not None:
        duration = seconds((job.finished_at - job.last_attempted_at).total_seconds())
    return AttemptRow(
        attempt=str(job.attempts),
        worker=job.locked_by or EMPTY,
        started=timestamp(job.last_attempted_at),
        duration=duration,
        outcome="running" if running else "done",
        error="",
    )


def _started(value: Any) -> str:
    parsed = parse_datetime(value) if isinstance(value, str) else None
    return timestamp(parsed) if isinstance(parsed, datetime) else _text(value)


def _text(value: Any) -> str:
    return EMPTY if value is None or value == "" else str(value)
