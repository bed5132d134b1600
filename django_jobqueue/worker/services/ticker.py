"""Upkeep on a timer: rescue expired claims, forget dead workers, prune finished jobs.

Every worker runs one; many at once are safe, since ``tick_timeouts`` hands each
expired claim to exactly one of them. The tick runs every half of the worker's
visibility timeout (between 0.2 s and 15 s), jittered by ±20 % so that workers
started together do not tick in step: a claim is rescued at most about half a
timeout after it expired. Worker rows silent for 60 s are deleted, batches
and dependencies that an operator's open transaction kept an ack from
settling are settled (a backstop), and done and cancelled jobs older than
``KEEP_COMPLETED`` are pruned every 5 minutes.
"""

from __future__ import annotations

import logging
import random
import time
from collections.abc import Callable

from ...queue import WORKER_STALE_AFTER, QueueClient
from ..outage import DATABASE_ERRORS, Outage
from ..service import Service

logger = logging.getLogger(__name__)

MIN_INTERVAL = 0.2
MAX_INTERVAL = 15.0
JITTER = 0.2
PRUNE_EVERY = 300.0


def tick_interval(visibility_timeout: float) -> float:
    return min(MAX_INTERVAL, max(MIN_INTERVAL, visibility_timeout / 2))


class Ticker(Service):
    """Runs ``tick_timeouts`` and the rest of the upkeep every ``interval`` seconds."""

    name = "ticker"

    def __init__(self, client: QueueClient, interval: float, on_rescue: Callable[[], None]) -> None:
        super().__init__()
        self.client = client
        self.interval = interval
        self.on_rescue = on_rescue

    def run(self) -> None:
        outage = Outage("ticker", self.client.using)
        next_prune = time.monotonic() + random.uniform(0, PRUNE_EVERY)
        while not self.stopping:
            pause = self.interval * random.uniform(1 - JITTER, 1 + JITTER)
            try:
                self.tick()
                if time.monotonic() >= next_prune:
                    next_prune = time.monotonic() + PRUNE_EVERY
                    self.prune()
                outage.recovered()
            except DATABASE_ERRORS as exc:
                pause = outage.failed(exc)
            self.pause(pause)

    def tick(self) -> None:
        handled = self.client.tick_timeouts()
        if handled:
            logger.warning("rescued %s expired claim(s): back to ready, or dead letter if spent", handled)
            self.on_rescue()
        self.client.finish_batches()
        released = self.client.repair_dependencies()
        if released:
            logger.info("released %s waiting job(s) whose last dependency's ack passed them over", released)
        stale = self.client.prune_workers(WORKER_STALE_AFTER)
        if stale:
            logger.info("deleted %s stale worker row(s)", stale)

    def prune(self) -> None:
        pruned = self.client.prune()
        if pruned:
            logger.info("pruned %s finished job(s)", pruned)
