"""The worker's HTTP endpoint (``runworker --metrics-port``): ``/metrics`` and ``/healthz``.

A small ``ThreadingHTTPServer`` in a daemon thread of the worker process.
``/metrics`` is prometheus_client's exposition of the worker's own registry
(``metrics.py``); ``/healthz`` answers 200 while the worker can do its work and
503 with the reason otherwise. The rule (``Health.problems``):

- the worker has started its loops (registered, slots and threads up);
- the claimer thread and the heartbeat thread are alive;
- neither claiming, the heartbeat nor registering is in a database outage now
  (their last call failed: ``outage.py`` tells the metrics of every failure
  and every recovery);
- a claim round or a heartbeat reached the database within
  ``CONTACT_BOUND`` seconds: three of the idle heartbeat's 10 s beats, so a
  worker whose calls hang (a partition that drops packets, a lock that never
  comes) is seen too, not only one whose calls fail.

Any other path is a 404. The server's request lines go to the debug log, not
the console.
"""

from __future__ import annotations

import logging
import socket
import threading
import time
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

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
    """Serves ``/metrics`` and ``/healthz`` on ``host:port`` from a thread of its own."""

    def __init__(self, host: str, port: int, metrics: WorkerMetrics, health: Health) -> None:
        self.host = host
        self.port = port
        self.metrics = metrics
        self.health = health
        self._server: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        """Listen and serve; raise ``OSError`` if the address cannot be bound (in use, not ours)."""
        server = _server_for(self.host, self.port, self._handler())
        self._server = server
        self._thread = threading.Thread(target=server.serve_forever, name="jobqueue-metrics", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        """Stop serving and close the socket; safe to call twice."""
        server, self._server = self._server, None
        if server is not None:
            server.shutdown()
            server.server_close()

    @property
    def address(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self.port}"

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        metrics, health = self.metrics, self.health

        class Handler(BaseHTTPRequestHandler):
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


def _server_for(host: str, port: int, handler: type[BaseHTTPRequestHandler]) -> ThreadingHTTPServer:
    """A server bound to ``host:port``, IPv6 when the host is an IPv6 address."""
    family = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)[0][0]

    class Server(ThreadingHTTPServer):
        address_family = family
        daemon_threads = True

    return Server((host, port), handler)
