"""Back off and reconnect after a database call fails, instead of crashing or spinning."""

from __future__ import annotations

import logging
import random

from django.db import DatabaseError, InterfaceError, connections

logger = logging.getLogger(__name__)

# What a lost or refused connection raises through Django. A ProgrammingError
# (say, a missing migration) is a DatabaseError too: it is logged and retried
# with the same backoff rather than crash-looping the process.
DATABASE_ERRORS: tuple[type[Exception], ...] = (DatabaseError, InterfaceError)

FIRST_DELAY = 0.25  # seconds: a terminated backend is usually back at once
MAX_DELAY = 30.0


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
        return delay

    def recovered(self) -> None:
        if self.failures:
            logger.info("%s: database reachable again after %s failure(s)", self.duty, self.failures)
            self.failures = 0


def close_connection(using: str) -> None:
    """Close this thread's connection to ``using``, even if it is already broken."""
    try:
        connections[using].close()
    except DATABASE_ERRORS:
        # A broken connection may fail to close; Django has dropped it either way.
        logger.debug("closing a broken connection to %s failed", using, exc_info=True)
