"""``JobContext``: what a job declared with ``takes_context=True`` receives first."""

from __future__ import annotations

from collections.abc import Callable
from datetime import timedelta

from ..models import Job
from ..queue import QueueClient


def _never() -> bool:
    return False


class JobContext:
    """The run of a job in progress: the claimed ``Job``, its attempt, and the worker.

    ``ctx.job`` is the row as claimed (``ctx.job.id``, ``ctx.job.payload`` …);
    ``ctx.attempt`` is 1 on the first run; ``ctx.worker_id`` names the worker;
    ``ctx.cancelled`` turns True when the job should stop.
    """

    def __init__(
        self, job: Job, worker_id: str, client: QueueClient, stopped: Callable[[], bool] = _never
    ) -> None:
        self.job = job
        self.worker_id = worker_id
        self._client = client
        self._stopped = stopped

    @property
    def attempt(self) -> int:
        return self.job.attempts

    @property
    def cancelled(self) -> bool:
        """True once the job should stop: it was cancelled, ran past its timeout, or the worker stops.

        A long job looks at it between steps and returns (or raises) when it
        turns True. It turns True within about a second of a cancel; what the
        job returns afterwards is not kept (a cancelled job stays cancelled, a
        timed-out one is retried).
        """
        return self._stopped()

    def extend_visibility(self, seconds: timedelta | float) -> bool:
        """Keep this claim for at least ``seconds`` from now (the database's now).

        The worker's heartbeat already keeps a running job's claim alive; this
        is for a step that must not be handed out again even if this worker
        stops beating, such as one the job cannot repeat. The heartbeat never
        shortens the deadline set here. Return False if the claim is no longer
        held (it expired and was re-claimed, or the job was cancelled).
        """
        return self._client.extend_visibility(self.job, worker_id=self.worker_id, extension=seconds)

    def __repr__(self) -> str:
        return f"<JobContext {self.job.name} #{self.job.pk} attempt {self.attempt} on {self.worker_id}>"
