"""The metrics endpoint's acceptor (``worker/acceptor.py``) on a real socket, with an answer of the test's.

The worker's own endpoint is tested through ``runworker`` in
tests/test_worker_metrics.py; here the acceptor's bounds are driven to their
edge, which a worker's quick answers never reach: every answering thread
busy, the waiting connections full, a head too long.
"""

from __future__ import annotations

import selectors
import socket
import threading
from collections.abc import Callable, Iterator

import pytest

from django_jobqueue.worker.services.acceptor import (
    MAX_HEAD_BYTES,
    MAX_REQUESTS,
    MAX_WAITING,
    Acceptor,
    Request,
    listening_socket,
)

OK = b"HTTP/1.0 200 OK\r\nContent-Length: 3\r\n\r\nok\n"


class Answers:
    """Answers each request 200, once ``release`` is set (from the start if ``released``); counts the
    requests being answered."""

    def __init__(self, released: bool = False) -> None:
        self.release = threading.Event()
        if released:
            self.release.set()
        self.answering = 0
        self.changed = threading.Condition()

    def __call__(self, request: Request) -> None:
        with self.changed:
            self.answering += 1
            self.changed.notify_all()
        self.release.wait(10)
        request.sock.sendall(OK)

    def wait_for(self, count: int) -> None:
        with self.changed:
            assert self.changed.wait_for(lambda: self.answering == count, 10), self.answering


@pytest.fixture
def serve() -> Iterator[Callable[[Answers], int]]:
    """Start an acceptor on a free port with the given answers; return its port."""
    acceptors: list[Acceptor] = []

    def start(answers: Answers) -> int:
        sock = listening_socket("127.0.0.1", 0)
        acceptor = Acceptor(sock, answers)
        acceptors.append(acceptor)
        port = int(sock.getsockname()[1])
        acceptor.start()
        return port

    yield start
    for acceptor in acceptors:
        acceptor.stop()


def connect(port: int) -> socket.socket:
    return socket.create_connection(("127.0.0.1", port), timeout=5)


def ask(sock: socket.socket) -> bytes:
    """Send a whole request and read the answer to its end (the server closes)."""
    sock.sendall(b"GET /healthz HTTP/1.1\r\nHost: test\r\n\r\n")
    answer = b""
    while chunk := sock.recv(4096):
        answer += chunk
    return answer


def closed_within(sock: socket.socket, seconds: float) -> bool:
    with selectors.DefaultSelector() as selector:
        selector.register(sock, selectors.EVENT_READ)
        if not selector.select(seconds):
            return False
    try:
        return sock.recv(1) == b""
    except ConnectionResetError:
        return True


def test_a_request_past_the_bound_is_answered_503_at_once_and_the_next_after_is_served(serve):
    answers = Answers()
    port = serve(answers)
    held = [connect(port) for _ in range(MAX_REQUESTS)]
    try:
        for sock in held:
            sock.sendall(b"GET /metrics HTTP/1.1\r\n\r\n")
        answers.wait_for(MAX_REQUESTS)
        with connect(port) as extra:
            answer = ask(extra)
        assert answer.startswith(b"HTTP/1.0 503 Service Unavailable\r\n")
        assert answer.endswith(b"\r\n\r\nbusy: too many requests at once, try again soon\n")
        answers.release.set()
        for sock in held:
            assert sock.recv(4096) == OK
        with connect(port) as after:
            assert ask(after) == OK
    finally:
        answers.release.set()
        for sock in held:
            sock.close()


def test_one_connection_past_the_waiting_bound_closes_the_one_that_waited_longest(serve):
    port = serve(Answers(released=True))
    waiting = [connect(port) for _ in range(MAX_WAITING)]
    try:
        first, second = waiting[0], waiting[1]
        with connect(port) as newest:
            assert closed_within(first, 5)
            assert not closed_within(second, 0.2)
            assert ask(newest) == OK
    finally:
        for sock in waiting:
            sock.close()


def test_a_head_longer_than_the_bound_is_dropped(serve):
    answers = Answers(released=True)
    port = serve(answers)
    with connect(port) as sock:
        sock.sendall(b"GET / HTTP/1.1\r\nX-Long: " + b"a" * MAX_HEAD_BYTES)
        assert closed_within(sock, 5)
    assert answers.answering == 0


def test_stop_closes_the_waiting_connections_and_the_port():
    answers = Answers()
    sock = listening_socket("127.0.0.1", 0)
    port = int(sock.getsockname()[1])
    acceptor = Acceptor(sock, answers)
    acceptor.start()
    with connect(port) as waiting:
        acceptor.stop()
        assert closed_within(waiting, 5)
    with pytest.raises(ConnectionRefusedError):
        connect(port)
    acceptor.stop()
