"""The benchmark's jobs, loaded by its worker processes through ``JOBQUEUE["MODULES"]``."""

from __future__ import annotations

import os
import time

from django_jobqueue import job


@job(name="bench.noop")
def noop(**payload: object) -> None:
    """Do nothing: what is left of a job's cost is the queue's."""


@job(name="bench.stamp")
def stamp(path: str, n: int) -> None:
    """Append ``n`` and the wall-clock time this run started, for the pickup latency."""
    line = f"{n} {time.time():.6f}\n".encode()
    # O_APPEND: one write per line keeps lines whole.
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, line)
    finally:
        os.close(fd)


@job(name="bench.spin")
def spin(n: int) -> int:
    """Sum the integers below ``n`` in a Python loop: CPU-bound work that holds the GIL throughout."""
    total = 0
    for i in range(n):
        total += i
    return total
