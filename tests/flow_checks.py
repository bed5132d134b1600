"""Checkers over recorded runs: how many of a group overlapped, how many started in a window.

Shared by the thread races (``test_flow_races.py``), the real-worker tests
(``test_flow_workers.py``) and the rate limit under kills
(``faults/test_rate_limit_kills.py``). A run's recorded stretch lies inside the stretch
the database saw it running, so an overlap found here happened there too.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Run:
    job_id: int
    group: str  # the key, or the queue
    start: float
    end: float


def peak(runs: Iterable[Run]) -> dict[str, int]:
    """The most runs of each group that overlapped at any moment."""
    events: dict[str, list[tuple[float, int]]] = defaultdict(list)
    for run in runs:
        # An end sorts before a start at the same instant: touching is not overlapping.
        events[run.group] += [(run.start, 1), (run.end, -1)]
    peaks: dict[str, int] = {}
    for group, marks in events.items():
        level = top = 0
        for _when, step in sorted(marks, key=lambda mark: (mark[0], mark[1])):
            level += step
            top = max(top, level)
        peaks[group] = top
    return peaks


def starts_in_any_window(runs: Iterable[Run], window: float) -> int:
    """The most starts within any ``window`` seconds."""
    return most_in_any_window(sorted(run.start for run in runs), window)


def most_in_any_window(times: Sequence[float], window: float) -> int:
    """The most of ``times`` (sorted) within any ``window`` (same unit): a later time ``t`` shares a
    window with every earlier one after ``t - window``, as the claim counts them."""
    most, first = 0, 0
    for last, when in enumerate(times):
        while when - times[first] >= window:
            first += 1
        most = max(most, last - first + 1)
    return most


def runs_from_events(
    events: Iterable[Mapping[str, Any]],
    group_of: Callable[[Mapping[str, Any]], str],
    unfinished: float = math.inf,
) -> list[Run]:
    """Pair each attempt's ``start`` event with its ``end``; an attempt with no end ends at ``unfinished``.

    The default (never) can only raise a peak: a run whose end is not known is
    taken to be running still.
    """
    starts: dict[tuple[int, int], Mapping[str, Any]] = {}
    ends: dict[tuple[int, int], float] = {}
    for event in events:
        attempt = (event["job"], event["attempt"])
        if event["event"] == "start":
            starts[attempt] = event
        elif event["event"] == "end":
            ends[attempt] = event["time"]
    return [
        Run(attempt[0], group_of(start), start["time"], ends.get(attempt, unfinished))
        for attempt, start in starts.items()
    ]
