"""``runworker --metrics-port``: the worker's series, its health, and the server of both.

Imported only when the option is given (``metrics.py`` imports
``prometheus_client``). The worker's parts report to ``WorkerMetrics``
through hooks the supervisor sets; this serves what they report.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from ..outage import listen
from .health import Health, MetricsServer
from .metrics import WorkerMetrics

logger = logging.getLogger(__name__)


class Observer:
    """The worker's metrics and health, served on ``/metrics`` and ``/healthz``."""

    def __init__(
        self, host: str, port: int, metrics: WorkerMetrics, vital_threads: Callable[[], dict[str, bool]]
    ) -> None:
        self.metrics = metrics
        self.health = Health(metrics, vital_threads)
        self.server = MetricsServer(host, port, metrics, self.health)
        self._stop_listening: Callable[[], None] | None = None

    def start(self, worker_id: str) -> str | None:
        """Serve, and count the database's failures; or say why it cannot listen."""
        server = self.server
        try:
            server.start()
        except OSError as exc:
            return f"--metrics-port: cannot listen on {server.host}:{server.port}: {exc}"
        logger.info(
            "worker %s: metrics on %s/metrics, health on %s/healthz",
            worker_id,
            server.address,
            server.address,
        )
        self._stop_listening = listen(self.metrics.database_failed)
        return None

    def stop(self) -> None:
        if self._stop_listening is not None:
            self._stop_listening()
        self.server.stop()
