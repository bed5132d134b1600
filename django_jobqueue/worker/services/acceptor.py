"""The connections of ``runworker --metrics-port``: read in one thread, answered by a few.

A server with a thread per connection (``ThreadingHTTPServer``) holds that
thread for as long as the client keeps the connection open: 400 idle
connections held 400 threads, for ever. Here one thread, the acceptor's,
accepts every connection and reads its request's head without blocking; only
a request that has come whole gets a thread to answer it. So:

- an idle or slow client (one that sends its request a byte at a time) costs
  a socket, never a thread, and is closed ``REQUEST_TIMEOUT`` seconds after
  it connected if its request has not come by then;
- at most ``MAX_WAITING`` connections wait for their request. One more closes
  the one that has waited longest: a probe or a scrape sends its request at
  once, so the longest silent is the least likely to be one, and a flood of
  connections cannot take the file descriptors the worker needs for its
  database;
- at most ``MAX_REQUESTS`` requests are answered at once. One more is answered
  503 at once by the acceptor itself: its client asked and waits, and a
  status says why where a closed connection would not; it costs no thread;
- an answer is written within what is left of ``REQUEST_TIMEOUT`` (the
  socket's timeout), so a client that does not read cannot hold its thread.

``/healthz`` so answers within milliseconds however many clients sit idle.
"""

from __future__ import annotations

import logging
import selectors
import socket
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

logger = logging.getLogger(__name__)

# Seconds from a connection's accept to the end of its answer; a request not come by then is dropped.
REQUEST_TIMEOUT = 5.0
# Requests answered at once, each in a thread of its own: Prometheus and a probe or two need three.
MAX_REQUESTS = 8
# Connections whose request has not come yet; one more closes the one that has waited longest.
MAX_WAITING = 256
# A request line and its headers; a GET has no body. A longer head is dropped.
MAX_HEAD_BYTES = 16 * 1024
# Connections the kernel queues before the acceptor takes them (the system may cap it lower:
# net.core.somaxconn). Past it the kernel drops a connection's handshake and the client tries
# again a second later, then two more: a burst of a few hundred must fit, or it waits seconds.
BACKLOG = 1024
_BUSY_TEXT = b"busy: too many requests at once, try again soon\n"
BUSY = (
    b"HTTP/1.0 503 Service Unavailable\r\nContent-Type: text/plain; charset=utf-8\r\n"
    b"Content-Length: %d\r\nConnection: close\r\n\r\n%s" % (len(_BUSY_TEXT), _BUSY_TEXT)
)


@dataclass(eq=False)
class Request:
    """A connection, and the head of its request as read so far."""

    sock: socket.socket
    address: Any
    deadline: float  # monotonic: REQUEST_TIMEOUT after its accept
    head: bytearray = field(default_factory=bytearray)

    @property
    def complete(self) -> bool:
        # http.server also takes lines that end in a bare LF.
        return b"\r\n\r\n" in self.head or b"\n\n" in self.head


def listening_socket(host: str, port: int) -> socket.socket:
    """A socket listening on ``host:port``, IPv6 when the host is an IPv6 address.

    Raise ``OSError`` if the address cannot be bound (in use, not this machine's).
    """
    family = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)[0][0]
    sock = socket.socket(family, socket.SOCK_STREAM)
    try:
        # As http.server does: a restarted worker binds its port again at once.
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((host, port))
        sock.listen(BACKLOG)
    except OSError:
        sock.close()
        raise
    return sock


class Acceptor:
    """Accepts on ``sock`` and reads each request's head; ``answer(request)`` in a thread for each."""

    def __init__(self, sock: socket.socket, answer: Callable[[Request], object]) -> None:
        self.sock = sock
        self.answer = answer
        self._slots = threading.BoundedSemaphore(MAX_REQUESTS)
        self._waiting: dict[socket.socket, Request] = {}  # oldest first: each has the same timeout
        self._wake, self._waker = socket.socketpair()
        self._stopping = False
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="jobqueue-metrics", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        """Stop accepting, close every waiting connection and the socket; safe to call twice."""
        self._stopping = True
        try:
            self._waker.send(b"\0")
        except OSError:
            pass  # stopped already: the loop closed it
        if self._thread is not None:
            self._thread.join(REQUEST_TIMEOUT)

    def _run(self) -> None:
        self.sock.setblocking(False)
        selector = selectors.DefaultSelector()
        selector.register(self.sock, selectors.EVENT_READ)
        selector.register(self._wake, selectors.EVENT_READ)
        try:
            while not self._stopping:
                for key, _events in selector.select(self._until_first_deadline()):
                    if key.fileobj is self.sock:
                        self._accept(selector)
                    elif key.data is not None:
                        self._read(selector, key.data)
                self._expire(selector)
        finally:
            for request in list(self._waiting.values()):
                self._drop(selector, request)
            selector.close()
            for sock in (self.sock, self._wake, self._waker):
                sock.close()

    def _accept(self, selector: selectors.BaseSelector) -> None:
        # Every connection queued, not one per wake-up: a burst is taken in one go.
        while True:
            try:
                sock, address = self.sock.accept()
            except BlockingIOError:
                return
            except OSError as exc:
                # Out of file descriptors: the longest waiting connection gives its own back.
                if not self._waiting:
                    logger.warning("metrics endpoint: cannot accept a connection: %s", exc)
                    time.sleep(0.1)  # the listening socket stays readable: do not spin
                    return
                self._drop(selector, next(iter(self._waiting.values())))
                continue
            sock.setblocking(False)
            request = Request(sock, address, time.monotonic() + REQUEST_TIMEOUT)
            self._waiting[sock] = request
            selector.register(sock, selectors.EVENT_READ, request)
            if len(self._waiting) > MAX_WAITING:
                self._drop(selector, next(iter(self._waiting.values())))

    def _read(self, selector: selectors.BaseSelector, request: Request) -> None:
        try:
            data = request.sock.recv(4096)
        except BlockingIOError:
            return
        except OSError:
            data = b""  # reset by the client: as gone as a close
        request.head += data
        if not data or len(request.head) > MAX_HEAD_BYTES:
            self._drop(selector, request)
        elif request.complete:
            selector.unregister(request.sock)
            del self._waiting[request.sock]
            self._dispatch(request)

    def _dispatch(self, request: Request) -> None:
        if not self._slots.acquire(blocking=False):
            try:
                request.sock.send(BUSY)  # a few bytes into an empty buffer: never blocks
            except OSError:
                pass
            request.sock.close()
            return
        # Blocking again, for http.server, but only for what is left of the request's time.
        request.sock.settimeout(max(request.deadline - time.monotonic(), 0.001))
        thread = threading.Thread(target=self._answer, args=(request,), name="jobqueue-metrics-request")
        thread.daemon = True
        try:
            thread.start()
        except RuntimeError:  # no thread to be had: the request is dropped, the slot kept
            self._slots.release()
            request.sock.close()

    def _answer(self, request: Request) -> None:
        try:
            self.answer(request)
        except OSError as exc:  # the client went away, or read too slowly
            logger.debug("metrics endpoint: %s: %s", request.address, exc)
        except Exception:
            logger.exception("metrics endpoint: the answer to %s failed", request.address)
        finally:
            request.sock.close()
            self._slots.release()

    def _until_first_deadline(self) -> float | None:
        if not self._waiting:
            return None
        first = next(iter(self._waiting.values()))
        return max(first.deadline - time.monotonic(), 0.0)

    def _expire(self, selector: selectors.BaseSelector) -> None:
        now = time.monotonic()
        while self._waiting:
            first = next(iter(self._waiting.values()))
            if first.deadline > now:
                return
            self._drop(selector, first)

    def _drop(self, selector: selectors.BaseSelector, request: Request) -> None:
        selector.unregister(request.sock)
        del self._waiting[request.sock]
        request.sock.close()
