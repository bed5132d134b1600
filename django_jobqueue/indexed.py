"""Filters of the job table named as MySQL's status indexes hold their columns.

On MySQL and MariaDB, an index that serves some statuses only keys its rows
by a generated column that is NULL outside them (migration 0019), and InnoDB
reads an index of a generated column only where a statement names it. These
filters name it there, and the plain column elsewhere (``Engine.finished_at``,
``Engine.keyed_status``).
"""

from __future__ import annotations

from typing import Any

from django.db import connections, models
from django.db.models import CharField, DateTimeField
from django.db.models.expressions import RawSQL

from .models import Job
from .queue import engine_for


def finished_at(jobs: models.QuerySet[Job], **lookups: Any) -> models.QuerySet[Job]:
    """Done or cancelled ``jobs`` whose ``finished_at`` meets ``lookups``, named as the finished index
    holds it (``Engine.finished_at``)."""
    return _as_indexed(jobs, "finished_at", DateTimeField(), lookups)


def keyed_status(jobs: models.QuerySet[Job], **lookups: Any) -> models.QuerySet[Job]:
    """Keyed ``jobs`` whose ``status`` meets ``lookups``, named as the index of keyed jobs holds it
    (``Engine.keyed_status``)."""
    return _as_indexed(jobs, "status", CharField(), lookups, engine_column="keyed_status")


def _as_indexed(
    jobs: models.QuerySet[Job],
    field: str,
    output: models.Field[Any, Any],
    lookups: dict[str, Any],
    engine_column: str | None = None,
) -> models.QuerySet[Job]:
    # MySQL reads an index of a generated column only where a statement names the column.
    column = getattr(engine_for(connections[jobs.db]), engine_column or field)
    if column == field:
        return jobs.filter(**{f"{field}__{lookup}": value for lookup, value in lookups.items()})
    named = jobs.alias(indexed_column=RawSQL(column, [], output_field=output))
    return named.filter(**{f"indexed_column__{lookup}": value for lookup, value in lookups.items()})
