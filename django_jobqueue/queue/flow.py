"""Flow control's settings: ``JOBQUEUE["QUEUES"]``, read and checked in one place.

``QUEUES = {"emails": {"concurrency": 10, "rate_limit": "100/m"}}``: at most 10
jobs of ``emails`` run at once, and at most 100 start in any 60 seconds, across
every worker. A queue not named here has no limit. The claim that enforces them
is ``queue/ops/limited.py``; this module only parses (pure, no database).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from .validation import _check_encodable, check_queue

# The window of each rate unit, in seconds.
RATE_UNITS = {"s": 1, "m": 60, "h": 3600}
_RATE_RE = re.compile(r"\s*(\d+)\s*/\s*([smh])\s*")
# A fleet-wide cap above this is no cap a database queue could reach; a larger
# number is far more likely a mistake (a rate written as a concurrency).
MAX_QUEUE_CONCURRENCY = 100_000
MAX_RATE = 1_000_000
QUEUE_OPTIONS = frozenset({"concurrency", "rate_limit"})
# A job's own concurrency_limit (the key's limit).
MAX_CONCURRENCY_LIMIT = 10_000
MAX_CONCURRENCY_KEY_LENGTH = 255


@dataclass(frozen=True)
class Rate:
    """At most ``count`` starts in any window of ``window`` seconds."""

    count: int
    window: int

    def __str__(self) -> str:
        unit = {seconds: unit for unit, seconds in RATE_UNITS.items()}[self.window]
        return f"{self.count}/{unit}"


@dataclass(frozen=True)
class QueueLimits:
    """One queue's fleet-wide limits; ``None`` where there is none."""

    concurrency: int | None = None
    rate: Rate | None = None


def parse_rate(value: object, what: str = "rate_limit") -> Rate:
    """Parse ``"N/s"``, ``"N/m"`` or ``"N/h"``; raise ``ValueError`` naming ``what``."""
    match = _RATE_RE.fullmatch(value) if isinstance(value, str) else None
    if match is None:
        raise ValueError(f"{what} must be a string like '100/m' (N per s, m or h), not {value!r}")
    count = int(match.group(1))
    if not 1 <= count <= MAX_RATE:
        raise ValueError(f"{what} must allow 1 to {MAX_RATE:,} starts per window, not {count}")
    return Rate(count, RATE_UNITS[match.group(2)])


def parse_queue_limits(queue: str, options: object) -> QueueLimits:
    """One entry of ``QUEUES``; raise ``ValueError`` naming the queue and the option."""
    what = f"JOBQUEUE['QUEUES'][{queue!r}]"
    check_queue(queue)
    if not isinstance(options, Mapping):
        raise ValueError(f"{what} must be a dict like {{'concurrency': 10, 'rate_limit': '100/m'}}")
    unknown = sorted(set(options) - QUEUE_OPTIONS, key=str)
    if unknown:
        raise ValueError(f"{what} has unknown options {unknown}; it takes 'concurrency' and 'rate_limit'")
    concurrency = options.get("concurrency")
    if concurrency is not None and (
        isinstance(concurrency, bool)
        or not isinstance(concurrency, int)
        or not 1 <= concurrency <= MAX_QUEUE_CONCURRENCY
    ):
        raise ValueError(
            f"{what}['concurrency'] must be a whole number from 1 to {MAX_QUEUE_CONCURRENCY:,}, "
            f"not {concurrency!r}"
        )
    rate = options.get("rate_limit")
    return QueueLimits(concurrency, None if rate is None else parse_rate(rate, f"{what}['rate_limit']"))


def parse_queues(value: object) -> dict[str, QueueLimits]:
    """The whole ``QUEUES`` setting -> the queues that have a limit; raise ``ValueError``."""
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise ValueError("JOBQUEUE['QUEUES'] must be a dict of queue name -> options")
    limits: dict[str, QueueLimits] = {}
    for queue, options in value.items():
        if not isinstance(queue, str):
            raise ValueError(f"JOBQUEUE['QUEUES'] keys must be queue names, not {queue!r}")
        parsed = parse_queue_limits(queue, options)
        if parsed.concurrency is not None or parsed.rate is not None:
            limits[queue] = parsed
    return limits


def configured_limits() -> dict[str, QueueLimits]:
    """``JOBQUEUE["QUEUES"]`` as parsed; the system check has refused a bad one at start."""
    from ..conf import jobqueue_settings

    raw: Any = jobqueue_settings.QUEUES
    cached = _cache.get("limits")
    if cached is not None and cached[0] is raw:
        return cached[1]  # type: ignore[no-any-return]
    limits = parse_queues(raw)
    _cache["limits"] = (raw, limits)
    return limits


# The parsed setting, by the identity of the dict it came from: a claim asks each round.
_cache: dict[str, tuple[object, dict[str, QueueLimits]]] = {}


def check_concurrency_key(key: object) -> str:
    """A concurrency key: 1-255 characters, no control characters; raise ``ValueError``."""
    if not isinstance(key, str) or not key.strip():
        raise ValueError(f"concurrency_key must be a non-empty string, not {key!r}")
    if len(key) > MAX_CONCURRENCY_KEY_LENGTH:
        raise ValueError(f"concurrency_key must be at most {MAX_CONCURRENCY_KEY_LENGTH} characters")
    if any(ord(char) < 32 or ord(char) == 127 for char in key):
        raise ValueError(f"concurrency_key must not contain control characters: {key!r}")
    if not key.isascii():
        _check_encodable(key, "concurrency_key")  # as unique_key: no database stores a lone surrogate
    return key


def check_concurrency_limit(limit: object) -> int:
    """A key's limit: a whole number from 1 to 10,000; raise ``ValueError``."""
    if isinstance(limit, bool) or not isinstance(limit, int) or not 1 <= limit <= MAX_CONCURRENCY_LIMIT:
        raise ValueError(
            f"concurrency_limit must be a whole number from 1 to {MAX_CONCURRENCY_LIMIT:,}, not {limit!r}"
        )
    return limit
