"""What a run of a job comes to: its verdict for the queue, and the outcome its line logs.

The words every part of the run speaks (``attempt.py`` makes an ``Attempt``,
``tracing.py`` and ``executor.py`` read it), kept apart so that none of them
imports another for them.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Any


class Action(enum.Enum):
    """What a verdict tells the queue (``executor.py``'s outcome table)."""

    ACK = "ack"
    NACK = "nack"
    FAIL = "fail"


class Outcome(enum.StrEnum):
    """How a run ended, as its job's line logs it (``outcome=done``).

    The members are the log line's vocabulary, each one a word the worker
    writes, and nothing else: a later word joins when the code produces it.
    ``PENDING`` alone is never logged: the slot's ack went to the completer,
    and the job's line, with its outcome, is logged once the ack is written.
    """

    DONE = "done"  # returned; acked
    RETRY = "retry"  # nacked with attempts left
    DEAD = "dead"  # failed, or nacked on its last attempt: moved to the dead letters
    RELEASED = "released"  # handed back, the attempt not counted
    CANCELLED = "cancelled"  # cancelled while it ran: nothing written, never retried
    LOST = "lost"  # the claim was no longer this worker's: the write was refused
    UNRECORDED = "unrecorded"  # the database failed while the outcome was written
    PENDING = "pending"  # not known yet: the completer writes the ack and logs the line


@dataclass(frozen=True)
class Verdict:
    """What to tell the queue about one run."""

    action: Action
    result: Any = None
    error: str = ""
    traceback: str = ""
    delay: Any = None
    # The attempt ran past the job's time limit: its history entry says ``timeout``.
    timed_out: bool = False


@dataclass
class Attempt:
    """What one run of a job's code came to."""

    verdict: Verdict
    task_run: Any = None  # a Django Task's TaskRun, whose signals follow the outcome
    # What the job raised, if anything (the executor asks whether it was a failure to connect).
    raised: BaseException | None = None
    # In a child process, instead: whether what it raised was its first query failing to connect.
    unstarted: bool = False
    # Not empty if the child process running it died: how (the job's effects are unknown).
    died: str = ""
    # True if its child process was gone before it was even sent the job: it never ran.
    unsent: bool = False
    # An atomic job's ack, written in its own transaction: DONE if it committed, LOST if the
    # fence refused it (everything rolled back). None: the executor writes the verdict.
    settled: Outcome | None = None
