"""The queue's state machine: every statement that changes a job row lives in ``ops``.

Code outside ``queue/`` imports from here, never from ``ops`` or ``engines``:
``QueueClient`` for every transition, and the result types it returns.
"""

from .batching import OpenBatch, batch
from .client import QueueClient
from .conflicts import is_lock_timeout
from .duties import WORKER_STALE_AFTER
from .engines import engine_for
from .ops import (
    CANCEL_CHANNEL,
    NOTIFY_CHANNEL,
    PROBE_CHANNEL,
    DeletedDeadLetter,
    JobChange,
    RetriedDeadLetter,
)

__all__ = [
    "WORKER_STALE_AFTER",
    "CANCEL_CHANNEL",
    "NOTIFY_CHANNEL",
    "PROBE_CHANNEL",
    "DeletedDeadLetter",
    "JobChange",
    "OpenBatch",
    "QueueClient",
    "RetriedDeadLetter",
    "batch",
    "engine_for",
    "is_lock_timeout",
]
