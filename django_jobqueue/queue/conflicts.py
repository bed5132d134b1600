"""Run a transition again when the database gave it up for meeting another transaction.

Two errors of PostgreSQL mean that a statement met another transaction, not
that it was wrong: a deadlock (``40P01``: two transactions each waiting on a
lock the other holds, and the database ended one of them) and a
serialization failure (``40001``). Under READ COMMITTED the queue meets the
second one in a single case: a row that another transaction's ``UPDATE``
moved between the job table's partitions (migration 0011), which a
statement that waited to lock it cannot follow ("tuple to be locked was
already moved to another partition due to concurrent update"). The queue's
own statements never move a row by ``UPDATE`` (``ops/moves.py``), but a
worker of a release before 0011 does, and so does a project's own
``Job.objects.update(status=…)``.

On MySQL and MariaDB the one conflict is InnoDB's deadlock (1213), which
rolls back the whole transaction: outside the caller's transaction it is run
again as here, inside it the error goes to the caller, whose work is gone.

Either way the transaction was rolled back (or, inside the caller's, its
savepoint) and nothing of it was written, so the transition is run again, a
few times, after a short pause that grows and is jittered so that the two
sides of a deadlock do not meet again in step. The caller never sees the
error unless every try meets one.
"""

from __future__ import annotations

import functools
import random
import time
from collections.abc import Callable
from typing import Concatenate, ParamSpec, Protocol, TypeVar

from django.db import DatabaseError, connections, transaction

from .engines import engine_for

# Tries in all; the pauses between them add up to about a second at most.
ATTEMPTS = 8
FIRST_PAUSE = 0.005  # seconds; doubled after each try, jittered down to half
MAX_PAUSE = 0.25

T = TypeVar("T")
P = ParamSpec("P")


def is_conflict(using: str, error: BaseException) -> bool:
    """Whether ``error`` is a deadlock or serialization failure the database of ``using`` reported."""
    engine = engine_for(connections[using])
    return engine.error_code(error.__cause__) in engine.conflict_codes


def is_lock_timeout(using: str, error: BaseException) -> bool:
    """Whether ``error`` is a lock not granted within the transaction's lock timeout."""
    engine = engine_for(connections[using])
    code = engine.error_code(error.__cause__)
    return code is not None and code == engine.lock_timeout_code


def is_duplicate_key(using: str, error: BaseException) -> bool:
    """Whether ``error`` is an insert a unique index refused (where there is no ON CONFLICT)."""
    engine = engine_for(connections[using])
    code = engine.error_code(error.__cause__)
    return code is not None and code == engine.duplicate_key_code


def run_retrying(using: str, operation: Callable[[], T]) -> T:
    """Return ``operation()``, run again while it fails with a conflict (``is_conflict``).

    ``operation`` is one transition: one statement, or one transaction of its
    own. Inside the caller's ``transaction.atomic()`` each try runs in a
    savepoint, so that a conflict rolls back that try alone and leaves the
    caller's transaction usable; outside it, the try's own transaction was
    rolled back. Raise the last conflict after ``ATTEMPTS`` tries, and any
    other error at once.
    """
    connection = connections[using]
    engine = engine_for(connection)
    if not engine.conflict_codes or (engine.conflict_ends_transaction and connection.in_atomic_block):
        # InnoDB's deadlock rolls back the caller's whole transaction: only the caller
        # can run it again, and the error tells it so.
        return operation()
    pause = FIRST_PAUSE
    for attempt in range(1, ATTEMPTS + 1):
        try:
            if connection.in_atomic_block:
                with transaction.atomic(using=using):
                    return operation()
            return operation()
        except DatabaseError as error:
            if attempt == ATTEMPTS or not is_conflict(using, error):
                raise
        time.sleep(random.uniform(pause / 2, pause))
        pause = min(pause * 2, MAX_PAUSE)
    raise AssertionError("unreachable: the last try returns or raises")


class _HasUsing(Protocol):
    using: str


S = TypeVar("S", bound=_HasUsing)


def retried(method: Callable[Concatenate[S, P], T]) -> Callable[Concatenate[S, P], T]:
    """A ``QueueClient`` method run by ``run_retrying`` on the client's database."""

    @functools.wraps(method)
    def run(self: S, *args: P.args, **kwargs: P.kwargs) -> T:
        return run_retrying(self.using, lambda: method(self, *args, **kwargs))

    return run


__all__ = ["ATTEMPTS", "is_conflict", "is_duplicate_key", "is_lock_timeout", "retried", "run_retrying"]
