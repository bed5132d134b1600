"""Filters of the job table named as MySQL's status indexes hold their columns.

On MySQL and MariaDB, an index that serves some statuses only keys its rows
by a generated column that is NULL outside them (migration 0019), and InnoDB
reads an index of a generated column only where a statement names it. These
filters name it there, and the plain column elsewhere (``Engine.keyed_column``,
``Engine.finished_at``, ``Engine.keyed_status``).
"""

from __future__ import annotations

from typing import Any

from django.db import connections, models
from django.db.models import CharField, DateTimeField, IntegerField, Q
from django.db.models.expressions import RawSQL
from django.db.models.lookups import Exact

from .models import Job, JobStatus
from .queue import engine_for


def finished_at(jobs: models.QuerySet[Job], **lookups: Any) -> models.QuerySet[Job]:
    """Done or cancelled ``jobs`` whose ``finished_at`` meets ``lookups``, named as the finished index
    holds it (``Engine.finished_at``)."""
    return _as_indexed(jobs, "finished_at", "finished_at", DateTimeField(), lookups)


def keyed_status(jobs: models.QuerySet[Job], **lookups: Any) -> models.QuerySet[Job]:
    """Keyed ``jobs`` whose ``status`` meets ``lookups``, named as the index of keyed jobs holds it
    (``Engine.keyed_status``)."""
    return _as_indexed(jobs, "keyed_status", "status", CharField(), lookups)


def _as_indexed(
    jobs: models.QuerySet[Job],
    attribute: str,
    field: str,
    output: models.Field[Any, Any],
    lookups: dict[str, Any],
) -> models.QuerySet[Job]:
    """``jobs`` filtered by ``lookups`` of ``field``, named as the engine's ``attribute`` says."""
    # MySQL reads an index of a generated column only where a statement names the column.
    column = getattr(engine_for(connections[jobs.db]), attribute)
    if column == field:
        return jobs.filter(**{f"{field}__{lookup}": value for lookup, value in lookups.items()})
    named = jobs.alias(indexed_column=RawSQL(column, [], output_field=output))
    return named.filter(**{f"indexed_column__{lookup}": value for lookup, value in lookups.items()})


def ready_half(using: str, keyed: bool, **conditions: Any) -> Q:
    """Ready jobs on database ``using`` without a concurrency key (``keyed`` False) or with one,
    that match ``conditions``, as the claim index of that half holds them.

    Jobs without a key and jobs with one are in different partial indexes
    (on MySQL, apart by the claim indexes' ``jq_ready_keyed``, 0 or 1 for a
    ready job and NULL for any other; named alone, since ``status`` beside it
    would let the optimizer weigh an index of every status against them).
    """
    flag = engine_for(connections[using]).keyed_column
    if flag:
        return Q(Exact(RawSQL(flag, [], output_field=IntegerField()), int(keyed)), **conditions)
    return Q(status=JobStatus.READY, concurrency_key__isnull=not keyed, **conditions)


def ready_jobs(using: str, **conditions: Any) -> Q:
    """Ready jobs on database ``using`` that match ``conditions``, as the two halves the claim's
    indexes hold: each side of the OR states its half whole, so that the database reads each
    through its index and adds them, instead of scanning the table."""
    return ready_half(using, False, **conditions) | ready_half(using, True, **conditions)
