"""What a run of a job comes to: the verdict's action, and the outcome its line logs."""

from __future__ import annotations

import enum


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
