"""What ``QueueClient``'s methods take: jobs as ``Job`` or id, durations, dead letters; checked here."""

from __future__ import annotations

from collections.abc import Iterable
from datetime import timedelta

from django.db.models import QuerySet

from ..models import DeadLetter, Job
from . import ops
from .validation import check_worker_id

JobRef = Job | int
Duration = timedelta | float | int
DeadLetters = QuerySet[DeadLetter] | Iterable[DeadLetter | int]


def fence(job: JobRef, worker_id: str) -> ops.Fence:
    """The claim a write after it expects: the ``Job``'s own (its token), or a bare id's owner."""
    worker_id = check_worker_id(worker_id)
    if isinstance(job, Job):
        return ops.Fence(as_id(job.pk), worker_id, job.claim_token)
    return ops.Fence(as_id(job), worker_id)


def check_limit(limit: object) -> int:
    if isinstance(limit, bool) or not isinstance(limit, int) or limit < 1:
        raise ValueError(f"limit must be a positive integer, got {limit!r}")
    return limit


def as_id(value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise ValueError(f"expected a Job or an integer id, got {type(value).__name__}")
    return value


def job_ids(jobs: Iterable[JobRef]) -> list[int]:
    return [as_id(job.pk if isinstance(job, Job) else job) for job in jobs]
