"""Checks on everything a caller hands to the queue, done before its SQL.

Each check raises ``ValueError`` (or ``JobPayloadError`` for payloads) with a
message that names the bad value, so a bad call writes nothing and leaves the
caller's transaction usable. (A batch that streams through COPY is checked
job by job as it goes; a bad job aborts the COPY, which rolls back.)
"""

from __future__ import annotations

import json
import math
import re
import unicodedata
from collections.abc import Iterable, Mapping
from datetime import UTC, datetime, timedelta
from typing import Any

from django.conf import settings
from django.utils import timezone

from ..exceptions import JobPayloadError
from .internals import flat_json_encoder

MIN_PRIORITY, MAX_PRIORITY = -100, 100
MAX_NAME_LENGTH = 200
MAX_QUEUE_LENGTH = 63
MAX_UNIQUE_KEY_LENGTH = 255
MAX_WORKER_ID_LENGTH = 255
# A worker row's slot counts are integer columns.
MAX_SLOTS = 2**31 - 1
MAX_ATTEMPTS_LIMIT = 1_000_000
# Far enough for any real schedule, near enough that now + delay never overflows.
MAX_DELAY_SECONDS = 100 * 366 * 86400.0
MAX_PAYLOAD_DEPTH = 100
# The heartbeat extends a claim every third of its timeout, and a beat is a
# database round trip that may queue behind others: below a second, a busy
# worker's beats come too late and every job it runs is handed out again.
MIN_VISIBILITY_TIMEOUT = 1.0
# An attempt's time limit: a week is longer than any job a queue should run in
# one attempt; a larger value is far more likely a unit mistake (milliseconds).
MAX_TIMEOUT_SECONDS = 7 * 86400.0
# A run_at before the Unix epoch has no meaning for a queue (fire times count
# from it); one beyond MAX_DELAY_SECONDS from now cannot be shown in every
# time zone (year 9999 overflows when converted).
MIN_RUN_AT = datetime(1970, 1, 1, tzinfo=UTC)
# Below 10 ms a worker does little but poll (one transaction each); above a
# day a timer's wait overflows the platform's limit.
MIN_POLL_INTERVAL = 0.01
MAX_POLL_INTERVAL = 86400.0

_QUEUE_RE = re.compile(r"[A-Za-z0-9_\-.:]+")
_CONTROL_RE = re.compile(r"[\x00-\x1f\x7f]")
# Unicode categories refused in names: controls, format characters (zero-width
# and bidi marks that make two names look alike), lone surrogates, and line
# and paragraph separators.
_INVISIBLE_CATEGORIES = frozenset({"Cc", "Cf", "Cs", "Zl", "Zp"})
# The one JSON encoding of payloads and results: compact, non-ASCII kept as is,
# NaN and Infinity refused. One encoder for every call spares json.dumps
# building a new one each time it is given options.
_JSON = json.JSONEncoder(ensure_ascii=False, allow_nan=False, separators=(",", ":"))
# The same encoding of a flat payload (no container inside), called directly:
# JSONEncoder.encode builds this C encoder anew for every call, half the cost
# of encoding a small payload. None where CPython's accelerator is missing;
# _JSON does the work then.
_FLAT_JSON = flat_json_encoder(_JSON)


def check_name(name: object) -> str:
    """Return ``name`` if it is a valid job name: 1-200 printable characters."""
    if not isinstance(name, str):
        raise ValueError(f"job name must be a string, not {type(name).__name__}")
    if not name or len(name) > MAX_NAME_LENGTH:
        raise ValueError(f"job name must be 1 to {MAX_NAME_LENGTH} characters, got {len(name)}")
    if _CONTROL_RE.search(name) or name != name.strip():
        raise ValueError(f"job name {name!r} holds control characters or surrounding spaces")
    if not name.isascii():
        _check_visible(name, "job name")
    return name


def _check_visible(text: str, what: str) -> None:
    """Raise ``ValueError`` naming the first character of ``text`` that cannot be seen or stored."""
    for position, char in enumerate(text):
        category = unicodedata.category(char)
        if category == "Cs":
            raise _lone_surrogate(text, what, char, position)
        if category in _INVISIBLE_CATEGORIES:
            label = unicodedata.name(char, "control character")
            raise ValueError(
                f"{what} {text!r} holds the invisible character U+{ord(char):04X} ({label}) "
                f"at position {position}; names must be visible text"
            )


def check_queue(queue: object) -> str:
    """Return ``queue`` if it is 1-63 letters, digits, ``_``, ``-``, ``.`` or ``:``."""
    if not isinstance(queue, str):
        raise ValueError(f"queue name must be a string, not {type(queue).__name__}")
    if not queue or len(queue) > MAX_QUEUE_LENGTH:
        raise ValueError(f"queue name must be 1 to {MAX_QUEUE_LENGTH} characters, got {len(queue)}")
    if not _QUEUE_RE.fullmatch(queue):
        raise ValueError(f"queue name {queue!r} may hold only letters, digits, '_', '-', '.' and ':'")
    return queue


def check_priority(priority: object) -> int:
    """Return ``priority`` if it is an integer from -100 to 100."""
    if isinstance(priority, bool) or not isinstance(priority, int):
        raise ValueError(f"priority must be an integer, not {type(priority).__name__}")
    if not MIN_PRIORITY <= priority <= MAX_PRIORITY:
        raise ValueError(f"priority must be from {MIN_PRIORITY} to {MAX_PRIORITY}, got {priority}")
    return priority


def check_max_attempts(max_attempts: object) -> int:
    if isinstance(max_attempts, bool) or not isinstance(max_attempts, int):
        raise ValueError(f"max_attempts must be an integer, not {type(max_attempts).__name__}")
    if not 1 <= max_attempts <= MAX_ATTEMPTS_LIMIT:
        raise ValueError(f"max_attempts must be from 1 to {MAX_ATTEMPTS_LIMIT}, got {max_attempts}")
    return max_attempts


def _as_seconds(value: object, what: str, ceiling: str) -> float:
    """``value``, a ``timedelta`` or a number (not a bool), in seconds; ``ceiling`` words its bound."""
    if isinstance(value, timedelta):
        return value.total_seconds()
    if isinstance(value, int | float) and not isinstance(value, bool):
        try:
            return float(value)
        except OverflowError:  # an int too large for a float
            raise ValueError(f"{what} of {len(str(value))} digits is more than {ceiling}") from None
    raise ValueError(f"{what} must be a timedelta or seconds, not {type(value).__name__}")


def to_seconds(value: object, what: str, *, allow_zero: bool = True) -> float:
    """Return a duration given as a ``timedelta`` or a number of seconds, in seconds."""
    seconds = _as_seconds(value, what, "100 years")
    if not math.isfinite(seconds) or seconds < 0:
        raise ValueError(f"{what} must be 0 seconds or more, got {seconds}")
    if seconds == 0 and not allow_zero:
        raise ValueError(f"{what} must be more than 0 seconds")
    if seconds > MAX_DELAY_SECONDS:
        raise ValueError(f"{what} of {seconds:.0f} seconds is more than 100 years")
    return seconds


def check_visibility_timeout(value: object, what: str = "visibility_timeout") -> float:
    """Return a visibility timeout in seconds: from ``MIN_VISIBILITY_TIMEOUT`` to 100 years."""
    seconds = to_seconds(value, what, allow_zero=False)
    if seconds < MIN_VISIBILITY_TIMEOUT:
        raise ValueError(
            f"{what} must be at least {MIN_VISIBILITY_TIMEOUT:g} second, got {seconds:g}: "
            "a shorter claim expires before the heartbeat can extend it"
        )
    return seconds


def check_timeout(value: object, what: str = "timeout") -> float:
    """Return an attempt's time limit in seconds: more than 0, at most ``MAX_TIMEOUT_SECONDS``.

    ``value`` is a ``timedelta`` or a number of seconds. Raise ``ValueError``
    naming ``what`` otherwise (NaN and infinity included).
    """
    seconds = _as_seconds(value, what, "7 days")
    if not math.isfinite(seconds):
        raise ValueError(f"{what} must be a finite number of seconds, got {value}")
    if seconds <= 0:
        raise ValueError(f"{what} must be more than 0 seconds, got {seconds:g}")
    if seconds > MAX_TIMEOUT_SECONDS:
        raise ValueError(
            f"{what} must be at most {MAX_TIMEOUT_SECONDS:.0f} seconds (7 days), got {seconds:.0f}"
        )
    return seconds


def check_poll_interval(value: object, what: str = "poll_interval") -> float:
    """Return a poll interval in seconds: a number from 0.01 to 86400."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ValueError(f"{what} must be a number of seconds, not {type(value).__name__}")
    try:
        seconds = float(value)
    except OverflowError:  # an int too large for a float
        seconds = math.inf
    if not MIN_POLL_INTERVAL <= seconds <= MAX_POLL_INTERVAL:  # False for NaN too
        raise ValueError(
            f"{what} must be from {MIN_POLL_INTERVAL:g} to {MAX_POLL_INTERVAL:g} seconds, got {value}"
        )
    return seconds


def check_run_at(run_at: object) -> datetime:
    """Return ``run_at`` if it is a datetime from 1970 to 100 years from now (aware under ``USE_TZ``)."""
    if not isinstance(run_at, datetime):
        raise ValueError(f"run_at must be a datetime, not {type(run_at).__name__}")
    if settings.USE_TZ and timezone.is_naive(run_at):
        raise ValueError("run_at must be timezone-aware when USE_TZ is on")
    aware = timezone.is_aware(run_at)
    earliest = MIN_RUN_AT if aware else MIN_RUN_AT.replace(tzinfo=None)
    # Not a lease decision, only a sanity bound: the local clock is good enough.
    # Without USE_TZ, timezone.now() is naive while run_at may still be aware: compare like with like.
    latest = (datetime.now(UTC) if aware else datetime.now()) + timedelta(seconds=MAX_DELAY_SECONDS)
    try:
        in_range = earliest <= run_at <= latest
    except OverflowError:  # an offset that pushes the time past year 1 or 9999
        in_range = False
    if not in_range:
        raise ValueError(f"run_at {run_at.isoformat()} must be from 1970 to 100 years from now")
    return run_at


def check_unique_key(key: object) -> str:
    if not isinstance(key, str) or not key or len(key) > MAX_UNIQUE_KEY_LENGTH:
        raise ValueError(f"unique_key must be a string of 1 to {MAX_UNIQUE_KEY_LENGTH} characters")
    if "\x00" in key:
        raise ValueError("unique_key must not hold NUL characters")
    if not key.isascii():
        _check_encodable(key, "unique_key")
    return key


def _check_encodable(text: str, what: str) -> None:
    """Raise ``ValueError`` if ``text`` holds a lone surrogate, which no database can store."""
    for position, char in enumerate(text):
        if unicodedata.category(char) == "Cs":
            raise _lone_surrogate(text, what, char, position)


def _lone_surrogate(text: str, what: str, char: str, position: int) -> ValueError:
    return ValueError(
        f"{what} {text!r} holds a lone surrogate (U+{ord(char):04X}) at position {position}, "
        "which is not valid Unicode and cannot be stored"
    )


def check_worker_id(worker_id: object) -> str:
    if not isinstance(worker_id, str) or not worker_id or len(worker_id) > MAX_WORKER_ID_LENGTH:
        raise ValueError(f"worker_id must be a string of 1 to {MAX_WORKER_ID_LENGTH} characters")
    if _CONTROL_RE.search(worker_id):
        raise ValueError("worker_id must not hold control characters")
    if not worker_id.isascii():
        _check_encodable(worker_id, "worker_id")
    return worker_id


def check_concurrency_range(value: object) -> tuple[int, int]:
    """A worker's ``--concurrency MIN:MAX`` as ``(MIN, MAX)``: whole numbers, 1 <= MIN <= MAX."""
    if not isinstance(value, tuple | list) or len(value) != 2:
        raise ValueError(f"concurrency_range must be a pair (MIN, MAX), not {value!r}")
    low, high = value
    if any(isinstance(bound, bool) or not isinstance(bound, int) for bound in (low, high)):
        raise ValueError(f"concurrency_range must be two whole numbers, not {value!r}")
    if not 1 <= low <= high <= MAX_SLOTS:
        raise ValueError(f"concurrency_range must have 1 <= MIN <= MAX <= {MAX_SLOTS:,}, got {low}:{high}")
    return low, high


def encode_payload_and_copy(payload: object, max_bytes: int) -> tuple[str, dict[str, Any] | None]:
    """Return ``payload`` as JSON text, or raise ``JobPayloadError`` saying what is wrong; and a copy.

    A payload is a JSON object with string keys whose values JSON carries
    exactly: no NaN or Infinity (JSON has none), no NUL characters (PostgreSQL
    cannot store them), no objects that a serializer would silently turn into
    something else.

    A batch returns its jobs with their payloads as the database would return
    them; for a flat payload (string keys to strings, numbers, booleans and
    None) a shallow copy is that, for a tenth of the cost of decoding. None
    for any other payload.
    """
    if not isinstance(payload, dict):
        raise JobPayloadError(f"payload must be a JSON object (a dict), not {type(payload).__name__}")
    flat = _is_flat_and_clean(payload)
    if not flat:
        _check_json_value(payload, "payload")
    try:
        text = "".join(_FLAT_JSON(payload, 0)) if flat and _FLAT_JSON is not None else _JSON.encode(payload)
        # ASCII text is one byte a character; other text is measured (and checked) as UTF-8.
        size = len(text) if text.isascii() else len(text.encode("utf-8"))
    except (ValueError, UnicodeEncodeError) as exc:
        raise JobPayloadError(f"payload cannot be stored as JSON: {exc}") from None
    if size > max_bytes:
        raise JobPayloadError(f"payload is {size} bytes of JSON, more than MAX_PAYLOAD_BYTES ({max_bytes})")
    return text, dict(payload) if flat else None


def encode_result(result: object) -> str | None:
    """Return a job's return value as JSON text (``None`` stays SQL NULL)."""
    if result is None:
        return None
    _check_json_value(result, "result")
    try:
        return _JSON.encode(result)
    except (ValueError, UnicodeEncodeError) as exc:
        raise JobPayloadError(f"result cannot be stored as JSON: {exc}") from None


def _is_flat_and_clean(mapping: dict[Any, Any]) -> bool:
    """True for the common payload, string keys to plain values, that needs no deeper check.

    Anything else (nested values, or something to refuse) goes through
    ``_check_json_value``, which names what is wrong; this only spares the
    common case that walk and its paths.
    """
    for key, value in mapping.items():
        if type(key) is not str or "\x00" in key:
            return False
        kind = type(value)
        if kind is str:
            if "\x00" in value:
                return False
        elif kind is float:
            if not math.isfinite(value):
                return False
        elif kind is not int and kind is not bool and value is not None:
            return False
    return True


def _check_json_value(root: object, root_path: str) -> None:
    # Iterative, so that a deeply nested value gives a clear error, not a RecursionError.
    stack: list[tuple[object, str, int]] = [(root, root_path, 0)]
    while stack:
        value, path, depth = stack.pop()
        if depth > MAX_PAYLOAD_DEPTH:
            raise JobPayloadError(f"{root_path} is nested more than {MAX_PAYLOAD_DEPTH} levels deep")
        if value is None or isinstance(value, bool | int):
            continue
        if isinstance(value, float):
            if not math.isfinite(value):
                raise JobPayloadError(f"{path} is {value}, which JSON cannot carry")
        elif isinstance(value, str):
            _check_text(value, path)
        elif isinstance(value, dict):
            for key, item in value.items():
                if not isinstance(key, str):
                    raise JobPayloadError(
                        f"{path} has a key {key!r} of type {type(key).__name__}; keys must be strings"
                    )
                _check_text(key, f"{path} key {key!r}")
                stack.append((item, f"{path}[{key!r}]", depth + 1))
        elif isinstance(value, list | tuple):
            for index, item in enumerate(value):
                stack.append((item, f"{path}[{index}]", depth + 1))
        else:
            raise JobPayloadError(
                f"{path} is a {type(value).__name__}, which JSON cannot carry; "
                "pass strings, numbers, booleans, None, lists and dicts"
            )


def _check_text(text: str, path: str) -> None:
    if "\x00" in text:
        raise JobPayloadError(f"{path} holds a NUL character, which the database cannot store")


MAX_ERROR_CHARS = 10_000
MAX_TRACEBACK_CHARS = 50_000


def clean_text(text: object, limit: int, *, keep: str = "head") -> str:
    """Return ``text`` as a string any database stores: no NUL, valid UTF-8, capped.

    Error messages and tracebacks come from arbitrary exceptions; cleaning them
    keeps the bookkeeping write that records them from failing. ``keep`` says
    which end of an over-long text survives (a traceback's tail names the
    failing line).
    """
    if not isinstance(text, str):
        text = str(text)
    text = text.replace("\x00", "\\x00").encode("utf-8", "replace").decode("utf-8")
    if len(text) <= limit:
        return text
    # The marker's own length depends on the count it shows; 40 characters cover both.
    room = max(limit - 40, 0)
    marker = f"\n[... {len(text) - room} characters cut ...]\n"
    return marker + text[-room:] if keep == "tail" else text[:room] + marker


# A job id: within a BigAutoField's range.
_MAX_JOB_ID = 2**63 - 1


def check_depends_on(value: object, using: str | None = None) -> tuple[int, ...]:
    """The job ids of a ``depends_on``: sorted and distinct, from Jobs, ids or Tasks' results.

    A single job, id or result stands for a list of one. Raise ``ValueError``
    for anything else, before anything is written, and for a ``Job`` read
    from or written to another database than ``using``: its id there names
    another job, or none, in ``using``.
    """
    from ..models import Job  # noqa: PLC0415 - imported by the app's modules before the models load

    items = [value] if isinstance(value, Job | int) or _is_task_result(value) else value
    if isinstance(items, str | bytes | Mapping) or not isinstance(items, Iterable):
        raise ValueError(
            f"depends_on must be a list of jobs, job ids or task results, not {type(value).__name__}"
        )
    ids: set[int] = set()
    for item in items:
        job_id: int | None
        if isinstance(item, Job):
            job_id = item.pk
            elsewhere = item._state.db
            if using is not None and elsewhere is not None and elsewhere != using:
                raise ValueError(
                    f"depends_on: job #{job_id} is in database {elsewhere!r}, and this job goes to "
                    f"{using!r}: a job can wait only on jobs of its own database"
                )
        elif _is_task_result(item):
            job_id = int(item.id) if str(item.id).isdigit() else None
        else:
            job_id = item if isinstance(item, int) and not isinstance(item, bool) else None
        if not isinstance(job_id, int) or not 0 < job_id <= _MAX_JOB_ID:
            raise ValueError(f"depends_on: {item!r} is not a job, a job id or a task result of this queue")
        ids.add(job_id)
    return tuple(sorted(ids))


def _is_task_result(value: object) -> bool:
    """True for a Django Tasks ``TaskResult`` (its ``id`` is its job's, as text)."""
    return type(value).__name__ == "TaskResult" and isinstance(getattr(value, "id", None), str)
