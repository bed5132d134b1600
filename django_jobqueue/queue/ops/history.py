"""A job's attempt history: one entry per attempt that did not end in done.

An entry is written by the statement that records the attempt's outcome
(a retry, a move to the dead letters, a rescued expired claim, a cancel of a
running job), in SQL, from the row as it stands before that statement
changes it: the attempt's number, its worker, its start (the claim's
``last_attempted_at``) and its length up to now, all by the database's clock.
A done attempt has no entry: the row itself tells of it. An attempt handed
back unrun (``release``) has none either: it is not counted.

The history is bounded. It holds at most ``MAX_HISTORY`` entries: the first
one and the newest after it (the first failure often explains the others,
the newest say what happens now). Each error is cut to its first
``MAX_HISTORY_ERROR_CHARS`` characters; the job's ``last_error`` and
``last_traceback`` keep their own, longer bounds.
"""

from __future__ import annotations

from typing import Final

from ..engines import Engine
from .tables import JOB

MAX_HISTORY: Final = 25
MAX_HISTORY_ERROR_CHARS: Final = 2_000

# How an attempt ended, as its entry names it.
RETRY: Final = "retry"  # it failed and the job will run again
DEAD: Final = "dead"  # it failed and the job went to the dead letters
TIMEOUT: Final = "timeout"  # it ran past the job's timeout (retried or dead, as the job's state says)
LOST: Final = "lost"  # its claim expired unfinished and was handed on by tick_timeouts
CANCELLED: Final = "cancelled"  # the job was cancelled while it ran
OUTCOMES: Final = frozenset({RETRY, DEAD, TIMEOUT, LOST, CANCELLED})


def pushed_entry(engine: Engine, outcome: str, error_sql: str) -> str:
    """SQL for the job row's ``attempt_history`` with the current attempt's entry appended.

    ``outcome`` is one of ``OUTCOMES``, written into the SQL as a literal;
    ``error_sql`` is an SQL text value (a ``%s`` or an expression of the row).
    Columns are qualified with the job table: the statement may also read others.
    Raise ``ValueError`` for an outcome not in ``OUTCOMES``.
    """
    if outcome not in OUTCOMES:
        raise ValueError(f"unknown attempt outcome {outcome!r}; expected one of {sorted(OUTCOMES)}")
    entry = (
        f"{engine.json_object}('attempt', {JOB}.attempts, 'worker', {JOB}.locked_by, "
        f"'started_at', {engine.iso_time(f'{JOB}.last_attempted_at')}, "
        f"'duration', {engine.seconds_since(f'{JOB}.last_attempted_at')}, "
        f"'outcome', '{outcome}', 'error', substr({error_sql}, 1, {MAX_HISTORY_ERROR_CHARS}))"
    )
    return engine.json_push_bounded(f"{JOB}.attempt_history", entry, MAX_HISTORY)


def failure_outcome(timed_out: bool, dead: bool) -> str:
    """The outcome of an attempt that a worker recorded as failed."""
    if timed_out:
        return TIMEOUT
    return DEAD if dead else RETRY
