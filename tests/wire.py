"""A recorder of what clients send PostgreSQL: a TCP relay that reads the SQL off the wire.

Everything a process connected through it sends goes by, whoever sent it:
Django's cursors, the queue's own psycopg cursors and pipelines, the
listener, a worker's children. It reads the frontend messages that carry
SQL (``Query``, and ``Parse`` of the extended protocol) and passes every
byte on unchanged; it answers an SSL or GSS encryption request with "no"
itself, so that what follows stays readable.
"""

from __future__ import annotations

import itertools
import socket
import struct
import threading
from dataclasses import dataclass

SSL_REQUEST, GSS_REQUEST, CANCEL_REQUEST = 80877103, 80877104, 80877102


@dataclass(frozen=True)
class Sent:
    """One statement's text as a client sent it, and which of the relay's connections sent it."""

    connection: int
    kind: str  # "query" (the simple protocol) or "parse" (the extended one)
    sql: str


class WireRecorder:
    """Listen on a free local port; relay each connection to ``host:port``; keep ``statements``."""

    def __init__(self, host: str, port: int) -> None:
        self.upstream = (host, port)
        self.statements: list[Sent] = []
        self._numbers = itertools.count(1)
        self._server = socket.create_server(("127.0.0.1", 0))
        self.port: int = self._server.getsockname()[1]
        self._stopped = threading.Event()
        threading.Thread(target=self._accept, name="wire-recorder", daemon=True).start()

    def stop(self) -> None:
        self._stopped.set()
        self._server.close()

    def _accept(self) -> None:
        while not self._stopped.is_set():
            try:
                client, _ = self._server.accept()
            except OSError:
                return
            server = socket.create_connection(self.upstream)
            number = next(self._numbers)
            threading.Thread(target=self._relay_client, args=(number, client, server), daemon=True).start()
            threading.Thread(target=_pass_on, args=(server, client), daemon=True).start()

    def _relay_client(self, number: int, client: socket.socket, server: socket.socket) -> None:
        try:
            while True:  # the startup packet, after any encryption requests
                head = _read(client, 8)
                length, code = struct.unpack("!ii", head)
                body = _read(client, length - 8)
                if code in (SSL_REQUEST, GSS_REQUEST):
                    client.sendall(b"N")
                    continue
                server.sendall(head + body)
                if code == CANCEL_REQUEST:
                    return
                break
            while True:
                head = _read(client, 5)
                kind, length = head[:1], struct.unpack("!i", head[1:])[0]
                body = _read(client, length - 4)
                if kind == b"Q":
                    self.statements.append(Sent(number, "query", body[:-1].decode()))
                elif kind == b"P":
                    name_end = body.index(b"\0")
                    sql = body[name_end + 1 : body.index(b"\0", name_end + 1)].decode()
                    self.statements.append(Sent(number, "parse", sql))
                server.sendall(head + body)
        except OSError:
            pass
        finally:
            _close(client, server)


def _read(sock: socket.socket, size: int) -> bytes:
    data = b""
    while len(data) < size:
        chunk = sock.recv(size - len(data))
        if not chunk:
            raise ConnectionResetError("closed")
        data += chunk
    return data


def _pass_on(source: socket.socket, target: socket.socket) -> None:
    try:
        while chunk := source.recv(65536):
            target.sendall(chunk)
    except OSError:
        pass
    finally:
        _close(source, target)


def _close(*sockets: socket.socket) -> None:
    for sock in sockets:
        try:
            sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        sock.close()
