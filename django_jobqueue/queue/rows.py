"""Turn rows that raw statements return into ``Job`` instances.

Raw ``RETURNING`` rows skip the ORM's converters, so the two kinds of column
that need one (JSON and datetimes) are converted here, the same way on
PostgreSQL and SQLite.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Sequence
from datetime import UTC, datetime
from typing import Any

from django.conf import settings
from django.db import models
from django.utils.dateparse import parse_datetime

from ..models import Job

JOB_FIELDS: list[models.Field[Any, Any]] = list(Job._meta.concrete_fields)
JOB_COLUMNS: list[str] = [str(field.column) for field in JOB_FIELDS]
JOB_COLUMNS_SQL = ", ".join(JOB_COLUMNS)
_JOB_ATTNAMES = [field.attname for field in JOB_FIELDS]


def _to_json(value: Any) -> Any:
    return json.loads(value) if isinstance(value, str | bytes) else value


def to_datetime(value: Any) -> datetime | None:
    """A datetime as a raw row holds it (SQLite: naive UTC text) -> aware under ``USE_TZ``."""
    if value is None:
        return None
    if isinstance(value, str):
        parsed = parse_datetime(value)
        if parsed is None:
            raise ValueError(f"not a datetime: {value!r}")
        value = parsed
    if settings.USE_TZ and value.tzinfo is None:
        value = value.replace(tzinfo=UTC)  # SQLite keeps naive UTC
    return value


def datetime_from_db(value: Any) -> datetime | None:
    """A datetime column's value as a raw statement returns it, as the ORM would return it."""
    return to_datetime(value)


def _converter(field: models.Field[Any, Any]) -> Callable[[Any], Any] | None:
    if isinstance(field, models.JSONField):
        return _to_json
    if isinstance(field, models.DateTimeField):
        return to_datetime
    if isinstance(field, models.FloatField):
        return float  # SQLite returns 30 for 30.0
    return None


_CONVERTERS = [(index, conv) for index, f in enumerate(JOB_FIELDS) if (conv := _converter(f))]


def job_from_row(using: str, row: Sequence[Any]) -> Job:
    values = list(row)
    for index, convert in _CONVERTERS:
        values[index] = convert(values[index])
    return Job.from_db(using, _JOB_ATTNAMES, values)


def jobs_from_rows(using: str, rows: Iterable[Sequence[Any]]) -> list[Job]:
    return [job_from_row(using, row) for row in rows]


def claim_order(job: Job) -> tuple[int, datetime, int]:
    """The order ``pull`` hands jobs out in: priority, then oldest run_at, then id."""
    return (-job.priority, job.run_at, job.pk)


def _default_maker(field: models.Field[Any, Any]) -> Callable[[], Any] | None:
    """A field's default as a fresh value per job, for a mutable default such as ``list``."""
    return field.get_default if field.has_default() and callable(field.default) else None


# A new job's values before the insert fills in its own: every field at its default.
_NEW_JOB_TEMPLATE = [field.get_default() for field in JOB_FIELDS]
_NEW_JOB_FRESH = [(index, make) for index, f in enumerate(JOB_FIELDS) if (make := _default_maker(f))]
_ATTNAME_INDEX = {attname: index for index, attname in enumerate(_JOB_ATTNAMES)}


def job_from_values(using: str, values: dict[str, Any]) -> Job:
    """Build the ``Job`` of a row just inserted from what the insert wrote (``values``, by attname).

    Cheaper than reading every column back: an enqueue of many jobs returns
    only what the database chose (id, times) and fills in the rest. Fields not
    in ``values`` hold their model default, which is what the insert wrote.
    """
    row = _NEW_JOB_TEMPLATE.copy()
    for index, make in _NEW_JOB_FRESH:
        row[index] = make()
    for attname, value in values.items():
        row[_ATTNAME_INDEX[attname]] = value
    return Job.from_db(using, _JOB_ATTNAMES, row)
