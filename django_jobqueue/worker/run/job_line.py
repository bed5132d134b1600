"""A finished job's log line: its text, its level, and its fields for ``--log-format json``."""

from __future__ import annotations

import logging

from ...models import Job
from .outcomes import Outcome

# The job lines' logger keeps the name the docs give it (docs/observability.md, performance.md).
logger = logging.getLogger("django_jobqueue.worker.executor")

# Characters of an error's first line in its log line; a message may be megabytes long.
LOGGED_ERROR_CHARS = 500
# An outcome's log level; any other is a WARNING.
OUTCOME_LOG_LEVELS = {
    Outcome.DONE: logging.INFO,
    Outcome.RELEASED: logging.INFO,
    Outcome.CANCELLED: logging.INFO,
    Outcome.DEAD: logging.ERROR,
}
# An outcome's log line; its fields follow in log_outcome.
OUTCOME_MESSAGE = "job %s id=%s attempt=%s/%s duration=%.3fs outcome=%s%s"


def log_outcome(
    job: Job, worker_id: str, duration: float, outcome: Outcome, error: str, next_attempt_in: float | None
) -> None:
    """Log ``job``'s line: a retry says when the next attempt is due, a dead job where it went."""
    level = OUTCOME_LOG_LEVELS.get(outcome, logging.WARNING)
    if not logger.isEnabledFor(level):
        return
    first_line = error.splitlines()[0] if error.strip() else ""
    if len(first_line) > LOGGED_ERROR_CHARS:  # the stored error keeps more
        first_line = first_line[:LOGGED_ERROR_CHARS] + "..."
    suffix = f" error={first_line!r}" if first_line else ""
    due_in = next_attempt_in if outcome is Outcome.RETRY else None
    if outcome is Outcome.DEAD:
        suffix = f" moved_to=dead_letters{suffix}"
    elif due_in is not None:
        suffix = f" next_attempt_in={due_in:.3f}s{suffix}"
    fields = {
        "event": "job",
        "name": job.name,
        "id": job.pk,
        "queue": job.queue,
        "attempt": job.attempts,
        "max_attempts": job.max_attempts,
        "duration": round(duration, 6),
        "outcome": str(outcome),
        "error": first_line or None,
        "next_attempt_in": None if due_in is None else round(due_in, 3),
        "moved_to": "dead_letters" if outcome is Outcome.DEAD else None,
        "worker_id": worker_id,
    }
    args = (job.name, job.pk, job.attempts, job.max_attempts, duration, outcome, suffix)
    # The record logger.log would make, less its search of the stack for the caller (a fifth
    # of a line's cost, paid once per job): the caller is always this function.
    record = logger.makeRecord(
        logger.name,
        level,
        _LOG_PATH,
        _LOG_LINE,
        OUTCOME_MESSAGE,
        args,
        None,
        "log_outcome",
        {"job_fields": fields},
    )
    logger.handle(record)


# Where an outcome's record says it was logged: log_outcome, as logger.log would find it.
_LOG_PATH = log_outcome.__code__.co_filename
_LOG_LINE = log_outcome.__code__.co_firstlineno


def log_unrecorded(job: Job, exc: BaseException, *, retried: bool = False) -> None:
    """Log that ``job``'s outcome could not be written, and what becomes of it."""
    logger.error(
        "job %s id=%s: could not record its outcome (%s: %s); %s",
        job.name,
        job.pk,
        type(exc).__name__,
        str(exc).strip(),
        "written again once the slot reaches the database"
        if retried
        else "it is run again when its claim expires",
    )
