"""``QueueClient``'s calls for a worker's services: heartbeat, progress, cancel watch, the worker's row.

A worker's claims and acks are ``QueueClient``'s own; these are what the
threads beside the claiming loop call (``worker/services/heartbeat.py``,
``worker/run/progress.py``, ``worker/run/control.py``) and a worker's registration.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from ..exceptions import WorkerIdInUse
from ..models import Job, Worker
from . import ops
from .conflicts import retried
from .progress import check_progress, encode_progress
from .refs import Duration, as_id
from .validation import check_concurrency_range, check_queue, check_worker_id, to_seconds

# Six missed beats of the slowest heartbeat (10 s) before a worker's row is stale: the
# worker is taken for dead, its id free again, its row pruned and left out of the figures.
WORKER_STALE_AFTER = 60.0


class WorkerDuties:
    """The calls of ``QueueClient`` for a worker's services, on database ``using``."""

    using: str

    @retried
    def extend_claims(
        self, jobs: Sequence[Job], *, worker_id: str, visibility_timeout: Duration | None = None
    ) -> set[int]:
        """Keep the claims of running ``jobs`` alive: a worker's heartbeat, one statement.

        Each deadline becomes now + ``visibility_timeout`` (default: the job's
        own), unless it is already later. Return the ids of the claims still
        held; the others expired and were re-claimed, or their job was cancelled.
        """
        timeout = None
        if visibility_timeout is not None:
            timeout = to_seconds(visibility_timeout, "visibility_timeout", allow_zero=False)
        claims = [(as_id(job.pk), job.claim_token) for job in jobs]
        return set(ops.extend_claims(self.using, check_worker_id(worker_id), claims, timeout)[0])

    @retried
    def beat(
        self, jobs: Sequence[Job], *, worker_id: str, visibility_timeout: Duration | None = None
    ) -> ops.Beat:
        """A worker's heartbeat: ``extend_claims(jobs)``, then its row marked alive now.

        A claim whose row another transaction holds (an operator's cancel, still
        open) is passed over, not waited on, and named on the worker's row:
        ``tick_timeouts`` does not hand it back while the worker beats
        (``held_up`` in the result). ``registered`` is False if the worker's row
        is gone (pruned while it was cut off).
        """
        timeout = None
        if visibility_timeout is not None:
            timeout = to_seconds(visibility_timeout, "visibility_timeout", allow_zero=False)
        worker_id = check_worker_id(worker_id)
        claims = [(as_id(job.pk), job.claim_token) for job in jobs]
        renewed, held_up = ops.extend_claims(self.using, worker_id, claims, timeout) if claims else ([], [])
        registered = ops.beat_worker(self.using, worker_id, held_up)
        return ops.Beat(set(renewed), set(held_up), registered)

    @retried
    def record_progress(
        self, reports: Sequence[tuple[Job, Mapping[str, Any]]], *, worker_id: str
    ) -> set[tuple[int, int]]:
        """Store each running job's progress ``{"current", "total", "message"}``: one statement.

        Each report is fenced by its own claim, as ``ack_many`` is: one whose
        claim is no longer current (expired and re-claimed, cancelled,
        finished) changes nothing and is missing from the returned
        ``(id, claim_token)`` pairs. Raise ``TypeError`` or ``ValueError``
        (see ``check_progress``) for a bad value, before any write.
        """
        rows = [
            (as_id(job.pk), job.claim_token, encode_progress(check_progress(**progress)))
            for job, progress in reports
        ]
        return ops.record_progress(self.using, check_worker_id(worker_id), rows) if rows else set()

    def ended_claims(self, jobs: Sequence[Job]) -> dict[int, str]:
        """Which claims of running ``jobs`` (as ``pull`` returned them) have ended: a worker's cancel watch.

        Return the id of each job whose claim is no longer current, mapped to
        ``"cancelled"`` if the job was cancelled, else ``"lost"`` (its claim
        expired and the job was claimed again, it finished, or it is gone).
        Jobs whose claims still hold are left out. One read per 500 jobs, no
        write; no query at all for no jobs.
        """
        claims = [(as_id(job.pk), job.claim_token) for job in jobs]
        return ops.ended_claims(self.using, claims) if claims else {}

    @retried
    def register_worker(
        self,
        worker_id: str,
        *,
        hostname: str,
        pid: int,
        queues: Sequence[str],
        concurrency: int,
        stale_after: Duration = WORKER_STALE_AFTER,
        concurrency_range: tuple[int, int] | None = None,
        listen: str | None = None,
    ) -> None:
        """Record a running worker (``queues`` empty = every queue), replacing a stale row of the same id.

        ``concurrency`` is the slots it runs now (``resize_worker`` records a
        change); ``concurrency_range`` the ``(MIN, MAX)`` of a worker started
        with ``--concurrency MIN:MAX``, None for a fixed one; ``listen`` the
        state of its LISTEN (``record_listen``). Raise
        ``WorkerIdInUse`` if another worker's row of that id has beaten within
        ``stale_after``.
        """
        queues_json = json.dumps([check_queue(queue) for queue in queues])
        worker_id = check_worker_id(worker_id)
        window = to_seconds(stale_after, "stale_after")
        bounds = None if concurrency_range is None else check_concurrency_range(concurrency_range)
        registered = ops.register_worker(
            self.using, worker_id, hostname, pid, queues_json, concurrency, window, bounds, listen
        )
        if not registered:
            holder = ops.live_worker(self.using, worker_id)
            where = f" (host {holder[0]}, pid {holder[1]}, last heartbeat {holder[2]})" if holder else ""
            raise WorkerIdInUse(
                f"worker id {worker_id!r} is held by a live worker{where}; give each worker its own "
                f"--worker-id, or wait until that one stops or its heartbeat is {window:g}s old"
            )

    @retried
    def worker_heartbeat(self, worker_id: str) -> bool:
        """Mark a worker alive now; False if its row is gone (pruned while it was cut off)."""
        return ops.beat_worker(self.using, check_worker_id(worker_id))

    @retried
    def resize_worker(self, worker_id: str, concurrency: int) -> bool:
        """Record that a worker now runs ``concurrency`` slots; False if its row is gone."""
        return ops.resize_worker(self.using, check_worker_id(worker_id), concurrency)

    @retried
    def record_listen(self, worker_id: str, listen: str) -> bool:
        """Record a worker's LISTEN state, one of ``Worker.LISTEN_STATES``; False if its row is gone."""
        if listen not in Worker.LISTEN_STATES:
            raise ValueError(f"listen must be one of {', '.join(Worker.LISTEN_STATES)}, not {listen!r}")
        return ops.record_listen(self.using, check_worker_id(worker_id), listen)

    def probe_listen(self, token: str) -> bool:
        """Send ``token`` to the LISTENs of this database, through this client's connection.

        The NOTIFY goes out when the statement commits (autocommit: at once),
        on ``PROBE_CHANNEL``, which listeners ignore unless the token is
        theirs. Return False, sending nothing, where the engine has no
        LISTEN/NOTIFY (SQLite).
        """
        return ops.notify_probe(self.using, token)

    @retried
    def unregister_worker(self, worker_id: str) -> bool:
        """Delete a stopping worker's row; False if it was already gone."""
        return ops.unregister_worker(self.using, check_worker_id(worker_id))

    @retried
    def prune_workers(self, older_than: Duration) -> int:
        """Delete the rows of workers silent for more than ``older_than``; return how many."""
        return ops.prune_workers(self.using, to_seconds(older_than, "older_than"))
