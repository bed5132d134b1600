"""What the claiming loop sleeps on between rounds.

Everywhere, the loop wakes at least every ``--poll-interval`` to look for due
jobs (a delayed job, a retry whose backoff ended, a claim rescued elsewhere),
and at once when one of its own slots frees up.

Where the database has LISTEN/NOTIFY (PostgreSQL), a listener thread also
holds a connection of its own that ``LISTEN``s on ``queue.NOTIFY_CHANNEL``.
Every enqueue notifies it with the queue name when its transaction commits, so
an idle worker starts a new job within milliseconds instead of at the next
poll. Notifications for queues the worker does not serve are ignored. It also
``LISTEN``s on ``queue.CANCEL_CHANNEL``, which a cancel of a running job
notifies: the cancel watch then looks at once instead of within a second. The
listener is a shortcut, never a dependency: if its connection drops, it
reconnects with backoff while polling carries on, and after reconnecting it
wakes the loop once for what it may have missed.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Collection
from typing import Any

from django.db import connections

from ...queue import CANCEL_CHANNEL, NOTIFY_CHANNEL, engine_for
from ..outage import FIRST_DELAY, MAX_DELAY
from ..service import Service

logger = logging.getLogger(__name__)

# How often the listener looks up from its socket to see whether it should stop:
# short, because a stopping worker waits for it to close its connection.
LISTEN_SLICE = 0.1


class Wakeup:
    """An event the claiming loop waits on, set by slots, signals and notifications."""

    def __init__(
        self,
        using: str,
        queues: Collection[str],
        poll_interval: float,
        on_cancel: Callable[[], None] | None = None,
    ) -> None:
        self.poll_interval = poll_interval
        self.on_cancel = on_cancel  # told of a running job cancelled somewhere
        self._event = threading.Event()
        self._lock = threading.Lock()
        self._notified: set[str] = set()
        self.listener: Listener | None = None
        if engine_for(connections[using]).supports_listen_notify:
            self.listener = Listener(using, frozenset(queues), self)

    @property
    def method(self) -> str:
        return "LISTEN/NOTIFY" if self.listener else f"polling every {self.poll_interval:g}s"

    def start(self) -> None:
        if self.listener:
            self.listener.start()

    def stop(self) -> None:
        if self.listener:
            self.listener.stop(timeout=LISTEN_SLICE * 5)

    def wake(self, queue: str | None = None) -> None:
        """Wake the loop; ``queue`` names a queue that was just enqueued into."""
        if queue is not None:
            with self._lock:
                self._notified.add(queue)
        # Every finished job wakes the loop: skip the Event's lock when it is already set.
        if not self._event.is_set():
            self._event.set()

    def clear(self) -> None:
        """Called before a claiming round, so that a wake-up during the round is not lost."""
        self._event.clear()

    def wait(self, timeout: float | None = None) -> None:
        self._event.wait(self.poll_interval if timeout is None else timeout)

    def take_notified(self) -> set[str]:
        """Return and forget the queues enqueued into since the last call."""
        with self._lock:
            notified, self._notified = self._notified, set()
        return notified


class Listener(Service):
    """LISTENs on a dedicated psycopg connection and wakes the loop on new jobs."""

    name = "listener"

    def __init__(self, using: str, queues: frozenset[str], wakeup: Wakeup) -> None:
        super().__init__()
        self.using = using
        self.queues = queues  # empty: every queue
        self.wakeup = wakeup
        self.listening = threading.Event()

    def run(self) -> None:
        import psycopg

        failures = 0
        while not self.stopping:
            try:
                with psycopg.connect(**self._connection_params()) as conn:
                    conn.execute(f"LISTEN {CANCEL_CHANNEL}")
                    conn.execute(f"LISTEN {NOTIFY_CHANNEL}")
                    if failures:
                        logger.info("listener: listening again after %s failure(s)", failures)
                        self.wakeup.wake()  # for what was enqueued while it was cut off
                    failures = 0
                    self.listening.set()
                    self._listen(conn)
            except psycopg.Error as exc:
                self.listening.clear()
                failures += 1
                delay = min(MAX_DELAY, FIRST_DELAY * 2 ** min(failures - 1, 16))
                logger.warning(
                    "listener: connection lost (%s: %s); polling meanwhile, reconnecting in %.2fs",
                    type(exc).__name__,
                    str(exc).strip(),
                    delay,
                )
                self.pause(delay)
        self.listening.clear()

    def _listen(self, conn: Any) -> None:
        while not self.stopping:
            for notify in conn.notifies(timeout=LISTEN_SLICE):
                if notify.channel == CANCEL_CHANNEL:
                    if self.wakeup.on_cancel is not None:
                        self.wakeup.on_cancel()
                elif not self.queues or notify.payload in self.queues:
                    self.wakeup.wake(notify.payload)

    def _connection_params(self) -> dict[str, Any]:
        """The Django connection's parameters, less what only Django's own cursors use."""
        params = connections[self.using].get_connection_params()
        for django_only in ("cursor_factory", "context"):
            params.pop(django_only, None)
        params.setdefault("connect_timeout", 10)
        params["autocommit"] = True
        return params
