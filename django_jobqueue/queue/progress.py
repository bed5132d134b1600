"""The check on a ``ctx.progress()`` report, done before it is kept or written.

A report is what the admin draws a bar from: ``current`` of ``total``, and
the share of one in the other. Its counts are bounded so that every figure
drawn from them is a finite float, whatever reads them (the admin, a
dashboard, the job's next attempt): ``current`` and ``total`` at most
``MAX_PROGRESS_COUNT``, and ``total`` at least ``MIN_PROGRESS_TOTAL``, so that
``current / total`` is at most 1e200. No count of real work comes near either
bound (there are about 1e80 atoms in the observable universe); a value past
them is a bug in the job, such as a division by a number near zero, and is
refused where the job can see it rather than stored for a page to trip on.
"""

from __future__ import annotations

import math
from typing import Any

from .validation import _JSON, _check_encodable

# Characters of a progress message kept; a longer one is cut, ending in "…". A
# message is a line for the admin's progress bar, not a log: cutting it is
# kinder than failing the job that reported it.
MAX_PROGRESS_MESSAGE_CHARS = 200
# The largest count, and the smallest total, a report may hold (see above).
# Python compares an int with a float exactly, without converting it: an int
# of any size is checked against them without overflowing.
MAX_PROGRESS_COUNT = 1e100
MIN_PROGRESS_TOTAL = 1e-100


def check_progress(current: object, total: object = None, message: object = "") -> dict[str, Any]:
    """Return ``{"current", "total", "message"}`` as a job's progress is stored.

    Raise ``TypeError`` for a count that is not an int or a float (a bool is
    not a count) or a message that is not a string, and ``ValueError`` for a
    count below 0, above ``MAX_PROGRESS_COUNT``, NaN or infinite, a ``total``
    below ``MIN_PROGRESS_TOTAL`` (0 among them), or a message with a NUL or a
    lone surrogate. ``current`` may exceed ``total``: totals are often
    estimates. A message over ``MAX_PROGRESS_MESSAGE_CHARS`` is cut.
    """
    _check_count(current, "current")
    if total is not None and (count := _check_count(total, "total")) < MIN_PROGRESS_TOTAL:
        raise ValueError(
            f"progress total must be above 0, at least {MIN_PROGRESS_TOTAL:g} "
            f"(or None when unknown), got {_shown(count)}"
        )
    if not isinstance(message, str):
        raise TypeError(f"progress message must be a str, got {type(message).__name__}")
    if len(message) > MAX_PROGRESS_MESSAGE_CHARS:
        message = message[: MAX_PROGRESS_MESSAGE_CHARS - 1] + "…"
    if "\x00" in message:
        raise ValueError("progress message holds a NUL character, which the database cannot store")
    try:
        message.encode("utf-8")  # in C: the common case never walks the characters
    except UnicodeEncodeError:
        _check_encodable(message, "progress message")
    return {"current": current, "total": total, "message": message}


def _check_count(value: object, what: str) -> int | float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise TypeError(f"progress {what} must be an int or a float, got {type(value).__name__}")
    # NaN fails both comparisons, infinity the second: one test refuses every count out of range.
    if not 0 <= value <= MAX_PROGRESS_COUNT:
        raise ValueError(
            f"progress {what} must be a finite number from 0 to {MAX_PROGRESS_COUNT:g}, got {_shown(value)}"
        )
    return value


def _shown(value: int | float) -> str:
    """``value`` for an error message, which stays one line: a huge int is told by its size.

    (Past 4,300 digits Python would not even write it out: ``repr`` raises.)
    """
    if isinstance(value, int) and value.bit_length() > 1000:
        return f"an int of about {round(value.bit_length() * math.log10(2)):,} digits"
    return repr(value)


def encode_progress(progress: dict[str, Any]) -> str:
    """``progress`` (as ``check_progress`` made it) as the JSON text a statement binds."""
    return _JSON.encode(progress)
