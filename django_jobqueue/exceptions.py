"""Exceptions raised by django-jobqueue, the two a job may raise itself, and the two that stop a job."""

from __future__ import annotations

from datetime import timedelta


class JobQueueError(Exception):
    """Base class of the errors django-jobqueue raises."""


class JobPayloadError(JobQueueError, ValueError):
    """A payload that is not a JSON object, or one the queue cannot store."""


class DependencyError(JobQueueError, ValueError):
    """A ``depends_on`` names a job that can never be done: cancelled, or not in the queue."""


class UnknownJobError(JobQueueError, LookupError):
    """No function is registered under a job's name."""


class WorkerIdInUse(JobQueueError):
    """A live worker (one whose heartbeat is recent) already runs under this worker id."""


class Retry(Exception):  # noqa: N818 - a control-flow signal, named as DESIGN.md fixes it
    """Raised by a job to be run again later; the run counts as an attempt.

    ``delay`` (a ``timedelta`` or seconds) replaces the backoff for this
    retry; a delay the queue cannot take leaves the backoff in place, and the
    attempt's error says why. ``reason`` is recorded as the attempt's error
    (``"Retry: <reason>"``).
    """

    def __init__(self, delay: timedelta | float | None = None, reason: str = "") -> None:
        self.delay = delay
        self.reason = reason
        super().__init__(reason or "retry requested")


class Fail(Exception):  # noqa: N818
    """Raised by a job to send it to the dead letters at once, without retrying."""


class JobInterrupted(BaseException):  # noqa: N818 - like KeyboardInterrupt, not an error of the job's
    """Raised inside a running job to stop it (its time limit passed, or it was cancelled).

    A ``BaseException``, as ``KeyboardInterrupt`` is, so that a job's
    ``except Exception:`` does not swallow it: ``finally`` blocks and context
    managers run, and a job that must clean up catches it and raises it again.
    Catching it for good does not save the attempt: the worker decides the
    outcome from why it stopped the job, not from what the job returned.
    """


class JobTimeout(JobInterrupted):
    """The attempt ran past its ``timeout``: it ends as a failure, retried with backoff."""


class JobCancelled(JobInterrupted):
    """The job was cancelled while it ran and did not return within the worker's ``--cancel-grace``."""
