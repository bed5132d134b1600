"""The example project's settings with many schedules, for the worker that ``bench/schedules.py`` runs.

``BENCH_SCHEDULES`` (default 10,000) schedules of the job ``bench.noop``: one
fires every second (payload ``{"tick": true}``, by which the benchmark tells
its jobs apart), and each of the others once a day, at minutes spread over
the day, in four time zones. So about seven of them fire a minute, all at a
minute's first second, as the schedules of a large site would.

A JSON setting of 10,000 schedules does not fit in one environment variable
(Linux takes up to 128 KiB), so they are made here, the same in every process.
"""

from __future__ import annotations

import os

from testproject.settings import *  # noqa: F403 - the example project's settings, and then these
from testproject.settings import JOBQUEUE

ZONES = ("UTC", "Europe/Amsterdam", "America/New_York", "Asia/Tokyo")
MINUTES_A_DAY = 24 * 60
# A step prime to 1,440: the daily schedules' minutes go round the whole day before one repeats.
SPREAD = 7_919


def bench_schedules(count: int) -> dict[str, dict[str, object]]:
    """One every-second schedule and ``count - 1`` daily cron lines, by name."""
    schedules: dict[str, dict[str, object]] = {
        "every-second": {"job": "bench.noop", "every": 1, "payload": {"tick": True}}
    }
    for n in range(count - 1):
        minute = n * SPREAD % MINUTES_A_DAY
        schedules[f"daily-{n:05d}"] = {
            "job": "bench.noop",
            "cron": f"{minute % 60} {minute // 60} * * *",
            "timezone": ZONES[n % len(ZONES)],
            "payload": {"n": n},
        }
    return schedules


JOBQUEUE = {**JOBQUEUE, "SCHEDULES": bench_schedules(int(os.environ.get("BENCH_SCHEDULES", "10000")))}
