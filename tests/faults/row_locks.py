"""Race a statement against a transaction that holds the rows it wants.

``race(change, action)`` runs ``change`` in a transaction on the test's own
connection and, before that transaction commits, starts ``action`` on another
connection (a thread, which may start a process). On PostgreSQL and MySQL it
waits until ``action`` has either finished or is waiting on one of
``change``'s row locks (``pg_blocking_pids``; InnoDB's lock waits), then
commits, then waits for ``action``: the interleaving is forced, not hoped
for. SQLite serialises writers, so there
``change`` commits first and ``action`` runs after it: the only order SQLite
allows, which shows that a guard is harmless there.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from django.db import connection, connections, transaction

from tests.worker_support import wait_until

T = TypeVar("T")
WAIT_SECONDS = 30.0


@dataclass(frozen=True)
class Raced(Generic[T]):
    """What ``action`` returned, and how it met ``change``'s uncommitted rows."""

    result: T
    # It waited on one of change's row locks before change committed.
    blocked: bool
    # It ran while change was uncommitted (finished or blocked before the commit).
    overlapped: bool


def race(change: Callable[[], Any], action: Callable[[], T]) -> Raced[T]:
    """Run ``action`` on another connection while ``change`` is uncommitted; see the module."""
    if connection.vendor == "sqlite":
        with transaction.atomic():
            change()
        return Raced(action(), blocked=False, overlapped=False)
    outcome: dict[str, Any] = {}
    thread = threading.Thread(target=_run, args=(action, outcome))
    with transaction.atomic():
        change()
        holder = _backend_pid()
        thread.start()
        wait_until(lambda: not thread.is_alive() or _blocked_by(holder), WAIT_SECONDS, "action")
        # Blocked on our locks, it cannot finish before the commit below.
        blocked = thread.is_alive()
    thread.join(WAIT_SECONDS)
    assert not thread.is_alive(), "action still running after the change committed"
    if "error" in outcome:
        raise outcome["error"]
    return Raced(outcome["result"], blocked=blocked, overlapped=True)


def _run(action: Callable[[], Any], outcome: dict[str, Any]) -> None:
    try:
        outcome["result"] = action()
    except BaseException as exc:  # noqa: BLE001 - re-raised in the test's thread
        outcome["error"] = exc
    finally:
        connections.close_all()


def _backend_pid() -> int:
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT CONNECTION_ID()" if connection.vendor == "mysql" else "SELECT pg_backend_pid()"
        )
        return int(cursor.fetchone()[0])


def _blocked_by(holder: int) -> list[int]:
    """The sessions waiting on a lock that ``holder`` holds (read live: neither database caches them)."""
    with connection.cursor() as cursor:
        if connection.vendor == "mysql":
            # InnoDB's lock waits; but MariaDB's optimizer reads a row picked by its primary key
            # (a "const" table) before the statement's transaction is listed there, and waits on
            # its lock in that read. So also: another session's statement on this database that
            # has run for over 300 ms, which the queue's statements never take unless they wait.
            cursor.execute(
                "SELECT waiting.trx_mysql_thread_id FROM information_schema.INNODB_LOCK_WAITS AS w "
                "JOIN information_schema.INNODB_TRX AS waiting ON waiting.trx_id = w.requesting_trx_id "
                "JOIN information_schema.INNODB_TRX AS holding ON holding.trx_id = w.blocking_trx_id "
                "WHERE holding.trx_mysql_thread_id = %s "
                "UNION SELECT ID FROM information_schema.PROCESSLIST WHERE ID <> %s AND DB = DATABASE() "
                "AND COMMAND = 'Query' AND TIME_MS > 300",
                [holder, holder],
            )
        else:
            cursor.execute(
                "SELECT DISTINCT pid FROM pg_locks WHERE NOT granted AND %s = ANY(pg_blocking_pids(pid))",
                [holder],
            )
        return [row[0] for row in cursor.fetchall()]
