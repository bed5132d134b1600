"""``--pool processes``: a child reads its resident memory after every job, and is replaced past the limit."""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest

from django_jobqueue.models import Job
from django_jobqueue.worker.pools.processes.child import _Resident
from tests.jobs_for_workers import events

MB = 1024 * 1024
linux_only = pytest.mark.skipif(sys.platform != "linux", reason="reads /proc/self")


def _vm_rss() -> int:
    status = Path("/proc/self/status").read_text()
    match = re.search(r"^VmRSS:\s+(\d+) kB", status, re.MULTILINE)
    assert match is not None
    return int(match.group(1)) * 1024


@linux_only
def test_resident_memory_is_read_afresh_at_every_call():
    resident = _Resident()
    before = resident.bytes()
    ballast = bytearray(96 * MB)  # zero-filled, so every page is touched
    grown = resident.bytes()
    assert abs(grown - _vm_rss()) < 8 * MB
    del ballast
    shrunk = resident.bytes()

    assert grown - before >= 80 * MB
    assert grown - shrunk >= 80 * MB


def test_a_child_past_its_memory_limit_is_replaced_before_the_next_job(queue, start_worker, events_path):
    leak = queue.push("workers.pid", {"path": events_path, "megabytes": 200})
    after = queue.push("workers.pid", {"path": events_path})

    worker = start_worker("--burst", "--pool", "processes", "--max-memory-per-child", "150")

    assert worker.wait(60) == 0, worker.log()
    leak.refresh_from_db()
    after.refresh_from_db()
    assert Job.objects.filter(status="done").count() == 2
    pids = [event["pid"] for event in events(events_path)]
    assert pids == [leak.result, after.result]
    assert pids[0] != pids[1], "the job after the leak ran in a new child"
    match = re.search(
        rf"replacing jobqueue-child-0 \(pid {pids[0]}\): its resident memory is (\d+) MB "
        r"\(--max-memory-per-child 150\)",
        worker.log(),
    )
    assert match is not None, worker.log()
    assert int(match.group(1)) > 200
