"""The worker's HTTP endpoint (``runworker --metrics-port``): ``/metrics`` and ``/healthz``.

http.server's request handler behind the acceptor of ``acceptor.py``: one
daemon thread of the worker process holds every connection, and a request
gets a thread of its own only once it has come whole, a few at once, within
a few seconds of its connection. ``/metrics`` is prometheus_client's
exposition of the worker's own registry (``metrics.py``); ``/healthz``
answers 200 while the worker can do its work and 503 with the reason
otherwise. The rule (``Health.problems``):

- the worker has started its loops (registered, slots and threads up);
- the claimer thread and the heartbeat thread are alive;
- neither claiming, the heartbeat nor registering is in a database outage now
  (their last call failed: ``worker/outage.py`` tells the metrics of every failure
  and every recovery);
- a claim round or a heartbeat reached the database within
  ``CONTACT_BOUND`` seconds: three of the idle heartbeat's 10 s beats, so a
  worker whose calls hang (a partition that drops packets, a lock that never
  comes) is seen too, not only one whose calls fail.

Any other path is a 404. The server's request lines go to the debug log, not
the console.
"""

from __future__ import annotations

import io
import logging
import time
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler
from socketserver import BaseServer
from typing import cast

from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from .acceptor import Acceptor, Request, listening_socket
from .heartbeat import MAX_INTERVAL
from .metrics import WorkerMetrics

logger = logging.getLogger(__name__)

# Seconds without a successful claim round or heartbeat before /healthz says 503.
CONTACT_BOUND = 3 * MAX_INTERVAL
# The duties without which the worker does no work: an outage of one of them is a 503.
VITAL_DUTIES = ("registering", "claiming", "heartbeat")


class Health:
    """What ``/healthz`` answers: the reasons the worker is unwell now, if any."""

    def __init__(self, metrics: WorkerMetrics, threads: Callable[[], dict[str, bool]]) -> None:
        self.metrics = metrics
        self.threads = threads  # "claimer" -> alive; None until the worker has started its loops
        self.started = False

    def problems(self) -> list[str]:
        """Each reason for a 503, in words an operator can act on; empty while healthy."""
        if not self.started:
            return ["starting: the worker has not registered and started its loops yet"]
        found = [f"the {name} thread has stopped" for name, alive in self.threads().items() if not alive]
        found.extend(self.metrics.failures.failing(VITAL_DUTIES))
        silent = time.monotonic() - self.metrics.last_contact
        if silent > CONTACT_BOUND:
            found.append(f"no claim round or heartbeat reached the database for {silent:.1f}s")
        return found


class MetricsServer:
    """Serves ``/metrics`` and ``/healthz`` on ``host:port``: connections are the acceptor's."""

    def __init__(self, host: str, port: int, metrics: WorkerMetrics, health: Health) -> None:
        self.host = host
        self.port = port
        self.metrics = metrics
        self.health = health
        self._acceptor: Acceptor | None = None

    def start(self) -> None:
        """Listen and serve; raise ``OSError`` if the address cannot be bound (in use, not ours)."""
        self._acceptor = Acceptor(listening_socket(self.host, self.port), self._handler())
        self._acceptor.start()

    def stop(self) -> None:
        """Stop serving and close the socket; safe to call twice."""
        acceptor, self._acceptor = self._acceptor, None
        if acceptor is not None:
            acceptor.stop()

    @property
    def address(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self.port}"

    def _handler(self) -> Callable[[Request], object]:
        metrics, health = self.metrics, self.health

        class Handler(BaseHTTPRequestHandler):
            def __init__(self, request: Request) -> None:
                self.head = bytes(request.head)
                # http.server's handlers run in their constructor; none of this one's uses a server.
                super().__init__(request.sock, request.address, cast(BaseServer, None))

            def setup(self) -> None:
                super().setup()
                # The acceptor has read the request's head already: it is parsed from there.
                self.rfile.close()
                self.rfile = io.BytesIO(self.head)

            def do_GET(self) -> None:  # noqa: N802 - http.server's name
                path = self.path.split("?", 1)[0]
                if path == "/metrics":
                    self._send(200, CONTENT_TYPE_LATEST, generate_latest(metrics.registry))
                elif path == "/healthz":
                    problems = health.problems()
                    body = "\n".join(problems) if problems else "ok"
                    self._send(503 if problems else 200, "text/plain; charset=utf-8", f"{body}\n".encode())
                else:
                    self._send(404, "text/plain; charset=utf-8", b"not found: try /metrics or /healthz\n")

            def _send(self, status: int, content_type: str, body: bytes) -> None:
                self.send_response(status)
                self.send_header("Content-Type", content_type)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, format: str, *args: object) -> None:  # noqa: A002 - http.server's name
                logger.debug("metrics endpoint: " + format, *args)

        return Handler
