"""List filters that stay cheap on a million rows and never fail on a bad value.

Each filter checks its value before it reaches SQL; a value it does not know
shows a message and an empty list, never a database error.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from django.contrib import admin, messages
from django.db.models import Model, Q, QuerySet
from django.db.models.functions import Now
from django.http import HttpRequest

from ..column_values import distinct_values
from ..indexed import ready_jobs
from ..models import JobStatus
from ..queue.validation import check_name, check_queue
from .base import parse_id
from .display import read_batch


class CheckedFilter(admin.SimpleListFilter):
    """A filter whose value is checked first; a bad one empties the list, with a message."""

    def check(self, value: str) -> bool:
        return any(value == str(lookup) for lookup, _ in self.lookup_choices)

    def filter(self, queryset: QuerySet[Any], value: str) -> QuerySet[Any]:
        raise NotImplementedError

    def queryset(self, request: HttpRequest, queryset: QuerySet[Any]) -> QuerySet[Any]:
        value = self.value()
        if value is None:
            return queryset
        if not self.check(value):
            messages.warning(request, f"“{value[:80]}” is not a {self.title} this list can show.")
            return queryset.none()
        return self.filter(queryset, value)


class StatusFilter(CheckedFilter):
    title = "status"
    parameter_name = "status"

    def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[str, str]]:
        return [
            ("due", "ready: due now"),
            ("scheduled", "ready: scheduled"),
            (JobStatus.READY, "ready: all"),
            (JobStatus.RUNNING, "running"),
            (JobStatus.WAITING, "waiting"),
            (JobStatus.DONE, "done"),
            (JobStatus.CANCELLED, "cancelled"),
        ]

    def filter(self, queryset: QuerySet[Any], value: str) -> QuerySet[Any]:
        # The database's clock decides what is due, as it does for the claim.
        if value == "due":
            return queryset.filter(ready_jobs(queryset.db, run_at__lte=Now()))
        if value == "scheduled":
            return queryset.filter(ready_jobs(queryset.db, run_at__gt=Now()))
        if value == JobStatus.READY:
            # Due or not, spelt out: SQLite reads an OR through indexes only where
            # each side constrains an indexed column, and run_at is never NULL.
            return queryset.filter(
                ready_jobs(queryset.db, run_at__lte=Now()) | ready_jobs(queryset.db, run_at__gt=Now())
            )
        return queryset.filter(status=value)


class ValueFilter(CheckedFilter):
    """Filter by one column's value; the choices are the values present, found by a skip scan."""

    field_name: str

    def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[str, str]]:
        model: type[Model] = model_admin.model
        values = distinct_values(model, self.field_name, using=model_admin.client(request).using)
        current = self.value()
        if current and current not in values and self.is_valid(current):
            values.append(current)  # a value with no rows left still shows as chosen
        return [(value, value) for value in values]

    def validate(self, value: str) -> None:
        """Raise ``ValueError`` if ``value`` cannot be one of this column's values."""
        raise NotImplementedError

    def is_valid(self, value: str) -> bool:
        try:
            self.validate(value)
        except ValueError:
            return False
        return True

    def check(self, value: str) -> bool:
        return self.is_valid(value)

    def filter(self, queryset: QuerySet[Any], value: str) -> QuerySet[Any]:
        return queryset.filter(**{self.field_name: value})


class QueueFilter(ValueFilter):
    title = parameter_name = field_name = "queue"

    def validate(self, value: str) -> None:
        check_queue(value)


class NameFilter(ValueFilter):
    title = parameter_name = field_name = "name"

    def validate(self, value: str) -> None:
        check_name(value)


class FailedFilter(CheckedFilter):
    """When the dead letter failed, relative to the database's clock."""

    title = "failure date"
    parameter_name = "failed"
    ranges = {
        "1h": (timedelta(hours=1), None),
        "24h": (timedelta(days=1), None),
        "7d": (timedelta(days=7), None),
        "30d": (timedelta(days=30), None),
        "older": (None, timedelta(days=30)),
    }

    def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[str, str]]:
        return [
            ("1h", "in the last hour"),
            ("24h", "in the last 24 hours"),
            ("7d", "in the last 7 days"),
            ("30d", "in the last 30 days"),
            ("older", "more than 30 days ago"),
        ]

    def filter(self, queryset: QuerySet[Any], value: str) -> QuerySet[Any]:
        since, before = self.ranges[value]
        condition = Q()
        if since is not None:
            condition &= Q(failed_at__gte=Now() - since)
        if before is not None:
            condition &= Q(failed_at__lt=Now() - before)
        return queryset.filter(condition)


class BatchFilter(CheckedFilter):
    """The jobs (or dead letters) of one batch: ``?batch=ID``, as a batch's page links them.

    Thousands of batches make no list of choices, so the filter shows in the
    sidebar only while it is applied: the batch named by its id and callback,
    and *All* to clear it. A job keeps its batch for good, and so does its
    dead letter; both tables index the column for the jobs of a batch only.
    """

    title = "batch"
    parameter_name = "batch"

    def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[str, str]]:
        value = self.value()
        if value is None:
            return []
        # The one choice is the value given, so that Django shows it chosen (and runs
        # the filter): a value that cannot be a batch id then empties the list, with a message.
        batch_id = parse_id(value)
        if batch_id is None:
            return [(value, value[:80])]
        batch = read_batch(batch_id, model_admin.client(request).using)
        return [(value, f"#{batch_id} {batch.on_finish}" if batch else f"#{batch_id} (no such batch)")]

    def check(self, value: str) -> bool:
        return parse_id(value) is not None

    def filter(self, queryset: QuerySet[Any], value: str) -> QuerySet[Any]:
        return queryset.filter(batch_id=parse_id(value))
