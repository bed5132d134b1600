"""Template filters of the queue's admin pages."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from django import template
from django.utils.safestring import SafeString

from ..admin.display import EMPTY, progress_bar
from ..admin.display import slots as format_slots
from ..admin.display import timestamp as format_timestamp
from ..stats import format_age

register = template.Library()


@register.filter
def thousands(value: int | None) -> str:
    """``1234567`` -> ``1,234,567``, whatever the project's localisation settings."""
    return EMPTY if value is None else f"{value:,}"


@register.filter
def age(seconds: float | None) -> str:
    """Seconds as ``45 s``, ``12 min`` or ``3 h 5 min``."""
    return format_age(seconds)


@register.filter
def timestamp(value: datetime | None) -> str:
    """A date as every admin page writes it: ``2026-12-01 10:30:04``, in the current time zone."""
    return format_timestamp(value)


@register.filter
def job_progress(value: Any) -> SafeString | str:
    """A job's stored ``ctx.progress()`` report as a bar with its label (``display.progress_bar``)."""
    return progress_bar(value)


@register.filter
def slots(worker: Any) -> str:
    """A worker's slots, with its ``--concurrency MIN:MAX`` range: ``4 (range 2–8)`` (``display.slots``)."""
    return format_slots(worker.concurrency, worker.min_concurrency, worker.max_concurrency)
