"""Keep the claims of running jobs alive, and the worker's own row.

A claim lasts the job's visibility timeout (or ``--visibility-timeout``) from
its last beat. The heartbeat beats every third of the shortest timeout among
the running jobs, so two beats in a row can fail before a claim expires; at
most every 10 s (the worker row's beat when nothing runs), and at least every
0.1 s. A job that starts nudges the heartbeat so that its claim is beaten in
time even if the worker was idle and beating slowly.

So a short visibility timeout finds a dead worker quickly, while a job that
runs ten times longer than it is never handed out twice: the claim dies with
the process, not with the timeout. All the running jobs' claims are extended
in one statement per beat, which passes over a row another transaction holds
(an operator's cancel, still open) instead of waiting on it with every other
claim: such a claim is named on the worker's row, and ``tick_timeouts``
leaves it alone while the row beats (``QueueClient.beat``).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence

from ...models import Job
from ...queue import QueueClient
from ..outage import DATABASE_ERRORS, Outage
from ..running import RunningJobs
from ..service import Service

logger = logging.getLogger(__name__)

MIN_INTERVAL = 0.1
MAX_INTERVAL = 10.0
# A third: a claim survives two failed beats in a row.
BEATS_PER_TIMEOUT = 3


def beat_interval(jobs: Sequence[Job], visibility_timeout: float | None) -> float:
    """Seconds between beats while ``jobs`` run."""
    if not jobs:
        return MAX_INTERVAL
    shortest = visibility_timeout or min(job.visibility_timeout for job in jobs)
    return min(MAX_INTERVAL, max(MIN_INTERVAL, shortest / BEATS_PER_TIMEOUT))


class Heartbeat(Service):
    """Extends the running jobs' claims and refreshes the worker row, on a timer."""

    name = "heartbeat"

    def __init__(
        self,
        client: QueueClient,
        worker_id: str,
        running: RunningJobs,
        visibility_timeout: float | None,
        register: Callable[[], None],
    ) -> None:
        super().__init__()
        self.client = client
        self.worker_id = worker_id
        self.running = running
        self.visibility_timeout = visibility_timeout
        self.register = register
        self._unheld: set[tuple[int, int]] = set()
        self._next_beat = 0.0  # monotonic time of the beat the thread waits for (0: not started)
        self._reported_lost: set[tuple[int, int]] = set()
        # runworker --metrics-port's: told of each beat that reached the database (health's clock).
        self.on_beat: Callable[[], None] | None = None

    def nudge_for(self, jobs: Sequence[Job]) -> None:
        """Wake the heartbeat if ``jobs``, just started, need a beat before the one it waits for.

        Most starts need none: a busy worker already beats at their pace, and
        waking the thread for nothing takes the CPU from the job that starts.
        """
        if self._next_beat > time.monotonic() + beat_interval(jobs, self.visibility_timeout):
            self.nudge()

    def run(self) -> None:
        outage = Outage("heartbeat", self.client.using)
        next_beat = time.monotonic()
        while not self.stopping:
            jobs = self.running.snapshot()
            interval = beat_interval(jobs, self.visibility_timeout)
            if time.monotonic() >= next_beat:
                try:
                    self.beat(jobs)
                    outage.recovered()
                    if self.on_beat is not None:
                        self.on_beat()
                    next_beat = time.monotonic() + interval
                except DATABASE_ERRORS as exc:
                    next_beat = time.monotonic() + min(interval, outage.failed(exc))
            else:
                # Nudged by a job that started: beat it within its own interval.
                next_beat = min(next_beat, time.monotonic() + interval)
            self._next_beat = next_beat
            # A job that started since the snapshot, whose claimer read the old _next_beat and so
            # did not nudge, is seen here: it was added to the running jobs before that read.
            started_since = self.running.snapshot()
            next_beat = min(
                next_beat, time.monotonic() + beat_interval(started_since, self.visibility_timeout)
            )
            self._next_beat = next_beat
            self.pause(next_beat - time.monotonic())

    def beat(self, jobs: Sequence[Job]) -> None:
        beat = self.client.beat(jobs, worker_id=self.worker_id, visibility_timeout=self.visibility_timeout)
        self._report_lost([job for job in jobs if job.pk not in beat.renewed and job.pk not in beat.held_up])
        if not beat.registered:
            logger.warning("worker %s: its row was pruned as stale; registering again", self.worker_id)
            self.register()

    def _report_lost(self, unheld: list[Job]) -> None:
        # A job that finished between the snapshot and the statement is not held
        # either; one still running at the next beat has truly lost its claim.
        previous, self._unheld = self._unheld, {(job.pk, job.claim_token) for job in unheld}
        for job in unheld:
            key = (job.pk, job.claim_token)
            if key in previous and key not in self._reported_lost:
                self._reported_lost.add(key)
                logger.warning(
                    "job %s id=%s attempt=%s: claim lost while running (it expired and was handed out "
                    "again, or the job was cancelled); its outcome will be refused",
                    job.name,
                    job.pk,
                    job.attempts,
                )
        self._reported_lost &= self._unheld
