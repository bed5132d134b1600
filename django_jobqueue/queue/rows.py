"""Turn rows that raw statements return into ``Job`` instances.

Raw ``RETURNING`` rows skip the ORM's converters, so the two kinds of column
that need one (JSON and datetimes) are converted here, the same way on
PostgreSQL and SQLite.
"""

from __future__ import annotations

import json
import zoneinfo
from collections.abc import Callable, Iterable, Sequence
from datetime import UTC, datetime
from typing import Any

from django.conf import settings
from django.db import connections, models
from django.db.backends.base.base import BaseDatabaseWrapper
from django.utils.dateparse import parse_datetime

from ..models import Job
from .internals import init_signals_listened, instance_builder, instance_from_attrs

JOB_FIELDS: list[models.Field[Any, Any]] = list(Job._meta.concrete_fields)
JOB_COLUMNS: list[str] = [str(field.column) for field in JOB_FIELDS]
JOB_COLUMNS_SQL = ", ".join(JOB_COLUMNS)
_JOB_ATTNAMES = [field.attname for field in JOB_FIELDS]


def _to_json(value: Any) -> Any:
    if value == "[]":  # a job's worker_ids, most often: no need to parse it
        return []
    return json.loads(value) if isinstance(value, str | bytes) else value


def _to_float_or_none(value: Any) -> float | None:
    return None if value is None else float(value)


def to_datetime(value: Any) -> datetime | None:
    """A datetime column's value as Django's cursor returns it, as the ORM would return it.

    SQLite's is naive UTC, often text: parsed, and made aware (UTC) under ``USE_TZ``;
    PostgreSQL's is the ORM's already, and left as it is. A value read by
    psycopg's own cursor (``native.bound_cursor``) is ``datetime_as_read``'s.
    """
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


def _converter(field: models.Field[Any, Any]) -> Callable[[Any], Any] | None:
    if isinstance(field, models.JSONField):
        return _to_json
    if isinstance(field, models.DateTimeField):
        return to_datetime
    if isinstance(field, models.BooleanField):
        return bool  # MySQL's tinyint comes back 0 or 1
    if isinstance(field, models.FloatField):
        # SQLite returns 30 for 30.0; a nullable one (timeout) may be NULL.
        return _to_float_or_none if field.null else float
    return None


_CONVERTERS = [(index, conv) for index, f in enumerate(JOB_FIELDS) if (conv := _converter(f))]


def job_from_row(using: str, row: Sequence[Any]) -> Job:
    return jobs_from_rows(using, [row])[0]


def jobs_from_rows(using: str, rows: Iterable[Sequence[Any]]) -> list[Job]:
    build = _job_builder(using)  # once a batch: it asks whether init signals have receivers
    jobs = []
    for row in rows:
        values = list(row)
        for index, convert in _CONVERTERS:
            values[index] = convert(values[index])
        jobs.append(build(values))
    return jobs


_DATETIME_INDEXES = [index for index, f in enumerate(JOB_FIELDS) if isinstance(f, models.DateTimeField)]


def jobs_from_native_rows(using: str, rows: Iterable[Sequence[Any]]) -> list[Job]:
    """``jobs_from_rows`` for rows of every Job column read by ``native.bound_cursor``.

    psycopg reads datetimes aware in the session's time zone, which is the
    ORM's own under ``USE_TZ`` (UTC, as Django sets it), and jsonb in binary
    already decoded: a JSON string (a ``result`` of ``"ok"``, a hand-written
    ``trace_context``) must not be decoded a second time.
    """
    rows = list(rows)
    if not rows:
        return []
    connection = connections[using]
    run_at = rows[0][_RUN_AT_INDEX]
    ready = settings.USE_TZ and run_at.tzinfo == connection.timezone
    build = _job_builder(using)
    jobs = []
    for row in rows:
        values = list(row)
        if not ready:
            for index in _DATETIME_INDEXES:
                if values[index] is not None:
                    values[index] = datetime_as_read(connection, values[index])
        jobs.append(build(values))
    return jobs


_RUN_AT_INDEX = JOB_COLUMNS.index("run_at")


def loaded_job(using: str, values: list[Any]) -> Job:
    """``Job.from_db(using, <every field>, values)``, without a ``setattr`` per field."""
    return _job_builder(using)(values)


def _job_builder(using: str) -> Callable[[list[Any]], Job]:
    """What builds a ``Job`` loaded from ``using`` out of every field's value, in field order.

    A worker builds one for every job it claims, and ``Model.__init__`` is most
    of ``from_db``'s cost: the instance is the one ``from_db`` makes, built as
    ``internals.instance_builder`` says.
    """
    return instance_builder(Job, using, _JOB_ATTNAMES)


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
NEW_JOB_DEFAULTS = dict(zip(_JOB_ATTNAMES, _NEW_JOB_TEMPLATE, strict=True))
# What get_default() calls for a callable default (dict, list), called directly.
NEW_JOB_FRESH_BY_NAME = [(f.attname, f.default) for f in JOB_FIELDS if _default_maker(f)]


def jobs_from_values(
    using: str, rows: Iterable[dict[str, Any]], shared: dict[str, Any] | None = None
) -> list[Job]:
    """Build the ``Job`` of each row of one insert, in its order, from what the insert wrote.

    Cheaper than reading every column back: an enqueue of many jobs returns
    only what the database chose (id, times) and fills in the rest. Each of
    ``rows`` holds a job's own values by attname, ``shared`` the (immutable)
    values every row has; fields in neither hold their model default, which
    is what the insert wrote. Each job is the instance ``loaded_job`` makes,
    built from a dict instead of a full row: a batch of thousands of jobs pays
    a few microseconds a job, and checks for ``pre_init`` / ``post_init``
    receivers once (where there are some, ``loaded_job`` builds each job, so
    that they are sent).
    """
    shared = shared or {}
    if init_signals_listened(Job):
        return [loaded_job(using, _full_row({**shared, **values})) for values in rows]
    template = {**NEW_JOB_DEFAULTS, **shared}
    fresh = [(attname, make) for attname, make in NEW_JOB_FRESH_BY_NAME if attname not in shared]
    jobs = []
    for values in rows:
        # One copy of the template, then the job's own values: cheaper than filling the instance's dict.
        attrs = template.copy()
        for attname, make in fresh:
            attrs[attname] = make()
        attrs.update(values)
        jobs.append(instance_from_attrs(Job, using, attrs))
    return jobs


def _full_row(values: dict[str, Any]) -> list[Any]:
    row = _NEW_JOB_TEMPLATE.copy()
    for index, make in _NEW_JOB_FRESH:
        row[index] = make()
    for attname, value in values.items():
        row[_ATTNAME_INDEX[attname]] = value
    return row


def datetime_as_read(connection: BaseDatabaseWrapper, value: datetime) -> datetime:
    """An aware datetime read by psycopg's own cursor, as the ORM reads it back from ``connection``.

    Under ``USE_TZ``, aware in the connection's time zone (UTC unless the
    database sets its own ``TIME_ZONE``); without it, naive in ``TIME_ZONE``,
    the session's time zone.
    """
    if connection.timezone is not None:
        return value.astimezone(connection.timezone)
    return value.astimezone(zoneinfo.ZoneInfo(connection.timezone_name)).replace(tzinfo=None)
