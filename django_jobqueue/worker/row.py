"""The worker's row in the workers table: written at start, again after a prune, deleted at stop.

The row tells the admin and ``jobqueue status`` who is working, and holds the
worker's id against another live worker taking it (``WorkerIdInUse``).
"""

from __future__ import annotations

import logging
import os
import socket
import threading
from collections.abc import Callable

from ..queue import WORKER_STALE_AFTER, QueueClient
from .config import WorkerConfig
from .outage import DATABASE_ERRORS, Outage

logger = logging.getLogger(__name__)


class WorkerRow:
    """One worker's row; ``slots`` tells the slot count to write."""

    def __init__(
        self,
        client: QueueClient,
        config: WorkerConfig,
        slots: Callable[[], int],
        listen: Callable[[], str] = lambda: "off",
    ) -> None:
        self.client = client
        self.config = config
        self.slots = slots
        self.listen = listen  # the state of its LISTEN, as Worker.listen records it

    def write(self) -> None:
        """Register the worker; raise ``WorkerIdInUse`` if a live worker holds its id."""
        slot_range = self.config.slot_range
        self.client.register_worker(
            self.config.worker_id,
            hostname=socket.gethostname()[:255],
            pid=os.getpid(),
            queues=[name for name, _weight in self.config.queues],
            concurrency=self.slots(),
            stale_after=WORKER_STALE_AFTER,
            # For the admin: "4 (range 2–8)". Fixed for the worker's life; a resize writes the count.
            concurrency_range=None if slot_range.fixed else (slot_range.minimum, slot_range.maximum),
            listen=self.listen(),
        )

    def write_until(self, stopping: threading.Event) -> bool:
        """Register, through any outage; False if ``stopping`` was set first.

        Raise ``WorkerIdInUse`` if a live worker holds the id.
        """
        outage = Outage("registering", self.config.using)
        while not stopping.is_set():
            try:
                self.write()
            except DATABASE_ERRORS as exc:
                stopping.wait(outage.failed(exc))
                continue
            outage.recovered()
            return True
        return False

    def record_listen(self, state: str) -> None:
        """Record the state of the worker's LISTEN; a failure is left to the next registration."""
        try:
            self.client.record_listen(self.config.worker_id, state)
        except DATABASE_ERRORS as exc:
            logger.debug(
                "worker %s: could not record its LISTEN as %s (%s)", self.config.worker_id, state, exc
            )

    def delete(self) -> None:
        """Unregister; a row left behind is pruned once stale."""
        try:
            self.client.unregister_worker(self.config.worker_id)
        except DATABASE_ERRORS as exc:
            logger.warning(
                "worker %s: could not delete its row (%s); it is pruned when stale",
                self.config.worker_id,
                exc,
            )
