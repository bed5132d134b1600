"""``JobContext``: what a job declared with ``takes_context=True`` receives first."""

from __future__ import annotations

import threading
from collections.abc import Callable
from datetime import timedelta
from typing import Any

from asgiref.sync import sync_to_async
from django.db import connections

from ...models import Job
from ...queue import QueueClient, engine_for
from ...queue.progress import check_progress
from .pending import PendingProgress
from .progress import DirectProgress, ProgressReport


def _never() -> bool:
    return False


class JobContext:
    """The run of a job in progress: the claimed ``Job``, its attempt, and the worker.

    ``ctx.job`` is the row as claimed (``ctx.job.id``, ``ctx.job.payload`` …);
    ``ctx.attempt`` is 1 on the first run; ``ctx.worker_id`` names the worker;
    ``ctx.cancelled`` turns True when the job should stop; ``ctx.progress()``
    tells how far it got.
    """

    def __init__(
        self,
        job: Job,
        worker_id: str,
        client: QueueClient,
        stopped: Callable[[], bool] = _never,
        report: ProgressReport | None = None,
    ) -> None:
        self.job = job
        self.worker_id = worker_id
        self._client = client
        self._stopped = stopped
        self._report = report

    @property
    def attempt(self) -> int:
        """This run's attempt number: 1 on the first, then one more for each attempt counted before it."""
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
        client = self._client
        connection = connections[client.using]
        if connection.in_atomic_block and engine_for(connection).supports_concurrent_writers:
            # Inside a transaction on the queue's database (an atomic job's): written there, the
            # deadline would stay unseen until the job ends, and its row lock would hold the
            # heartbeat back meanwhile. Where writers run side by side it commits on a connection
            # of its own; where one writer holds the database, nobody can rescue the claim before
            # this transaction ends anyway.
            return _on_own_connection(
                lambda: client.extend_visibility(self.job, worker_id=self.worker_id, extension=seconds)
            )
        return client.extend_visibility(self.job, worker_id=self.worker_id, extension=seconds)

    async def aextend_visibility(self, seconds: timedelta | float) -> bool:
        """``extend_visibility`` from a coroutine job: its query runs off the event loop."""
        return await sync_to_async(self.extend_visibility)(seconds)

    def progress(self, current: float, total: float | None = None, message: str = "") -> None:
        """Report how far the job got: ``current`` of ``total`` (None: unknown), and a short ``message``.

        Stored as ``{"current", "total", "message"}`` in the job's ``progress``,
        which the admin shows as a bar. Call it as often as you like: only the
        latest report is kept, written at most once a second and once more when
        the attempt ends. The row keeps it after the job ends and into the next
        attempt, so ``ctx.job.progress`` is where the previous attempt got to.

        Raise ``TypeError`` for a count that is not an int or float, or a
        message that is not a string; ``ValueError`` for a count below 0, above
        1e100, NaN or infinite, a ``total`` below 1e-100 (0 among them), or a
        message holding a NUL or a lone surrogate. A message longer than 200
        characters is cut.
        """
        value = check_progress(current, total, message)
        if self._report is None:
            # Made by hand, not by a worker: written from here, at most once a second.
            self._report = _direct_report(self.job, self.worker_id, self._client)
        self._report(value)

    def __repr__(self) -> str:
        return f"<JobContext {self.job.name} #{self.job.pk} attempt {self.attempt} on {self.worker_id}>"


def _direct_report(job: Job, worker_id: str, client: QueueClient) -> ProgressReport:
    pending = PendingProgress(job)
    sink = DirectProgress(client, worker_id)

    def report(value: dict[str, Any]) -> None:
        pending.report(value)
        sink.reported(pending)

    return report


def _on_own_connection(call: Callable[[], bool]) -> bool:
    """Run ``call`` in a thread of its own, and so on a connection of its own, closed after it."""
    answer: list[bool] = []
    error: list[BaseException] = []

    def run() -> None:
        try:
            answer.append(call())
        except BaseException as exc:  # noqa: B036 - raised again in the job's thread
            error.append(exc)
        finally:
            connections.close_all()

    thread = threading.Thread(target=run, name="jobqueue-extend-visibility")
    thread.start()
    thread.join()
    if error:
        raise error[0]
    return answer[0]
