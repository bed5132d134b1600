"""Flow control with real ``runworker`` processes: keys, tenants, caps, rates, pauses, kills.

The jobs (``workers.flow``) record their start and end with ``time.time()``
and the key and queue of the row they were claimed as; the checkers of
``tests/flow_checks.py`` read the limits off those times. Queue caps and rate
limits reach the workers through ``JOBQUEUE_QUEUES`` (testproject/settings.py);
a pause (``QueueClient.pause_queue``, a row the claim reads every round)
reaches them through the database. Every test runs on SQLite and on PostgreSQL.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Mapping
from functools import partial
from pathlib import Path
from typing import Any

from django_jobqueue import QueueClient, enqueue_many
from django_jobqueue.models import Job
from tests.flow_checks import peak, runs_from_events, starts_in_any_window
from tests.jobs_for_workers import events
from tests.worker_support import WorkerProcess, wait_until

StartWorker = Callable[..., WorkerProcess]
# SQLite has no wake-ups: the workers poll, often, so that a round follows each change soon.
POLL = ("--poll-interval", "0.1")
Item = tuple[str, dict[str, Any], dict[str, Any]]


def item(
    path: str,
    *,
    queue: str = "default",
    key: str | None = None,
    limit: int | None = None,
    seconds: float = 0.0,
    release: str = "",
) -> Item:
    """An ``enqueue_many`` item of ``workers.flow``, with a concurrency key if ``key``."""
    options: dict[str, Any] = {"queue": queue}
    if key is not None:
        options.update(concurrency_key=key, concurrency_limit=limit)
    return ("workers.flow", {"path": path, "seconds": seconds, "release": release}, options)


def enqueue(items: list[Item]) -> list[int]:
    # One batch, one commit: a running worker never sees part of it.
    return [job.pk for job in enqueue_many(items)]


def queues_env(queues: Mapping[str, Mapping[str, Any]]) -> dict[str, str]:
    return {"JOBQUEUE_QUEUES": json.dumps(queues)}


def starts(path: str, **fields: Any) -> list[dict[str, Any]]:
    """The ``start`` events whose fields have the values given, in the order written."""
    return [
        event
        for event in events(path)
        if event["event"] == "start" and all(event.get(name) == value for name, value in fields.items())
    ]


def done(ids: list[int]) -> bool:
    return Job.objects.filter(pk__in=ids, status="done").count() == len(ids)


def wait_done(ids: list[int], timeout: float = 60.0, what: str = "every job to finish") -> None:
    wait_until(lambda: done(ids), timeout, what)


def by_key(event: Mapping[str, Any]) -> str:
    return str(event["key"])


def by_queue(event: Mapping[str, Any]) -> str:
    return str(event["queue"])


def start_fleet(start_worker: StartWorker, count: int, *args: str, **kwargs: Any) -> None:
    """``count`` workers, ``w0``, ``w1``, …, each started before the test enqueues anything."""
    workers = [start_worker("--worker-id", f"w{n}", *POLL, *args, **kwargs) for n in range(count)]
    for worker in workers:
        worker.wait_started(30)


KEY_LIMITS = {"a": 2, "b": 2, "c": 2, "d": 1, "e": 1, "f": 1}


def test_two_workers_never_run_a_key_above_its_limit(start_worker: StartWorker, events_path: str) -> None:
    start_fleet(start_worker, 2, "--concurrency", "4")
    # Interleaved in claim order, so that every round's window holds every key. The keys
    # allow 9 at once and the workers have 8 slots: neither worker runs out of work.
    ids = enqueue(
        [
            item(events_path, key=key, limit=limit, seconds=0.3)
            for _ in range(4)
            for key, limit in KEY_LIMITS.items()
        ]
    )
    wait_done(ids)
    recorded = events(events_path)
    peaks = peak(runs_from_events(recorded, by_key))
    assert all(peaks[key] <= limit for key, limit in KEY_LIMITS.items()), peaks
    # Reached, not merely respected by workers that had nothing to do.
    assert max(peaks[key] for key in "abc") == 2, peaks
    assert len(starts(events_path)) == len(ids), "each job ran once"
    assert {event["worker"] for event in starts(events_path)} == {"w0", "w1"}


def test_a_tenants_backlog_does_not_hold_another_tenants_job(
    start_worker: StartWorker, events_path: str
) -> None:
    # More than a round's window (window_size(3) = 28) of one key: the claim must walk the keys.
    enqueue([item(events_path, key="tenant:big", limit=1, seconds=0.2)] * 40)
    start_worker("--concurrency", "4", *POLL).wait_started(30)
    wait_until(lambda: starts(events_path), 30, "the backlog to start")

    enqueued = time.time()
    enqueue([item(events_path, key="tenant:small", limit=1)])

    [small] = wait_until(lambda: starts(events_path, key="tenant:small"), 20, "the other tenant's job")
    assert small["time"] - enqueued < 2.0
    # Well before the backlog is through: 40 jobs one at a time take 8 s at least.
    assert len([e for e in starts(events_path, key="tenant:big") if e["time"] < small["time"]]) < 20
    assert peak(runs_from_events(events(events_path), by_key))["tenant:big"] == 1


def test_a_queue_cap_holds_across_two_workers(start_worker: StartWorker, events_path: str) -> None:
    start_fleet(start_worker, 2, "--concurrency", "4", env=queues_env({"capped": {"concurrency": 2}}))
    ids = enqueue([item(events_path, queue="capped", seconds=0.3)] * 12)
    wait_done(ids)
    assert peak(runs_from_events(events(events_path), by_queue)) == {"capped": 2}


def test_a_rate_limit_is_a_sliding_window_across_two_workers(
    start_worker: StartWorker, events_path: str
) -> None:
    start_fleet(start_worker, 2, "--concurrency", "4", env=queues_env({"rated": {"rate_limit": "4/s"}}))
    ids = enqueue([item(events_path, queue="rated")] * 12)
    wait_done(ids)
    runs = runs_from_events(events(events_path), by_queue)
    # A start is recorded a moment after its claim wrote the ledger: windows a little
    # shorter than the limit's keep that moment from counting one window's starts in the next.
    assert starts_in_any_window(runs, 0.9) == 4
    # Three windows' worth: claims at 0, 1 and 2 s at the earliest.
    assert max(run.start for run in runs) - min(run.start for run in runs) >= 1.8


def test_a_paused_queue_starts_nothing_until_resumed(
    queue: QueueClient, start_worker: StartWorker, events_path: str, tmp_path: Path
) -> None:
    release = tmp_path / "release"
    [running] = enqueue([item(events_path, queue="held", release=str(release))])
    start_worker("--concurrency", "4", *POLL).wait_started(30)
    wait_until(lambda: starts(events_path, queue="held"), 30, "the job that will be running")

    assert queue.pause_queue("held")
    # Enqueued after the pause committed: a round that sees them sees the pause too.
    held = enqueue(
        [item(events_path, queue="held")] * 2 + [item(events_path, queue="held", key="tenant:1", limit=1)]
    )
    others = enqueue([item(events_path, queue="other")] * 3)
    # Behind the held jobs in claim order: once they are done, rounds have passed the held ones over.
    wait_done(others, 30, "the other queue's jobs")
    release.touch()
    wait_done([running], 30, "the job that was running when the queue was paused")
    assert [event["job"] for event in starts(events_path, queue="held")] == [running]

    resumed = time.time()
    assert queue.resume_queue("held")
    wait_done(held, 30, "the held jobs after the resume")
    assert all(event["time"] >= resumed for event in starts(events_path, queue="held")[1:])


def test_a_killed_workers_expired_claim_frees_its_keys_slot(
    queue: QueueClient, start_worker: StartWorker, events_path: str, tmp_path: Path
) -> None:
    release = tmp_path / "release"
    doomed = start_worker("--worker-id", "doomed", "--visibility-timeout", "2", "--concurrency", "2", *POLL)
    doomed.wait_started(30)
    keyed = partial(item, events_path, key="tenant:1", limit=1)
    ids = enqueue([keyed(release=str(release)), keyed(seconds=0.2), keyed(seconds=0.2)])
    wait_until(lambda: starts(events_path), 30, "the first job on the doomed worker")
    # Long claims of its own: its ticker, which ticks at start, waits 12 s or more for its
    # next tick_timeouts (visibility / 2, at most 15 s), so no rescue comes before the expiry.
    start_worker("--worker-id", "survivor", "--visibility-timeout", "30", *POLL).wait_started(30)

    doomed.kill()
    killed = time.time()
    release.touch()

    # The dead claim expires within its 2 s, and the key's slot with it.
    [first, *_] = wait_until(lambda: starts(events_path, worker="survivor"), 20, "the key's next job")
    assert first["job"] == ids[1], "the rescued job came first: the expiry did not free the slot"
    assert first["time"] - killed < 6.0
    wait_done(ids[1:], 30, "the key's other jobs")
    # Still the dead worker's, never rescued: its expiry alone freed the slot.
    assert Job.objects.get(pk=ids[0]).status == "running"
    assert queue.tick_timeouts() == 1
    wait_done(ids[:1], 30, "the rescued job")
    assert [event["job"] for event in starts(events_path, worker="doomed")] == [ids[0]]
    # The killed attempt ran until the kill; among the live workers, one at a time throughout.
    assert peak(runs_from_events(events(events_path), by_key, unfinished=killed)) == {"tenant:1": 1}


def test_runworker_refuses_a_bad_queue_limit(start_worker: StartWorker) -> None:
    worker = start_worker("--burst", env=queues_env({"q": {"concurrency": 0}}))
    assert worker.wait(60) != 0
    log = worker.log()
    assert "JOBQUEUE['QUEUES']['q']['concurrency']" in log, log
    # Refused at the start, by the system check: not a worker that starts and whose first claim crashes.
    assert "started" not in log, log


def test_a_burst_worker_waits_for_the_jobs_a_rate_limit_holds(
    start_worker: StartWorker, events_path: str
) -> None:
    ids = enqueue([item(events_path, queue="rated")] * 6)
    env = queues_env({"rated": {"rate_limit": "2/s"}})
    worker = start_worker("--burst", "--concurrency", "4", *POLL, env=env)
    assert worker.wait(60) == 0, worker.log()
    assert done(ids), "a burst worker left due jobs that a rate limit held"
    runs = runs_from_events(events(events_path), by_queue)
    assert max(run.start for run in runs) - min(run.start for run in runs) >= 1.8
    assert "stopped (burst: no job due) after 6 job(s)" in worker.log()
