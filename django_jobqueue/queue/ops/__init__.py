"""Every statement that changes a job, dead-letter or worker row, and nothing else.

One module per stage: ``enqueue`` and ``copy`` (new jobs, built as ``Job``
by ``new_jobs``), ``rounds``,
``picks`` and ``limited`` (claims), ``acks``, ``claims`` (retry, bury,
extend, release), ``upkeep`` (expired claims, pruning), ``history`` (the
attempt history's entry, which those write), ``dependencies``
(``depends_on``), ``dead_letters``, ``operator`` (the admin's batches),
``batches`` (``batch()``'s counts and callback, which the others call),
``pauses`` (queue pauses) and ``workers`` (worker rows); what they share is
in ``tables`` (and, where a database has no ``RETURNING``, in
``returning``), what differs per database in ``queue/engines``, and how a
conflict with another transaction is met in ``queue/conflicts.py``.

Each transition names the state it expects (and, for a claimed job, the claim
it expects) in its ``WHERE`` clause, and reports whether it changed a row: a
lost race is ``False``, never an exception. Every time is the database's clock.
Each function commits on its own (autocommit) unless the caller is inside
``transaction.atomic()``, in which case it joins the caller's transaction.

Callers outside ``queue/`` go through ``QueueClient`` and the names
``django_jobqueue.queue`` exports; none imports a stage module.
"""

from .acks import PASS_OVER, WAIT_BRIEFLY, AckWait, complete, complete_counted, complete_many
from .batches import Counts, finish_batches, open_batch, record_outcomes, seal_batch, tally
from .claims import (
    attempts_of,
    bury,
    ended_claims,
    extend,
    extend_claims,
    record_progress,
    release,
    retry_later,
)
from .copy import copy_jobs, writes_by_copy
from .dead_letters import (
    DeletedDeadLetter,
    IdsQuery,
    RetriedDeadLetter,
    delete_dead_letter_batch,
    retry_dead_letter,
    retry_dead_letter_batch,
)
from .dependencies import flag_dependencies_now, insert_waiting_jobs, repair_waiting
from .enqueue import insert_jobs
from .history import MAX_HISTORY, MAX_HISTORY_ERROR_CHARS, failure_outcome
from .operator import JobChange, cancel_jobs, run_jobs_now
from .pauses import pause_queue, paused_queues, resume_queue
from .rounds import claim, claim_round
from .tables import (
    CANCEL_CHANNEL,
    NOTIFY_CHANNEL,
    PROBE_CHANNEL,
    ROWS_PER_STATEMENT,
    Fence,
    NewJob,
    batched,
    notify_probe,
)
from .upkeep import prune, tick_timeouts
from .workers import (
    Beat,
    beat_worker,
    live_worker,
    prune_workers,
    record_listen,
    register_worker,
    resize_worker,
    unregister_worker,
)

__all__ = [
    "PASS_OVER",
    "WAIT_BRIEFLY",
    "AckWait",
    "flag_dependencies_now",
    "insert_waiting_jobs",
    "repair_waiting",
    "CANCEL_CHANNEL",
    "MAX_HISTORY",
    "MAX_HISTORY_ERROR_CHARS",
    "NOTIFY_CHANNEL",
    "PROBE_CHANNEL",
    "ROWS_PER_STATEMENT",
    "Counts",
    "DeletedDeadLetter",
    "Fence",
    "IdsQuery",
    "JobChange",
    "NewJob",
    "RetriedDeadLetter",
    "attempts_of",
    "batched",
    "Beat",
    "beat_worker",
    "bury",
    "cancel_jobs",
    "claim",
    "claim_round",
    "complete",
    "complete_counted",
    "complete_many",
    "copy_jobs",
    "delete_dead_letter_batch",
    "ended_claims",
    "extend",
    "extend_claims",
    "failure_outcome",
    "finish_batches",
    "insert_jobs",
    "live_worker",
    "notify_probe",
    "open_batch",
    "pause_queue",
    "paused_queues",
    "prune",
    "prune_workers",
    "record_listen",
    "record_outcomes",
    "record_progress",
    "register_worker",
    "release",
    "resume_queue",
    "retry_dead_letter",
    "retry_dead_letter_batch",
    "retry_later",
    "run_jobs_now",
    "seal_batch",
    "tally",
    "tick_timeouts",
    "resize_worker",
    "unregister_worker",
    "writes_by_copy",
]
