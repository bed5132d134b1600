"""``--pool processes`` hands each child a batch of claimed jobs: what a batch must never break.

The batch size adapts to how long recent jobs ran (``prefetch.Depth``): the
worker tests first run a few dozen quick jobs, so that the jobs they enqueue
next travel to the child together, in claim order (the first one has the
highest priority). Then a signal, a timeout, a cancel or a kill meets a job
with others of its batch behind it, not started: those are handed back
(ready again, the attempt not counted) or given to another slot, and run
later exactly once.

The child's own bookkeeping (stops and revokes for jobs it has not started)
is tested in this process too, on real claimed jobs, with the messages it
would send collected in a list.
"""

from __future__ import annotations

import re
import signal
import threading
import time
from collections import Counter
from typing import Any

import pytest

from django_jobqueue import QueueClient
from django_jobqueue.models import DeadLetter, Job
from django_jobqueue.worker.pools.handoff import HandOff
from django_jobqueue.worker.pools.processes import child
from django_jobqueue.worker.pools.processes.pipes import ANSWER, DONE, SKIPPED
from django_jobqueue.worker.pools.processes.prefetch import BATCH_SECONDS, MAX_DEPTH, Depth
from django_jobqueue.worker.run.control import StopReason
from tests.jobs_for_workers import events
from tests.worker_support import wait_until

FAST = ("--poll-interval", "0.05", "--cancel-grace", "1")
BACKOFF = {"JOBQUEUE_BACKOFF_BASE": "0.6", "JOBQUEUE_BACKOFF_MAX": "0.6"}
# Quick jobs that grow the batch size well past the jobs a test then sends together.
WARM_UP = 40
BEHIND = 5


def ran(path: str, job: Job) -> list[dict[str, Any]]:
    return [e for e in events(path) if e.get("job") == job.pk and e["event"] in ("ran", "start")]


def warm_up(queue: QueueClient, path: str) -> None:
    jobs = queue.push_many([("workers.pid", {"path": path}, {}) for _ in range(WARM_UP)])
    ids = [job.pk for job in jobs]
    wait_until(lambda: Job.objects.filter(pk__in=ids, status="done").count() == WARM_UP, 30, "the warm-up")


def head_and_behind(
    queue: QueueClient, path: str, name: str, payload: dict[str, Any], **options: Any
) -> list[Job]:
    """A job of ``name`` first in claim order, then ``BEHIND`` quick ones: enqueued and claimed together."""
    return queue.push_many(
        [(name, {"path": path, **payload}, {"priority": 10, **options})]
        + [("workers.pid", {"path": path}, {}) for _ in range(BEHIND)]
    )


def count(jobs: list[Job], **state: Any) -> int:
    return Job.objects.filter(pk__in=[job.pk for job in jobs], **state).count()


def released(log: str, jobs: list[Job]) -> list[int]:
    ids = {job.pk for job in jobs}
    found = re.findall(r"job workers\.pid id=(\d+) attempt=\d+/\d+ duration=\S+s outcome=released", log)
    return sorted(int(pk) for pk in found if int(pk) in ids)


# -- the batch size and the hand-off -----------------------------------------------------------


def test_the_depth_starts_at_one_grows_with_short_jobs_and_falls_back_after_a_long_one():
    depth = Depth()
    assert depth.value == 1, "unknown jobs are taken for long ones"
    for _ in range(30):
        depth.note(0.0001)
    assert depth.value == MAX_DEPTH
    depth.note(BATCH_SECONDS * 10)
    assert depth.value == 1, "one long job ends prefetching at once"
    for _ in range(60):
        depth.note(BATCH_SECONDS / 4)
    assert 3 <= depth.value <= 4, depth.average


def test_a_slot_takes_its_share_of_the_jobs_waiting_and_a_stop_token_ends_its_batch():
    handoff: HandOff[int] = HandOff()
    for item in range(10):
        handoff.put(item)
    assert handoff.take(4) == ([0, 1, 2, 3], False), "at most the depth"
    assert handoff.take(64) == ([4, 5, 6, 7, 8, 9], False), "alone, all that waits"

    # Two slots wait: neither takes everything (each wakes for one job, the first one's share is half).
    taken: list[list[int]] = []
    slots = [threading.Thread(target=lambda: taken.append(handoff.take(64)[0])) for _ in range(2)]
    for slot in slots:
        slot.start()
    wait_until(lambda: handoff._idle == 2, 5, "both slots to wait")
    for item in range(12):
        handoff.put(item)
    for slot in slots:
        slot.join(5)
    assert sorted(taken[0] + taken[1]) == list(range(12))
    assert taken[0] and taken[1], taken

    handoff.put(20)
    handoff.put(None)
    handoff.put(21)
    assert handoff.take(64) == ([20], True), "the jobs before a stop token, then the slot exits"
    handoff.put(None)
    assert handoff.waiting() == ([21], 1), "a signal takes the jobs, the stop tokens stay"
    assert handoff.take(64) == ([], True)


# -- the child's bookkeeping, in this process ------------------------------------------------------


class Collected:
    """What the child would send its worker."""

    def __init__(self) -> None:
        self.messages: list[Any] = []

    def send(self, message: Any) -> None:
        self.messages.append(message)


def claimed_spins(queue: QueueClient, path: str, count: int = 3) -> list[Job]:
    for _ in range(count):
        queue.push("workers.spin", {"path": path, "seconds": 0.05, "cooperative": True})
    jobs = queue.pull_many(worker_id="child-test", limit=count)
    assert len(jobs) == count
    return jobs


def claim(job: Job) -> tuple[int, int]:
    return (job.pk, job.claim_token)


def run_batch(jobs: list[Job], running: child._Running, sender: Collected, queue: QueueClient) -> None:
    child._run_batch(jobs, sender, running, "child-test", queue, child._Resident())  # type: ignore[arg-type]


def test_a_stop_sent_before_the_child_reached_its_job_reaches_any_job_of_the_batch(queue, events_path):
    first, second, third = claimed_spins(queue, events_path)
    running = child._Running()
    child._stop(running, claim(second), StopReason.CANCELLED)
    child._stop(running, (0, 0), StopReason.CANCELLED)  # for a job of an earlier batch

    sender = Collected()
    run_batch([first, second, third], running, sender, queue)

    assert [(kind, result) for kind, result, *_rest in sender.messages] == [
        (DONE, "spun"),
        (DONE, "stopped"),
        (DONE, "spun"),
    ]
    assert [e["job"] for e in events(events_path) if e["event"] == "saw_cancel"] == [second.pk]
    assert running.early == {} and running.pending == set()


def test_revoked_jobs_are_skipped_and_reported_whether_or_not_their_batch_was_read(queue, events_path):
    first, second, third = claimed_spins(queue, events_path)
    running = child._Running()
    sender = Collected()
    # The batch is not read yet: nothing to report, the child remembers.
    child._revoke(running, sender, [claim(second), claim(third)])  # type: ignore[arg-type]
    assert sender.messages == []

    run_batch([first, second, third], running, sender, queue)

    (kind, skipped), *answers = sender.messages
    assert (kind, sorted(skipped)) == (SKIPPED, sorted([claim(second), claim(third)]))
    assert [(kind, result) for kind, result, *_rest in answers] == [(DONE, "spun")]
    assert {e["job"] for e in events(events_path)} == {first.pk}, "a revoked job started"

    # Read, not started: reported at once, by the thread that got the revoke.
    running.pending = {claim(third)}
    sender = Collected()
    child._revoke(running, sender, [claim(first), claim(third)])  # type: ignore[arg-type]
    assert sender.messages == [(SKIPPED, [claim(third)])]
    assert running.pending == set()


def test_after_a_job_that_timed_out_the_child_runs_nothing_more_of_its_batch(queue, events_path):
    first, second, third = claimed_spins(queue, events_path)
    running = child._Running()
    child._stop(running, claim(first), StopReason.TIMEOUT)  # its deadline passed before it started

    sender = Collected()
    run_batch([first, second, third], running, sender, queue)

    (kind, answer, _seconds), (skipped_kind, skipped) = sender.messages
    assert kind == ANSWER and answer.attempt.verdict.error.startswith("JobTimeout"), answer
    assert (skipped_kind, sorted(skipped)) == (SKIPPED, sorted([claim(second), claim(third)]))
    assert events(events_path) == [], "a job ran in a child whose state may be anything"


# -- real workers ------------------------------------------------------------------------------------


def test_sigterm_hands_back_at_once_the_jobs_a_child_has_not_started(
    queue, start_worker, events_path, tmp_path
):
    release = tmp_path / "release"
    worker = start_worker("--pool", "processes", "--concurrency", "1", "--shutdown-timeout", "20", *FAST)
    warm_up(queue, events_path)
    gate, *behind = head_and_behind(queue, events_path, "workers.gate", {"release": str(release)})
    wait_until(lambda: ran(events_path, gate), 15, "the gate to start")
    wait_until(
        lambda: count(behind, status="running") == BEHIND,
        5,
        "the jobs behind it to be claimed",
    )

    signalled_at = time.monotonic()
    worker.send(signal.SIGTERM)
    wait_until(
        lambda: (
            Job.objects.filter(pk__in=[job.pk for job in behind], status="ready", attempts=0).count()
            == BEHIND
        ),
        5,
        "the jobs behind the gate to be handed back",
    )
    assert time.monotonic() - signalled_at < 3, "handed back only when the running job ended"
    assert worker.proc.poll() is None and Job.objects.get(pk=gate.pk).status == "running"

    release.touch()
    assert worker.wait() == 0, worker.log()
    assert Job.objects.get(pk=gate.pk).status == "done"
    assert released(worker.log(), behind) == sorted(job.pk for job in behind), worker.log()
    assert not any(ran(events_path, job) for job in behind), "a job handed back had started"


def test_the_jobs_behind_a_long_one_go_to_another_child_without_waiting_for_it(
    queue, start_worker, events_path, tmp_path
):
    release = tmp_path / "release"
    worker = start_worker("--pool", "processes", "--concurrency", "2", *FAST)
    warm_up(queue, events_path)
    gate, *behind = head_and_behind(queue, events_path, "workers.gate", {"release": str(release)})

    wait_until(lambda: count(behind, status="done") == BEHIND, 10, "the jobs behind the long one")
    assert Job.objects.get(pk=gate.pk).status == "running", "they waited for the long job"
    [gate_start] = ran(events_path, gate)
    assert all(len(ran(events_path, job)) == 1 for job in behind)
    assert count(behind, attempts=1) == BEHIND
    assert released(worker.log(), behind) == [], "taken back, not handed back: they stayed claimed"
    release.touch()
    wait_until(lambda: Job.objects.get(pk=gate.pk).status == "done", 10, "the long job")
    assert gate_start["pid"] != worker.pid


def test_a_timeout_in_a_batch_leaves_the_jobs_behind_it_to_a_new_child(queue, start_worker, events_path):
    worker = start_worker("--pool", "processes", "--concurrency", "1", *FAST, env=BACKOFF)
    warm_up(queue, events_path)
    stuck, *behind = head_and_behind(
        queue, events_path, "workers.spin", {"seconds": 30}, timeout=1, max_attempts=1
    )

    wait_until(lambda: DeadLetter.objects.filter(job_id=stuck.pk).exists(), 20, "the stuck job's dead letter")
    wait_until(lambda: count(behind, status="done") == BEHIND, 20, "the jobs behind it")

    [timed_out] = {e["pid"] for e in ran(events_path, stuck)}
    runs = Counter(e["job"] for job in behind for e in ran(events_path, job))
    assert runs == Counter({job.pk: 1 for job in behind}), "each job behind the stuck one ran exactly once"
    assert timed_out not in {e["pid"] for job in behind for e in ran(events_path, job)}
    assert count(behind, attempts=1) == BEHIND, "a hand-back counted as an attempt"
    log = worker.log()
    assert re.search(rf"replacing jobqueue-child-0 \(pid {timed_out}\): a job in it timed out", log), log


def test_a_child_that_dies_mid_batch_loses_its_job_and_hands_back_the_rest(queue, start_worker, events_path):
    worker = start_worker("--pool", "processes", "--concurrency", "1", *FAST)
    warm_up(queue, events_path)
    crash, *behind = head_and_behind(queue, events_path, "workers.crash", {})

    wait_until(lambda: count(behind, status="done") == BEHIND, 20, "the jobs behind it")

    [crashed] = {e["pid"] for e in ran(events_path, crash)}
    log = worker.log()
    assert re.search(rf"job workers\.crash id={crash.pk} attempt=1/\d+ .* outcome=lost", log), log
    assert re.search(rf"replacing jobqueue-child-0 \(pid {crashed}\): it died", log), log
    assert released(log, behind) == sorted(job.pk for job in behind), log
    assert all(len(ran(events_path, job)) == 1 for job in behind)
    assert crashed not in {e["pid"] for job in behind for e in ran(events_path, job)}
    assert count(behind, attempts=1) == BEHIND
    assert Job.objects.get(pk=crash.pk).status == "running", "lost: left to expire, as a dead worker's job"


def test_a_child_killed_mid_batch_leaves_the_jobs_behind_it_to_a_new_child(queue, start_worker, events_path):
    worker = start_worker("--pool", "processes", "--concurrency", "1", *FAST)
    warm_up(queue, events_path)
    stubborn, *behind = head_and_behind(queue, events_path, "workers.stubborn", {"seconds": 30})
    [started] = wait_until(lambda: ran(events_path, stubborn), 15, "the stubborn job to start")

    assert QueueClient().cancel(stubborn)  # ignored: killed after --cancel-grace
    wait_until(lambda: count(behind, status="done") == BEHIND, 20, "the jobs behind it")

    log = worker.log()
    assert re.search(rf"job workers\.stubborn id={stubborn.pk} attempt=1/\d+ .* outcome=cancelled", log), log
    assert re.search(rf"replacing jobqueue-child-0 \(pid {started['pid']}\): it died", log), log
    assert all(len(ran(events_path, job)) == 1 for job in behind)
    assert started["pid"] not in {e["pid"] for job in behind for e in ran(events_path, job)}
    assert count(behind, attempts=1) == BEHIND


def test_a_batch_never_takes_a_child_past_max_jobs_per_child(queue, start_worker, events_path):
    jobs = queue.push_many([("workers.pid", {"path": events_path}, {}) for _ in range(60)])

    worker = start_worker("--burst", "--pool", "processes", "--concurrency", "1", "--max-jobs-per-child", "7")

    assert worker.wait(60) == 0, worker.log()
    assert Job.objects.filter(pk__in=[job.pk for job in jobs], status="done").count() == 60
    per_pid = Counter(e["pid"] for e in events(events_path))
    assert sum(per_pid.values()) == 60
    assert max(per_pid.values()) <= 7 and len(per_pid) >= 9, per_pid


@pytest.mark.parametrize("concurrency", ["2"])
def test_short_jobs_are_spread_over_the_children(queue, start_worker, events_path, concurrency):
    jobs = queue.push_many([("workers.pid", {"path": events_path}, {}) for _ in range(400)])

    worker = start_worker("--burst", "--pool", "processes", "--concurrency", concurrency)

    assert worker.wait(60) == 0, worker.log()
    assert Job.objects.filter(pk__in=[job.pk for job in jobs], status="done").count() == 400
    per_pid = Counter(e["pid"] for e in events(events_path))
    assert len(per_pid) == 2 and min(per_pid.values()) >= 40, per_pid
