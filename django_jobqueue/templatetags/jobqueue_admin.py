"""Template filters of the queue's admin pages."""

from __future__ import annotations

from django import template

from ..stats import format_age

register = template.Library()


@register.filter
def thousands(value: int | None) -> str:
    """``1234567`` -> ``1,234,567``, whatever the project's localisation settings."""
    return "—" if value is None else f"{value:,}"


@register.filter
def age(seconds: float | None) -> str:
    """Seconds as ``45 s``, ``12 min`` or ``3 h 5 min``."""
    return format_age(seconds)
