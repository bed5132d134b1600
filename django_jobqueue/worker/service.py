"""The shape of every background duty of a worker: one thread, one loop, start() and stop()."""

from __future__ import annotations

import threading

from django.db import connections


class Service:
    """A background duty that runs ``run()`` in its own daemon thread until ``stop()``.

    The thread has its own database connections (Django's are per thread) and
    closes them when the loop ends. A daemon thread, so that a duty stuck in a
    network call can never keep a stopping worker alive.
    """

    name = "service"

    def __init__(self) -> None:
        self._stopping = threading.Event()
        self._nudged = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        if self._thread is None:
            self._thread = threading.Thread(target=self._main, name=f"jobqueue-{self.name}", daemon=True)
            self._thread.start()

    def stop(self, timeout: float = 5.0) -> None:
        """Ask the loop to end and wait up to ``timeout`` seconds for it; safe to call twice."""
        self._stopping.set()
        self._nudged.set()
        thread = self._thread
        if thread is not None and thread is not threading.current_thread():
            thread.join(timeout)

    def nudge(self) -> None:
        """Cut the loop's current pause short."""
        # Nudged once per claiming round: skip the Event's lock when it is already set.
        if not self._nudged.is_set():
            self._nudged.set()

    @property
    def alive(self) -> bool:
        """Whether the loop's thread runs now (False before ``start()`` and once it ended)."""
        return self._thread is not None and self._thread.is_alive()

    @property
    def stopping(self) -> bool:
        return self._stopping.is_set()

    def pause(self, seconds: float) -> bool:
        """Wait up to ``seconds`` or until nudged; return False once the service is stopping."""
        if seconds > 0:
            self._nudged.wait(seconds)
        self._nudged.clear()
        return not self._stopping.is_set()

    def run(self) -> None:
        raise NotImplementedError

    def _main(self) -> None:
        try:
            self.run()
        finally:
            connections.close_all()
