"""SIGTERM and SIGINT: the first asks the worker to stop; a second one exits at once."""

from __future__ import annotations

import logging
import os
import signal
from collections.abc import Callable
from types import FrameType
from typing import Any

logger = logging.getLogger(__name__)

STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT)


class StopSignals:
    """Installs the handlers; ``received`` is the first signal's name, once there was one.

    The handler only calls ``on_stop`` (which sets flags); it never waits or
    touches the database. The second signal ends the process with status
    128 + the signal number, as a shell reports a process killed by it: no
    hand-back then, the claims of running jobs expire and other workers rescue
    them.
    """

    def __init__(self, on_stop: Callable[[str], None]) -> None:
        self.on_stop = on_stop
        self.received: str | None = None
        self._previous: dict[int, Any] = {}

    def install(self) -> None:
        for signum in STOP_SIGNALS:
            self._previous[signum] = signal.signal(signum, self._handle)

    def restore(self) -> None:
        for signum, handler in self._previous.items():
            signal.signal(signum, handler)
        self._previous.clear()

    def _handle(self, signum: int, frame: FrameType | None) -> None:
        name = signal.Signals(signum).name
        if self.received is not None:
            logger.warning(
                "%s after %s: exiting now; running jobs are rescued when their claims expire",
                name,
                self.received,
            )
            logging.shutdown()
            os._exit(128 + signum)
        self.received = name
        self.on_stop(name)
