"""A slot's database connections around each job, as Django handles them around each request.

Django closes connections past ``CONN_MAX_AGE`` (or broken) before and after
each request; a slot does the same around each job (``close_held_connections``),
skipping the look when its thread holds none. Whether a job queried the
queue's database decides how its ack is written (``executor.py``): a thread
that holds no connection learns it from the connection the job opens, one
that holds one watches its queries (``QueryProbe``).
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

from django.db import connections
from django.db.backends.signals import connection_created


class _ThreadConnections(threading.local):
    """What a thread knows of its own database connections, from ``connection_created``."""

    def __init__(self) -> None:
        self.holding = False  # it may hold an open connection
        self.opened: list[str] = []  # aliases it opened since its current job started


_this_thread = _ThreadConnections()


def _note_connection(sender: Any, connection: Any, **kwargs: Any) -> None:
    _this_thread.holding = True
    _this_thread.opened.append(connection.alias)


connection_created.connect(_note_connection, dispatch_uid="django_jobqueue.worker.run.connections")


def close_held_connections() -> None:
    """Django's ``close_old_connections``, skipped in a thread that holds none.

    A slot calls it around every job, as Django does around every request:
    connections past ``CONN_MAX_AGE``, or broken, are closed. Most jobs open
    none, and looking through Django's per-thread connections costs more than
    such a job does.
    """
    if not _this_thread.holding:
        return
    still_open = False
    for connection in connections.all(initialized_only=True):
        connection.close_if_unusable_or_obsolete()
        still_open = still_open or connection.connection is not None
    _this_thread.holding = still_open


def close_all_connections() -> None:
    """Close this thread's connections, even broken ones, whatever state they were left in."""
    for connection in connections.all(initialized_only=True):
        try:
            connection.close()
        except Exception:  # noqa: S110 - a connection interrupted mid-query may fail to close; it is dropped
            pass
        connection.connection = None
    _this_thread.holding = False


class QueryProbe:
    """An execute wrapper that notes whether a job ran a query on a connection."""

    def __init__(self) -> None:
        self.queried = False

    def __call__(self, execute: Callable[..., Any], sql: Any, params: Any, many: bool, context: Any) -> Any:
        self.queried = True
        return execute(sql, params, many, context)


def watch_queries() -> QueryProbe | None:
    """Note what the job about to run here opens; a probe to watch its queries, if one is needed."""
    probe = QueryProbe() if _this_thread.holding else None
    _this_thread.opened = []
    return probe


def job_queried(probe: QueryProbe | None, using: str) -> bool:
    """Whether the job that ran since ``watch_queries`` queried database ``using``."""
    return probe.queried if probe else using in _this_thread.opened
