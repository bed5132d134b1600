"""Racing callers for the tests: each call in a thread with a connection of its own, all released at once."""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from functools import partial
from typing import Any, TypeVar

from django.db import connection, connections

T = TypeVar("T")


def run_together(calls: Sequence[Callable[[], T]], timeout: float = 120) -> list[T]:
    """Run each of ``calls`` in a thread of its own, released at once; return their results in order.

    Each thread connects before the release, so that the calls race over the
    rows and not over connecting, and closes its connections at its end. The
    first error of a call is raised here; a call still running after
    ``timeout`` seconds fails the test.
    """
    start = threading.Barrier(len(calls))
    results: list[Any] = [None] * len(calls)
    errors: list[BaseException] = []

    def run(index: int) -> None:
        try:
            connection.ensure_connection()
            start.wait(timeout)
            results[index] = calls[index]()
        except BaseException as exc:  # noqa: BLE001 - raised again in the test's thread
            errors.append(exc)
        finally:
            connections.close_all()

    threads = [threading.Thread(target=run, args=(index,)) for index in range(len(calls))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout)
    assert not any(thread.is_alive() for thread in threads), f"a call still runs after {timeout:g} s"
    if errors:
        raise errors[0]
    return results


def run_threads(count: int, target: Callable[[int], T], timeout: float = 120) -> list[T]:
    """``target(0)`` … ``target(count - 1)``, each in a thread of its own, as ``run_together`` runs them."""
    return run_together([partial(target, index) for index in range(count)], timeout)
