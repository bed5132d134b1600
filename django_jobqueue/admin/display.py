"""How the admin shows a job's values: pretty JSON, status pills, dates, ages and deadlines.

Every page writes a date one way (``2026-12-01 10:30:04``, in the current time
zone; a list by how far away it is, the date in its tooltip), an empty value
one way (``—``) and a duration with its unit.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

from django.contrib import admin
from django.urls import reverse
from django.utils import timezone
from django.utils.html import format_html
from django.utils.safestring import SafeString

from ..conf import jobqueue_settings
from ..models import Batch
from ..queue.progress import MAX_PROGRESS_MESSAGE_CHARS
from ..stats import format_age

# A payload of up to a megabyte would make a page nobody can read; show its start.
MAX_SHOWN_CHARS = 100_000
# The one marker of a value that is not there, on every page (Django's own is "-").
EMPTY = "—"


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
        return format_html('<span class="jq-quiet">{}</span>', EMPTY)
    shown = text[:MAX_SHOWN_CHARS]
    more = f"\n… {len(text) - MAX_SHOWN_CHARS:,} more characters not shown" if len(text) > len(shown) else ""
    return format_html('<pre class="jq-pre">{}{}</pre>', shown, more)


def pill(label: str, kind: str, title: str = "") -> SafeString:
    if title:
        return format_html('<span class="jq-pill jq-{}" title="{}">{}</span>', kind, title, label)
    return format_html('<span class="jq-pill jq-{}">{}</span>', kind, label)


def timestamp(when: datetime | None) -> str:
    """``2026-12-01 10:30:04`` in the current time zone, or ``… UTC`` where that zone cannot reach.

    A stored year 1 or year 9999 has no local time a few hours either side of
    it (``OverflowError``); such a date is written in UTC, and says so.
    """
    if when is None:
        return EMPTY
    suffix = ""
    if timezone.is_aware(when):
        try:
            when = timezone.localtime(when)
        except OverflowError:
            when, suffix = when.astimezone(UTC), " UTC"
    # strftime("%Y") would write year 1 as "1" on glibc.
    return f"{when.year:04d}-{when:%m-%d %H:%M:%S}{suffix}"


def relative(when: datetime | None) -> str:
    """``in 4 min`` or ``3 s ago``, from the web server's clock (for reading only)."""
    if when is None:
        return EMPTY
    seconds = (when - timezone.now()).total_seconds()
    return f"in {format_age(seconds)}" if seconds >= 0 else f"{format_age(-seconds)} ago"


def in_list(when: datetime | None, what: str = "") -> SafeString | str:
    """A list's date: how far away it is, ``3 min ago``; the date itself in its tooltip.

    A list is read across, and the date would take twice the width. ``what``
    names the date in the tooltip (``finished at 2026-12-01 10:30:04``).
    """
    if when is None:
        return EMPTY
    return format_html('<span title="{}">{}</span>', f"{what} {timestamp(when)}".strip(), relative(when))


def with_relative(when: datetime | None) -> SafeString | str:
    if when is None:
        return EMPTY
    return format_html('{} <span class="jq-quiet">({})</span>', timestamp(when), relative(when))


def date_column(field: str, description: str, what: str) -> Callable[[Any, Any], SafeString | str]:
    """A list column of a row's date ``field``, ``in_list``: its tooltip names the date ``what``."""

    @admin.display(description=description)
    def column(admin_page: Any, row: Any) -> SafeString | str:
        return in_list(getattr(row, field), what)

    return column


def date_field(field: str, description: str) -> Callable[[Any, Any], SafeString | str]:
    """A detail page's field of a row's date ``field``, ``with_relative``."""

    @admin.display(description=description)
    def shown(admin_page: Any, row: Any) -> SafeString | str:
        return with_relative(getattr(row, field))

    return shown


def seconds(value: float | None) -> str:
    """A duration in seconds with its unit: ``30 s``, ``2.5 s``."""
    if value is None:
        return EMPTY
    return f"{value:,.3f}".rstrip("0").rstrip(".") + " s"


def time_limit(value: float | None) -> str:
    """A job's per-attempt time limit: its seconds, or "no limit" for NULL."""
    return "no limit" if value is None else seconds(value)


def concurrency_limit(value: int | None) -> str:
    """A job's concurrency limit: how many with its key run at once; ``—`` for a job without a key."""
    return EMPTY if value is None else f"{value:,} at once"


def linked_batch(batch_id: int | None, using: str, site_name: str) -> SafeString | str:
    """A job's or a dead letter's batch, linked to its page: ``#12 imports.done (running)``; ``—`` for none.

    The batch is named by its id and its callback's job, as the batch list shows it.
    """
    if batch_id is None:
        return EMPTY
    batch = read_batch(batch_id, using)
    if batch is None:
        return format_html("#{} (no such batch)", batch_id)
    url = reverse("admin:django_jobqueue_batch_change", args=[batch_id], current_app=site_name)
    state = "running" if batch.finished_at is None else "finished"
    return format_html('<a href="{}">#{} {}</a> ({})', url, batch_id, batch.on_finish, state)


def read_batch(batch_id: int, using: str) -> Batch | None:
    """What names batch ``batch_id`` where a job or a dead letter links it: its callback and its end."""
    return Batch.objects.using(using).filter(pk=batch_id).only("on_finish", "finished_at").first()


def slots(concurrency: int, minimum: int | None, maximum: int | None) -> str:
    """A worker's slots: ``4``; started with ``--concurrency 2:8``, ``4 (range 2–8)``.

    A range that does not hold the count is not this worker's: a worker of a
    release before the range's columns took over the row of a newer one of
    its id, and left them. Its count is shown alone.
    """
    if minimum is None or maximum is None or minimum == maximum or not minimum <= concurrency <= maximum:
        return f"{concurrency:,}"
    return f"{concurrency:,} (range {minimum:,}–{maximum:,})"


def cut(text: str | None) -> SafeString | str:
    """A list cell's text, cut to the column's width by CSS, whole in its tooltip."""
    if not text:
        return EMPTY
    return format_html('<span class="jq-cut" title="{}">{}</span>', text, text)


def cut_column(field: str, description: str = "") -> Callable[[Any, Any], SafeString | str]:
    """A list column of a row's ``field``, ``cut`` to its width; headed ``description``, else ``field``."""

    @admin.display(description=description or field)
    def column(admin_page: Any, row: Any) -> SafeString | str:
        return cut(getattr(row, field))

    return column


def plural(count: int, noun: str) -> str:
    """``1 job``, ``9,017 jobs``."""
    return f"{count:,} {noun}" if count == 1 else f"{count:,} {noun}s"


def progress_label(progress: Any) -> str:
    """A job's ``ctx.progress()`` report in words: ``42 / 100 (42%) — copying``; ``—`` for none.

    A ``current`` past ``total`` (an estimate that fell short) shows 100%.
    """
    parts = _progress_parts(progress)
    if parts is None:
        return EMPTY
    current, total, message = parts
    text = _number(current)
    if total is not None:
        text += f" / {_number(total)} ({_percent(current, total)}%)"
    return f"{text} — {message}" if message else text


def progress_bar(progress: Any) -> SafeString | str:
    """A ``<progress>`` bar with its label (the message escaped: it is the job's data); ``—`` for none.

    Without a total the bar is indeterminate: it shows work goes on, not how much is left.
    """
    parts = _progress_parts(progress)
    if parts is None:
        return EMPTY
    label = progress_label(progress)
    return format_html(
        '<span class="jq-progress-row">{} <span class="jq-progress-label">{}</span></span>',
        _bar(parts, label),
        label,
    )


def progress_in_list(progress: Any) -> SafeString | str:
    """A list cell's progress: a small bar and the share done, ``42%`` (the count, without a total).

    The whole label, counts and message, is the tooltip: a list is read
    across, and a message as long as a sentence would take the row's width.
    """
    parts = _progress_parts(progress)
    if parts is None:
        return EMPTY
    current, total, _message = parts
    label = progress_label(progress)
    short = f"{_percent(current, total)}%" if total is not None else _number(current)
    return progress_cell(_bar(parts, label), short, label)


def progress_cell(bar: SafeString, short: str, label: str) -> SafeString:
    """A list cell's ``bar`` and its ``short`` label, ``42%``; the whole ``label`` is its tooltip."""
    return format_html(
        '<span class="jq-progress-row" title="{}">{} <span class="jq-progress-label">{}</span></span>',
        label,
        bar,
        short,
    )


def _bar(parts: tuple[float, float | None, str], label: str) -> SafeString:
    current, total, _message = parts
    if total is None:
        return format_html('<progress class="jq-progress" aria-label="{}"></progress>', label)
    return format_html(
        '<progress class="jq-progress" max="{}" value="{}" aria-label="{}"></progress>',
        total,
        min(current, total),
        label,
    )


def _progress_parts(progress: Any) -> tuple[float, float | None, str] | None:
    """``(current, total, message)`` of a stored report, as much of it as can be shown; None for none.

    The column is JSON anyone may write (an older release, a custom worker, a
    migration, SQL by hand), so nothing in it is trusted: a report without a
    ``current`` that is a count shows as no progress; a ``total`` that is not
    one (negative, 0, too large for a float) as an unknown total; a message
    that is not a string as none, and a long one cut as ``ctx.progress()``
    cuts it. Never an error page.
    """
    if not isinstance(progress, dict):
        return None
    current, total = _count(progress.get("current")), _count(progress.get("total"))
    if current is None:
        return None
    if total is not None and total <= 0:
        total = None
    message = progress.get("message")
    if not isinstance(message, str):
        message = ""
    elif len(message) > MAX_PROGRESS_MESSAGE_CHARS:
        message = message[: MAX_PROGRESS_MESSAGE_CHARS - 1] + "…"
    return current, total, message


def _count(value: Any) -> float | None:
    """``value`` if it is a count a float can hold (an int stays an int, exact), else None."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    try:
        finite = math.isfinite(value)
    except OverflowError:  # an int past a float's range
        return None
    return value if finite and value >= 0 else None


def _number(value: float) -> str:
    # Past a quadrillion, or below a hundredth, digits say less than an exponent: 1e+20, 1e-10.
    if value and not 0.01 <= value < 1e15:
        return f"{float(value):.6g}"
    if isinstance(value, float) and not value.is_integer():
        return f"{value:,.2f}".rstrip("0").rstrip(".")
    return f"{int(value):,}"


def _percent(current: float, total: float) -> int:
    """The share of ``total`` done, floored, so that 99.6% never reads "100%" while work is left."""
    if current >= total:
        return 100
    if isinstance(current, int) and isinstance(total, int):
        return current * 100 // total  # exact, however large
    # current / total is below 1 (current * 100 could overflow); min(): a rounding up to 1.0.
    return min(99, int(current / total * 100))
