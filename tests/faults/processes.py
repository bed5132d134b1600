"""The processes of a ``--pool processes`` worker, as ``/proc`` shows them (Linux).

A worker starts a fork server (``multiprocessing.forkserver``) and a resource
tracker; the fork server forks the worker's children. After the worker dies
they are adopted by another process, so a test notes them while it lives.
"""

from __future__ import annotations

import contextlib
import os
import signal
from pathlib import Path

import pytest

PROC = Path("/proc")
FORK_SERVER = "multiprocessing.forkserver"


def needs_proc() -> None:
    if not (PROC / "self" / "stat").exists():
        pytest.skip("needs Linux's /proc to find a worker's processes")


def parent_of(pid: int) -> int | None:
    """``pid``'s parent, or None if it is gone."""
    try:
        stat = (PROC / str(pid) / "stat").read_text()
    except OSError:
        return None
    # The command name, in parentheses, may hold spaces: the fields that follow it are counted
    # from its closing parenthesis.
    return int(stat.rsplit(")", 1)[1].split()[1])


def children_of(pid: int) -> list[int]:
    found = []
    for entry in PROC.iterdir():
        if entry.name.isdigit() and parent_of(int(entry.name)) == pid:
            found.append(int(entry.name))
    return sorted(found)


def command_line(pid: int) -> str:
    try:
        return (PROC / str(pid) / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""


def fork_server_of(worker_pid: int) -> int | None:
    """The fork server ``worker_pid`` started, or None."""
    servers = [pid for pid in children_of(worker_pid) if FORK_SERVER in command_line(pid)]
    return servers[0] if servers else None


def pool_children(worker_pid: int) -> list[int]:
    """The children of ``worker_pid``'s pool: the processes its fork server forked."""
    server = fork_server_of(worker_pid)
    return children_of(server) if server is not None else []


def descendants(pid: int) -> list[int]:
    """Every process below ``pid``: its children, theirs, and so on."""
    found: list[int] = []
    for child in children_of(pid):
        found += [child, *descendants(child)]
    return found


def state(pid: int) -> str:
    """``pid``'s state letter (``R``, ``S``, ``Z`` …), or "" if it is gone."""
    try:
        for line in (PROC / str(pid) / "status").read_text().splitlines():
            if line.startswith("State:"):
                return line.split()[1]
    except OSError:
        pass
    return ""


def gone(pid: int) -> bool:
    """Whether ``pid`` no longer runs: no such process, or a zombie (dead, not yet reaped).

    The worker's fork server and its children are adopted by the machine's
    init when the worker dies; an init that reaps lazily leaves them zombies
    for a while, and a zombie runs no code.
    """
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    return state(pid) in ("Z", "X", "")


def describe(pids: list[int]) -> str:
    return "; ".join(f"{pid} state={state(pid) or 'gone'} {command_line(pid)[:80]!r}" for pid in pids)


def kill_leftovers(pids: list[int]) -> None:
    """SIGKILL those of ``pids`` still running: what a failed test must not leave behind."""
    for pid in pids:
        if not gone(pid):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
