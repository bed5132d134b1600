"""Exceptions raised by django-jobqueue, and the two a job may raise itself."""

from __future__ import annotations

from datetime import timedelta


class JobQueueError(Exception):
    """Base class of the errors django-jobqueue raises."""


class JobPayloadError(JobQueueError, ValueError):
    """A payload that is not a JSON object, or one the queue cannot store."""


class UnknownJobError(JobQueueError, LookupError):
    """No function is registered under a job's name."""


class WorkerIdInUse(JobQueueError):
    """A live worker (one whose heartbeat is recent) already runs under this worker id."""


class Retry(Exception):  # noqa: N818 - a control-flow signal, named as DESIGN.md fixes it
    """Raised by a job to be run again later; the run counts as an attempt.

    ``delay`` (a ``timedelta`` or seconds) replaces the backoff for this retry.
    """

    def __init__(self, delay: timedelta | float | None = None, reason: str = "") -> None:
        self.delay = delay
        self.reason = reason
        super().__init__(reason or "retry requested")


class Fail(Exception):  # noqa: N818
    """Raised by a job to send it to the dead letters at once, without retrying."""
