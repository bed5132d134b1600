"""How the admin shows a job's values: pretty JSON, status pills, ages and deadlines."""

from __future__ import annotations

import json
from datetime import datetime
from typing import Any

from django.utils import timezone
from django.utils.html import format_html
from django.utils.safestring import SafeString

from ..conf import jobqueue_settings
from ..stats import format_age

# A payload of up to a megabyte would make a page nobody can read; show its start.
MAX_SHOWN_CHARS = 100_000


def pretty_json(value: Any) -> SafeString:
    text = json.dumps(value, indent=2, sort_keys=True, ensure_ascii=False)
    return preformatted(text)


REDACTED = "[redacted]"


def redacted(value: Any, keys: frozenset[str]) -> Any:
    """``value`` with the value of each dict key in ``keys`` (lower case), at any depth, replaced."""
    if isinstance(value, dict):
        return {
            key: REDACTED if str(key).lower() in keys else redacted(item, keys) for key, item in value.items()
        }
    if isinstance(value, list):
        return [redacted(item, keys) for item in value]
    return value


def pretty_payload(payload: Any) -> SafeString:
    """``pretty_json`` of a payload, less the values of ``JOBQUEUE["REDACT_PAYLOAD_KEYS"]``."""
    keys = frozenset(key.lower() for key in jobqueue_settings.REDACT_PAYLOAD_KEYS)
    return pretty_json(redacted(payload, keys) if keys else payload)


def preformatted(text: str) -> SafeString:
    if not text:
        return format_html('<span class="jq-quiet">{}</span>', "(none)")
    shown = text[:MAX_SHOWN_CHARS]
    more = f"\n… {len(text) - MAX_SHOWN_CHARS:,} more characters not shown" if len(text) > len(shown) else ""
    return format_html('<pre class="jq-pre">{}{}</pre>', shown, more)


def pill(label: str, kind: str) -> SafeString:
    return format_html('<span class="jq-pill jq-{}">{}</span>', kind, label)


def relative(when: datetime | None) -> str:
    """``in 4 min`` or ``3 s ago``, from the web server's clock (for reading only)."""
    if when is None:
        return ""
    seconds = (when - timezone.now()).total_seconds()
    return f"in {format_age(seconds)}" if seconds >= 0 else f"{format_age(-seconds)} ago"


def with_relative(when: datetime | None) -> SafeString | str:
    if when is None:
        return "—"
    local = timezone.localtime(when) if timezone.is_aware(when) else when
    return format_html(
        '{} <span class="jq-quiet">({})</span>', local.strftime("%Y-%m-%d %H:%M:%S"), relative(when)
    )
