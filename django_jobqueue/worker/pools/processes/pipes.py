"""The messages between a worker and the children of ``--pool processes`` (``pool.py``, ``child.py``).

On the jobs pipe the worker sends a batch, the list of its jobs' field values
(or ``None``: exit), and the child answers with tuples whose first item says
what they are. Small integers: a byte of pickle each, on every answer. On the
control pipe the worker sends stops and revokes. Apart from both modules
because neither may import the other at start: the worker must not import
``multiprocessing`` under the thread pool, and the child may be the one to
set Django up.
"""

from __future__ import annotations

import os
import select
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # not imported at run time: see above
    from multiprocessing.connection import Connection

# From the child, on the jobs pipe:
DONE = 0  # (DONE, result, rss, seconds): the job returned ``result``, a plain ack; most answers
ANSWER = 1  # (ANSWER, Answer, seconds): any other outcome
NOTE = 2  # (NOTE, report): the running job's latest ctx.progress() report
SKIPPED = 3  # (SKIPPED, [claim, ...]): jobs of the batch it will not run (revoked, or after a timeout)
# From the worker, on the control pipe:
STOP = 0  # (STOP, claim, reason): the job of ``claim`` must stop
REVOKE = 1  # (REVOKE, [claim, ...]): do not start these jobs; report those not started

Claim = tuple[int, int]  # (job id, claim token)

# Timestamps below this (in 2096) are within 2**-22 s of their datetime's, which comes back to the
# same microsecond: a float near 4e9 is exact to about 5e-7 s. Later datetimes travel as they are.
EXACT_TIMESTAMPS = 4e9

# Bytes a worker reads from a child's pipe at once: a few hundred answers of no-op jobs.
READ_SIZE = 1 << 16
_NOTHING = object()


def datetime_indexes(fields: Sequence[Any]) -> list[int]:
    """The positions of the datetime fields among a job's ``fields`` (``queue.rows.JOB_FIELDS``)."""
    return [index for index, field in enumerate(fields) if field.get_internal_type() == "DateTimeField"]


def datetimes_from_timestamps(values: list[Any], indexes: Sequence[int]) -> list[Any]:
    """Turn back, in place, the timestamps that ``pool.job_values`` sent for datetimes in UTC."""
    for index in indexes:
        value = values[index]
        if type(value) is float:
            values[index] = datetime.fromtimestamp(value, UTC)
    return values


class Messages:
    """A child's messages as its worker reads them: every message waiting taken in one read.

    ``Connection.recv`` reads a message's length, then its bytes: two system
    calls per answer, each a release and a new wait for the GIL in a worker
    whose threads all want it. Here one read takes all the answers the child
    sent meanwhile (the frames of ``Connection.send``), and a message
    is waited for (``poll``) only when none is left in hand; the wait also
    watches the child's sentinel, since a job that forked may keep the pipe
    open after the child died.
    """

    def __init__(self, connection: Connection, sentinel: int) -> None:
        # What Connection.recv unpickles with (pickle's own loads), imported with the first child:
        # a worker of the thread pool never imports multiprocessing.
        from multiprocessing.reduction import ForkingPickler

        self._loads = ForkingPickler.loads
        self._fd = connection.fileno()
        self._poller = select.poll()
        self._poller.register(self._fd, select.POLLIN)
        self._poller.register(sentinel, select.POLLIN)
        self._data = b""
        self._at = 0

    def next(self, timeout_ms: int, idle: Callable[[], None]) -> Any:
        """The next message; None once the child has died (or closed its end) and none is left.

        ``idle`` is called every ``timeout_ms`` milliseconds that pass without one.
        """
        while True:
            message = self._take()
            if message is not _NOTHING:
                return message
            events = self._poller.poll(timeout_ms)
            if not events:
                idle()
                continue
            if not any(fd == self._fd for fd, _event in events):
                return None  # only the sentinel: the child died and sent nothing more
            try:
                data = os.read(self._fd, READ_SIZE)
            except OSError:
                return None
            if not data:
                return None  # the child's end is closed
            self._data = self._data[self._at :] + data
            self._at = 0

    def _take(self) -> Any:
        data, at = self._data, self._at
        if len(data) - at < 4:
            return _NOTHING
        size = int.from_bytes(data[at : at + 4], "big", signed=True)
        start = at + 4
        if size == -1:  # Connection.send_bytes' frame for a message of 2 GiB or more
            if len(data) - start < 8:
                return _NOTHING
            size = int.from_bytes(data[start : start + 8], "big")
            start += 8
        if len(data) - start < size:
            return _NOTHING
        self._at = start + size
        return self._loads(data[start : start + size])
