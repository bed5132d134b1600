"""The admin's log of what operators did: one ``LogEntry`` per job, dead letter, schedule or queue changed.

Entries are written in bulk, a batch at a time, so that an action over
thousands of rows logs each one without holding them all in memory.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import cast

from django.contrib.admin.models import ADDITION, CHANGE, DELETION, LogEntry
from django.contrib.contenttypes.models import ContentType
from django.db.models import Model, QuerySet
from django.http import HttpRequest

from ..conf import queue_databases
from ..models import DeadLetter, Job, JobStatus, QueueState, Schedule
from ..queue import DeletedDeadLetter, JobChange, RetriedDeadLetter
from .databases import shown_database


def log_job_changes(request: HttpRequest, changes: Sequence[JobChange], status: str, message: str) -> None:
    """Log ``message`` against each job changed; ``status`` is the state it is in now."""
    jobs = [Job(pk=c.job_id, name=c.name, queue=c.queue, status=status) for c in changes]
    _log(request, CHANGE, [(job, message) for job in jobs])


def log_retried(request: HttpRequest, retried: Sequence[RetriedDeadLetter]) -> None:
    """Log each retried dead letter as the job it became, which links to that job's page."""
    _log(
        request,
        ADDITION,
        [
            (
                Job(pk=r.job_id, name=r.name, queue=r.queue, status=JobStatus.READY),
                f"Retried from dead letter #{r.dead_letter_id} (it was job #{r.old_job_id}).",
            )
            for r in retried
        ],
    )


def log_deleted(request: HttpRequest, deleted: Sequence[DeletedDeadLetter]) -> None:
    letters = [DeadLetter(pk=d.dead_letter_id, job_id=d.old_job_id, name=d.name) for d in deleted]
    _log(request, DELETION, [(letter, "") for letter in letters])


def log_schedule_changes(request: HttpRequest, schedules: Sequence[Schedule], message: str) -> None:
    """Log ``message`` (paused, resumed) against each schedule row changed."""
    _log(request, CHANGE, [(schedule, message) for schedule in schedules])


def log_queue_state(request: HttpRequest, row: QueueState, message: str) -> None:
    """Log ``message`` (paused, resumed) against the queue's ``QueueState`` row."""
    _log(request, CHANGE, [(row, message)])


def log_ran_now(request: HttpRequest, schedule: Schedule, job: Job, receipt: str) -> None:
    """Log a *run now*: against the schedule, with the form's ``receipt``, and as the job it added."""
    _log(
        request,
        CHANGE,
        [(schedule, f"Ran now: job #{job.pk} ({receipt}).")],
    )
    _log(request, ADDITION, [(job, f"Enqueued by “run now” of schedule “{schedule.name}”.")])


def schedule_receipts(schedule_id: int, receipt: str) -> QuerySet[LogEntry]:
    """The log entries of a *run now* of schedule row ``schedule_id`` made with ``receipt``."""
    content_type = ContentType.objects.get_for_model(Schedule, for_concrete_model=False)
    return LogEntry.objects.filter(
        content_type_id=content_type.pk, object_id=str(schedule_id), change_message__contains=f"({receipt})"
    )


def _log(request: HttpRequest, flag: int, entries: Sequence[tuple[Model, str]]) -> None:
    # With several queue databases a row's id names a row in each; an entry says whose it was.
    where = f"On database “{shown_database(request)}”. " if len(queue_databases()) > 1 else ""
    LogEntry.objects.bulk_create(
        [
            LogEntry(
                user_id=cast(int, request.user.pk),
                content_type_id=ContentType.objects.get_for_model(obj, for_concrete_model=False).pk,
                object_id=str(obj.pk),
                object_repr=str(obj)[:200],
                action_flag=flag,
                change_message=f"{where}{message}".strip(),
            )
            for obj, message in entries
        ]
    )
