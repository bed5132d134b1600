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

The listener's connection is ``JOBQUEUE["LISTEN_DATABASE"]``'s alias
(``conf.listen_alias``): the queue's own by default, a direct connection when
the queue's goes through a pooler in transaction mode, where a LISTEN hears
nothing. Each time it starts listening it proves it can hear: it sends a
NOTIFY to itself through the queue's connection, the producers' path, and
waits ``PROBE_WAIT`` for it. A LISTEN that never hears its probe is deaf: the
worker says so once, naming the setting, closes the listener and polls.
"""

from __future__ import annotations

import logging
import secrets
import threading
import time
from collections.abc import Callable, Collection
from typing import Any

from django.db import connections

from ...queue import CANCEL_CHANNEL, NOTIFY_CHANNEL, PROBE_CHANNEL, engine_for
from ..outage import DATABASE_ERRORS, FIRST_DELAY, MAX_DELAY, close_connection
from ..service import Service

logger = logging.getLogger(__name__)

# How often the listener looks up from its socket to see whether it should stop:
# short, because a stopping worker waits for it to close its connection.
LISTEN_SLICE = 0.1

# Seconds a listener waits for its probe before it takes its LISTEN for deaf. A NOTIFY
# takes milliseconds to arrive; this is room for a loaded server, and the claiming
# loop does not wait for it (it polls meanwhile, as it always does).
PROBE_WAIT = 3.0

# The states of a worker's LISTEN, as its row records them (``Worker.listen``).
CHECKING, LIVE, DEAF, OFF = "checking", "live", "deaf", "off"


class Wakeup:
    """An event the claiming loop waits on, set by slots, signals and notifications."""

    def __init__(
        self,
        using: str,
        queues: Collection[str],
        poll_interval: float,
        on_cancel: Callable[[], None] | None = None,
        *,
        listen_using: str | None = None,
        probe: Callable[[str], object] | None = None,
        on_listen: Callable[[str], None] | None = None,
    ) -> None:
        """``listen_using`` is the alias to LISTEN on (None: poll only); ``probe`` sends a token
        to the LISTENs of ``using``'s database; ``on_listen`` is told each new ``listen_state``."""
        self.using = using  # the queue's database, whose connection the probe goes through
        self.poll_interval = poll_interval
        self.on_cancel = on_cancel  # told of a running job cancelled somewhere
        self.on_listen = on_listen
        self._event = threading.Event()
        self._lock = threading.Lock()
        self._notified: set[str] = set()
        self.listener: Listener | None = None
        if listen_using is not None and engine_for(connections[using]).supports_listen_notify:
            self.listener = Listener(listen_using, frozenset(queues), self, probe)

    @property
    def listen_state(self) -> str:
        """``"off"`` (polling only), else the listener's: ``"checking"``, ``"live"`` or ``"deaf"``."""
        return self.listener.state if self.listener else OFF

    @property
    def method(self) -> str:
        polling = f"polling every {self.poll_interval:g}s"
        if self.listener is None:
            return polling
        if self.listener.state == DEAF:
            return f"{polling} (LISTEN on {self.listener.using!r} deaf)"
        return f"LISTEN/NOTIFY on {self.listener.using!r}"

    def listen_changed(self, state: str) -> None:
        if self.on_listen is not None:
            self.on_listen(state)

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

    def __init__(
        self,
        using: str,
        queues: frozenset[str],
        wakeup: Wakeup,
        probe: Callable[[str], object] | None = None,
    ) -> None:
        super().__init__()
        self.using = using  # the alias it LISTENs on
        self.queues = queues  # empty: every queue
        self.wakeup = wakeup
        self.probe = probe  # None: its LISTEN is taken on trust, never checked
        self.listening = threading.Event()
        self.state = CHECKING
        self._token: str | None = None  # the probe sent and not heard yet
        self._probe_sent = self._probe_deadline = 0.0

    def run(self) -> None:
        import psycopg

        # The probe goes through Django's connection to the queue, whose errors are Django's.
        lost: tuple[type[Exception], ...] = (psycopg.Error, *DATABASE_ERRORS)
        failures = 0
        while not self.stopping and self.state != DEAF:
            try:
                with psycopg.connect(**self._connection_params()) as conn:
                    # The new jobs' channel last: pg_stat_activity shows a listening
                    # worker's connection as "LISTEN django_jobqueue", as it always has.
                    conn.execute(f"LISTEN {PROBE_CHANNEL}")
                    conn.execute(f"LISTEN {CANCEL_CHANNEL}")
                    conn.execute(f"LISTEN {NOTIFY_CHANNEL}")
                    if failures:
                        logger.info("listener: listening again after %s failure(s)", failures)
                        self.wakeup.wake()  # for what was enqueued while it was cut off
                    failures = 0
                    self.listening.set()
                    self._send_probe()
                    self._listen(conn)
            except lost as exc:
                self.listening.clear()
                self._set_state(CHECKING)
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

    def _send_probe(self) -> None:
        """NOTIFY this listener through the queue's connection; it must hear it within ``PROBE_WAIT``."""
        if self.probe is None:
            self._set_state(LIVE)
            return
        token = secrets.token_hex(16)
        try:
            self.probe(token)
        finally:
            # Only the probe uses this thread's connection to the queue: no pooled
            # connection is held between probes.
            close_connection(self.wakeup_using)
        self._token = token
        self._probe_sent = time.monotonic()
        self._probe_deadline = self._probe_sent + PROBE_WAIT

    def _listen(self, conn: Any) -> None:
        while not self.stopping:
            for notify in conn.notifies(timeout=LISTEN_SLICE):
                if notify.channel == PROBE_CHANNEL:
                    if self._token is not None and notify.payload == self._token:
                        self._token = None
                        self._set_state(LIVE)
                elif notify.channel == CANCEL_CHANNEL:
                    if self.wakeup.on_cancel is not None:
                        self.wakeup.on_cancel()
                elif not self.queues or notify.payload in self.queues:
                    self.wakeup.wake(notify.payload)
            if self._token is not None and time.monotonic() >= self._probe_deadline:
                self._deaf()
                return

    def _deaf(self) -> None:
        """Say once that this LISTEN hears nothing, and stop listening: the loop polls."""
        self._token = None
        self.listening.clear()
        self._set_state(DEAF)
        logger.warning(
            "listener: LISTEN on alias %r heard nothing within %gs of a NOTIFY sent through alias %r "
            "(a pooler in transaction mode?): new jobs are found by polling every %gs; set "
            "JOBQUEUE['LISTEN_DATABASE'] to the alias of a direct connection to the queue's "
            "database, or to None to poll without listening",
            self.using,
            PROBE_WAIT,
            self.wakeup_using,
            self.wakeup.poll_interval,
        )

    def _set_state(self, state: str) -> None:
        if state == self.state:
            return
        if state == LIVE and self.probe is not None:
            heard_in = (time.monotonic() - self._probe_sent) * 1000
            logger.info("listener: LISTEN on alias %r heard its probe in %.0f ms", self.using, heard_in)
        self.state = state
        try:
            self.wakeup.listen_changed(state)
        finally:
            close_connection(self.wakeup_using)

    @property
    def wakeup_using(self) -> str:
        return self.wakeup.using

    def _connection_params(self) -> dict[str, Any]:
        """The Django connection's parameters, less what only Django's own cursors use."""
        params = connections[self.using].get_connection_params()
        for django_only in ("cursor_factory", "context"):
            params.pop(django_only, None)
        params.setdefault("connect_timeout", 10)
        params["autocommit"] = True
        return params
