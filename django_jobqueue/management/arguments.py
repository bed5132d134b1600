"""The argument types of the ``runworker`` and ``jobqueue`` commands, and their keyword options.

Each type reads the text of one option as the command line gives it and
raises ``ArgumentTypeError`` with what it takes; ``keyword_value`` reads a
value ``call_command`` hands over past the parser the same way.
"""

from __future__ import annotations

import socket
from argparse import Action, ArgumentTypeError
from collections.abc import Callable
from typing import Any

from django.conf import settings

from ..conf import queue_databases
from ..queue.validation import check_queue
from ..worker.pools.autoscale import SlotRange

# Each slot is a thread (or a child process) and a database connection.
MAX_CONCURRENCY = 1000
# Waits beyond a day overflow timers, and outlast any process manager's patience.
MAX_SHUTDOWN_TIMEOUT = 86400.0


def database_alias(text: str) -> str:
    """Return ``text`` if it names a database in ``DATABASES`` that holds a queue.

    Checked while the arguments are parsed, so an unknown alias is a bad
    argument (exit status 2, with the usage) like any other. An alias of
    ``DATABASES`` that is not a queue database (``JOBQUEUE["DATABASE"]`` or
    one of ``JOBQUEUE["DATABASES"]``) is refused too: a worker on a replica
    or on the LISTEN alias would serve the wrong queue, or none.
    """
    if text not in settings.DATABASES:
        known = ", ".join(repr(alias) for alias in settings.DATABASES)
        raise ArgumentTypeError(f"{text!r} is not a key of DATABASES (known: {known})")
    queues = queue_databases()
    if text not in queues:
        known = ", ".join(repr(alias) for alias in queues)
        raise ArgumentTypeError(
            f"{text!r} holds no queue: the queue databases are {known}; "
            "list another in JOBQUEUE['DATABASES'] (docs/scaling.md)"
        )
    return text


def queue_and_weight(text: str) -> tuple[str, int]:
    """Parse ``NAME[:WEIGHT]``: the text after the last ``:`` is the weight, a positive integer.

    Queue names may hold ``:``, so a queue named ``a:b`` is given with its
    weight (``a:b:1``); ``a:b`` alone is refused rather than served as queue
    ``a`` or ``a:b`` by a guess.
    """
    name, colon, weight = text.rpartition(":")
    if not colon:
        name, weight = text, "1"
    try:
        check_queue(name)
    except ValueError as exc:
        raise ArgumentTypeError(str(exc)) from None
    if not (weight.isascii() and weight.isdigit()) or int(weight) < 1:
        raise ArgumentTypeError(
            f"the weight of queue {name!r} must be a whole number of 1 or more, got {weight!r} "
            f"(a queue whose name holds ':' is given with its weight: {text}:1)"
        )
    return name, int(weight)


def positive_int(text: str, *, maximum: int | None = None) -> int:
    try:
        value = int(text)
    except ValueError:
        raise ArgumentTypeError(f"must be a whole number, got {text!r}") from None
    if value < 1:
        raise ArgumentTypeError(f"must be 1 or more, got {value}")
    if maximum is not None and value > maximum:
        raise ArgumentTypeError(f"must be at most {maximum}, got {value}")
    return value


def concurrency(text: str) -> SlotRange:
    """Parse ``N`` (that many slots) or ``MIN:MAX`` (from MIN slots up to MAX as jobs wait)."""
    low, colon, high = text.partition(":")
    try:
        minimum = positive_int(low.strip(), maximum=MAX_CONCURRENCY)
        maximum = positive_int(high.strip(), maximum=MAX_CONCURRENCY) if colon else minimum
    except ArgumentTypeError as exc:
        raise ArgumentTypeError(f"{exc} (give N, or MIN:MAX such as 2:16)") from None
    if maximum < minimum:
        raise ArgumentTypeError(f"MIN must not be above MAX, got {text!r} (give MIN:MAX such as 2:16)")
    return SlotRange(minimum, maximum)


def resize_seconds(value: float) -> float:
    # Above zero: a zero interval would resize on every claiming round.
    if not 0 < value <= MAX_SHUTDOWN_TIMEOUT:  # False for NaN too
        raise ValueError(f"must be above 0 and at most {MAX_SHUTDOWN_TIMEOUT:g} seconds, got {value}")
    return value


def number(text: str) -> float:
    try:
        return float(text)
    except ValueError:
        raise ArgumentTypeError(f"must be a number of seconds, got {text!r}") from None


def checked_seconds(check: Callable[[float], float]) -> Callable[[str], float]:
    """An argument type that parses seconds and passes them through ``check``."""

    def parse(text: str) -> float:
        try:
            return check(number(text))
        except ValueError as exc:
            raise ArgumentTypeError(str(exc)) from None

    return parse


def shutdown_seconds(value: float) -> float:
    if not 0 <= value <= MAX_SHUTDOWN_TIMEOUT:  # False for NaN too
        raise ValueError(f"must be from 0 to {MAX_SHUTDOWN_TIMEOUT:g} seconds, got {value}")
    return value


def metrics_port(text: str) -> int:
    """A TCP port, or 0 for no metrics endpoint."""
    try:
        value = int(text)
    except ValueError:
        raise ArgumentTypeError(f"must be a TCP port from 1 to 65535 (or 0: off), got {text!r}") from None
    if not 0 <= value <= 65535:
        raise ArgumentTypeError(f"must be a TCP port from 1 to 65535 (or 0: off), got {value}")
    return value


def metrics_host(text: str) -> str:
    """An address to listen on: a name that resolves, or an IPv4 or IPv6 address."""
    if not text.strip():
        raise ArgumentTypeError("must be a host name or an address, got an empty string")
    try:
        socket.getaddrinfo(text, None, type=socket.SOCK_STREAM)
    except (socket.gaierror, UnicodeError) as exc:
        raise ArgumentTypeError(f"cannot resolve {text!r}: {exc}") from None
    return text


def megabytes(text: str) -> int:
    return positive_int(text, maximum=1024 * 1024)


def keyword_value(action: Action, value: Any) -> Any:
    """``value`` of ``action``'s option, read as the command line reads it; ValueError if it cannot be."""
    if action.nargs == 0:  # a flag: --burst, --no-schedules
        if not isinstance(value, bool):
            raise ValueError(f"must be True or False, got {value!r}")
        return value
    if action.type is queue_and_weight:  # --queue, given again for each queue
        queues = [value] if isinstance(value, str | tuple) else value
        if not isinstance(queues, list):
            raise ValueError(f"must be a list of queue names (such as ['emails', 'sms:2']), got {value!r}")
        return [one_value(action, queue) for queue in queues]
    return one_value(action, value)


def one_value(action: Action, value: Any) -> Any:
    if isinstance(value, tuple) and action.type is queue_and_weight and len(value) == 2:
        value = f"{value[0]}:{value[1]}"  # (name, weight), as the parser gives it
    elif isinstance(value, SlotRange) and action.type is concurrency:
        value = f"{value.minimum}:{value.maximum}"
    if isinstance(value, bool) or not isinstance(value, str | int | float):
        raise ValueError(f"must be text or a number, got {value!r}")
    text = str(value)
    parsed = action.type(text) if callable(action.type) else text
    if action.choices is not None and parsed not in action.choices:
        raise ValueError(f"must be one of {', '.join(map(str, action.choices))}, got {value!r}")
    return parsed
