"""Finding what blocks the event loop: a job's synchronous code, named in the log.

A coroutine job that calls blocking code (``time.sleep``, ``requests``, the
ORM without ``sync_to_async``, a long computation) holds the whole loop: no
other coroutine job runs, and no cancel lands, until it returns. The loop
marks each turn it takes, ten times a second; a thread of its own looks at
the marks, and when the loop has not turned for ``BLOCKED_AFTER`` seconds it
logs one warning naming the task that holds it and the lines it is at (the
loop's thread's stack from the job's own code on, read from outside), and one more line once the loop
turns again, with how long it was held.
"""

from __future__ import annotations

import asyncio
import logging
import os
import sys
import threading
import time
import traceback
from pathlib import Path
from types import FrameType

from ...service import Service

logger = logging.getLogger(__name__)

# Seconds the loop may go without a turn before it is reported as blocked.
BLOCKED_AFTER = 0.5
# Seconds between two turns the loop marks, and between two looks at the marks.
MARK_INTERVAL = 0.1
# Frames of the blocking code's stack the warning shows at most, innermost last.
STACK_LINES = 6
# Where the worker's own frames come from: the stack shown starts below them.
PACKAGE = str(Path(__file__).resolve().parents[3]) + os.sep


class LoopWatch(Service):
    """Logs a loop blocked for ``BLOCKED_AFTER`` seconds or more: by which job, where."""

    name = "loop-watch"

    def __init__(self, loop: asyncio.AbstractEventLoop, blocked_after: float = BLOCKED_AFTER) -> None:
        super().__init__()
        self.loop = loop
        self.blocked_after = blocked_after
        self.loop_thread: int | None = None
        self._marked = time.monotonic()
        self.reports = 0  # blocks reported so far: what the tests count

    def marking(self) -> None:
        """Start marking the loop's turns; called on the loop."""
        self.loop_thread = threading.get_ident()
        self._mark()

    def _mark(self) -> None:
        self._marked = time.monotonic()
        self.loop.call_later(MARK_INTERVAL, self._mark)

    def run(self) -> None:
        blocked_since: float | None = None
        while self.pause(MARK_INTERVAL):
            marked = self._marked
            held = time.monotonic() - marked
            if held >= self.blocked_after and blocked_since != marked:
                blocked_since = marked
                self._report(held)
            elif blocked_since is not None and marked != blocked_since:
                logger.warning("the event loop turns again after %.2fs", marked - blocked_since)
                blocked_since = None

    def _report(self, held: float) -> None:
        self.reports += 1
        task = asyncio.current_task(self.loop)
        frame = sys._current_frames().get(self.loop_thread) if self.loop_thread is not None else None
        where = "".join(traceback.format_list(job_frames(frame))) if frame is not None else ""
        logger.warning(
            "the event loop has been blocked for %.2fs by %s: synchronous code in a coroutine job holds "
            "every other one (wrap it in sync_to_async, or run the job under --pool threads); at:\n%s",
            held,
            task.get_name() if task is not None else "code outside any job",
            where.rstrip(),
        )


def job_frames(frame: FrameType) -> list[traceback.FrameSummary]:
    """The blocking stack from the job's own code on: the worker's frames above it left out."""
    frames = traceback.extract_stack(frame)
    ours = [index for index, entry in enumerate(frames) if entry.filename.startswith(PACKAGE)]
    below = frames[ours[-1] + 1 :] if ours else []
    return (below or frames)[-STACK_LINES:]
