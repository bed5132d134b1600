"""Back off and reconnect after a database call fails, instead of crashing or spinning.

Each failure, and the first success after failures, is told to the listeners
``listen`` added (runworker's metrics and health, ``services/metrics.py``), with the
duty's name: ``claiming``, ``heartbeat``, ``registering``, ``ticker``,
``scheduler``, ``cancel watch``, ``slot connection``.
"""

from __future__ import annotations

import logging
import random
import threading
import time
import traceback
from collections.abc import Callable

from django.db import DatabaseError, InterfaceError, OperationalError, connections

from ..queue import engine_for

logger = logging.getLogger(__name__)

# What a lost or refused connection raises through Django. A ProgrammingError
# (say, a missing migration) is a DatabaseError too: it is logged and retried
# with the same backoff rather than crash-looping the process.
DATABASE_ERRORS: tuple[type[Exception], ...] = (DatabaseError, InterfaceError)
# Of those, what a connection that broke, was refused or timed out raises (and
# SQLite's "database is locked"): a write that failed so may succeed once
# reconnected. Any other DatabaseError (a constraint, a trigger, bad data) is
# the database refusing that write, and would refuse it again.
CONNECTION_ERRORS: tuple[type[Exception], ...] = (OperationalError, InterfaceError)


def is_connection_error(using: str, exc: BaseException) -> bool:
    """Whether ``exc`` is ``CONNECTION_ERRORS``' kind of failure on database ``using``.

    MySQL's driver raises OperationalError for a server's refusal too (a
    trigger's SIGNAL, a value out of range): its error number tells (``Engine``).
    """
    if not isinstance(exc, CONNECTION_ERRORS):
        return False
    return engine_for(connections[using]).is_connection_error(exc.__cause__)


FIRST_DELAY = 0.25  # seconds: a terminated backend is usually back at once
MAX_DELAY = 30.0

# Told (duty, error) of each failure and (duty, None) of a recovery.
Listener = Callable[[str, "BaseException | None"], None]
# A tuple replaced whole, so that a thread reading it never sees it change under it.
_listeners: tuple[Listener, ...] = ()


def listen(listener: Listener) -> Callable[[], None]:
    """Tell ``listener`` of every duty's failures and recoveries; return what stops it."""
    global _listeners
    _listeners = (*_listeners, listener)

    def stop() -> None:
        global _listeners
        _listeners = tuple(other for other in _listeners if other is not listener)

    return stop


class Outage:
    """The failures in a row of one duty's database calls, and how long to wait after each.

    The delay doubles from 0.25 s up to 30 s, jittered so that many workers cut
    off together do not all reconnect in the same instant. A failure closes
    this thread's connection, so that the next call opens a fresh one.
    """

    def __init__(self, duty: str, using: str) -> None:
        self.duty = duty
        self.using = using
        self.failures = 0

    def failed(self, exc: BaseException) -> float:
        """Record a failure; return the seconds to wait before the next try."""
        self.failures += 1
        delay = min(MAX_DELAY, FIRST_DELAY * 2 ** min(self.failures - 1, 16)) * random.uniform(0.5, 1.0)
        logger.warning(
            "%s: database error (%s failure(s) in a row), retrying in %.2fs: %s: %s",
            self.duty,
            self.failures,
            delay,
            type(exc).__name__,
            str(exc).strip(),
        )
        close_connection(self.using)
        for listener in _listeners:
            listener(self.duty, exc)
        return delay

    def recovered(self) -> None:
        # Called after every successful call of a loop: nothing to do unless it had failed.
        if self.failures:
            logger.info("%s: database reachable again after %s failure(s)", self.duty, self.failures)
            self.failures = 0
            for listener in _listeners:
                listener(self.duty, None)


def close_connection(using: str) -> None:
    """Close this thread's connection to ``using``, even if it is already broken."""
    try:
        connections[using].close()
    except DATABASE_ERRORS:
        # A broken connection may fail to close; Django has dropped it either way.
        logger.debug("closing a broken connection to %s failed", using, exc_info=True)


class Shortage:
    """The slots of a worker that cannot open a database connection, and their back-off.

    Over the server's connection limit (or out of file descriptors), a slot's
    connection fails to open while the claimer's and the heartbeat's, opened
    long before, still work. Such a slot sits out with its job: it waits,
    backing off as ``Outage`` does, until a connection opens, and then records
    the job's outcome (or hands back a job that never got its connection). Its
    job stays claimed, its claim kept alive by the heartbeat, so nothing is
    claimed for that slot meanwhile and no claim is left to expire while the
    worker lives.
    """

    def __init__(self, worker_id: str, using: str) -> None:
        self.worker_id = worker_id
        self.using = using
        self._waiting = 0
        self._lock = threading.Lock()

    def sit_out(self, reason: str) -> bool:
        """Wait, backing off, until this thread opens a connection, and return True.

        A stopping worker does not cut the wait short: the slot's job counts as
        running, so the drain gives it the shutdown timeout and then hands it back.
        """
        with self._lock:
            self._waiting += 1
            waiting = self._waiting
        logger.warning(
            "worker %s: a slot cannot reach the database (%s); backing off: %s slot(s) sit out "
            "with their jobs, and nothing is claimed for them until they connect",
            self.worker_id,
            reason,
            waiting,
        )
        try:
            return self._connect()
        finally:
            with self._lock:
                self._waiting -= 1
                waiting = self._waiting
            if not waiting:
                logger.info("worker %s: every slot reaches the database again", self.worker_id)

    def _connect(self) -> bool:
        outage = Outage("slot connection", self.using)
        delay = FIRST_DELAY * random.uniform(0.5, 1.0)
        while True:
            time.sleep(delay)
            try:
                connections[self.using].ensure_connection()
            except DATABASE_ERRORS as exc:
                delay = outage.failed(exc)
                continue
            outage.recovered()
            return True


def failed_to_connect(exc: BaseException, using: str) -> bool:
    """Whether ``exc`` is a failure to open this thread's connection to ``using``.

    Told apart by its traceback, which passes through the ``connect()`` of
    that alias's connection: an error of a query, or of a connection to
    another database, is a job's failure like any other.
    """
    if not isinstance(exc, DATABASE_ERRORS):
        return False
    for frame, _line in traceback.walk_tb(exc.__traceback__):
        if frame.f_code.co_name == "connect" and getattr(frame.f_locals.get("self"), "alias", None) == using:
            return True
    return False
