"""Dependencies deleted while their dependents wait: 60 fan-ins whose dependencies are deleted as soon
as they are done, some at their ack (``KEEP_COMPLETED = 0``) and the rest by a prune that runs
nonstop, while workers are SIGKILLed and new dependents are enqueued naming jobs that run or have
just finished.

Each group is four dependencies (two short, two long), a job waiting on one
short and one long, a fan-in waiting on all five, and a job after the fan-in:
the short dependencies are done and deleted while the fan-in still waits on
the long ones. Every dependent runs once (a repeat only where a kill explains
it), only after the acked run of each of its dependencies ended, and none is
left waiting; no edge is left. A new dependent naming a job already deleted
is refused, and then only if that job was deleted once done before the
refusal; every one accepted runs, after its dependencies, as the others.

Deleted jobs are in neither table at the end: a trigger keeps each job's row
as its deletion found it (``trails.py``), and a job is counted done only if
it was deleted done (pruned), or deleted running by the ack of a worker that
deletes at its ack, once its run of that claim had ended. The prune is the
statement ``manage.py jobqueue prune --older-than 0`` runs, called in a loop
in a thread of the test: a process per prune would take a core of the two.
"""

from __future__ import annotations

import random
import threading
import time
from collections import Counter
from collections.abc import Sequence

import pytest
from django.db import connections

from django_jobqueue import DependencyError, QueueClient
from django_jobqueue.models import Dependency, Job
from tests.worker_support import first_within

from . import ledger, trails
from .checker import KILL, check

GROUPS = 60
WORKERS = 3
KILLS = 12
KILL_EVERY = 1.0
# How long a kill waits for a worker in the middle of a job before it strikes one anyway.
AIM_WITHIN = 10.0
# New dependents enqueued between two kills: one naming a running job, one a job just finished, one both.
LATE_PER_ROUND = 3
WORKER_ARGS = ("--concurrency", "4", "--visibility-timeout", "2", "--poll-interval", "0.1")
# The first slot's workers delete a job at its ack; the others keep it, for the prune to delete.
DELETES_AT_ACK = 0
DELETING_ENV = {"JOBQUEUE_KEEP_COMPLETED": "0"}
PRUNE_EVERY = 0.05
# Dependents go first once released: they run among the dependencies still waiting to start.
DEPENDENT = {"priority": 10}


class PruneLoop(threading.Thread):
    """Prune every finished job, over and over, until stopped."""

    def __init__(self) -> None:
        super().__init__(name="prune-loop", daemon=True)
        self.stopping = threading.Event()
        self.rounds = self.pruned = 0
        self.error: BaseException | None = None

    def run(self) -> None:
        client = QueueClient()
        try:
            while not self.stopping.wait(PRUNE_EVERY):
                self.pruned += client.prune(0)
                self.rounds += 1
        except BaseException as exc:  # noqa: BLE001 - reported by the test
            self.error = exc
        finally:
            connections.close_all()

    def stop(self) -> None:
        self.stopping.set()
        self.join(30)
        assert self.error is None, f"the prune failed: {self.error!r}"


def work(rng: random.Random, low: float, high: float) -> tuple[str, dict[str, float]]:
    return "faults.work", {"seconds": rng.uniform(low, high)}


@pytest.mark.slow
def test_dependents_run_once_after_their_dependencies_while_those_are_deleted_when_done(
    queue, start_fleet, trail_tables, figures
):
    rng = random.Random(47)
    waits: dict[int, list[int]] = {}  # each dependent -> the jobs it names

    def push(name_payload: tuple[str, dict[str, float]], depends_on: Sequence[int]) -> Job:
        job = queue.push(*name_payload, depends_on=list(depends_on), **DEPENDENT)
        waits[job.pk] = list(depends_on)
        return job

    graph: list[Job] = []
    for _group in range(GROUPS):
        leaves = queue.push_many(
            [(*work(rng, 0.05, 0.15), {}) for _ in range(2)] + [(*work(rng, 0.5, 1.0), {}) for _ in range(2)]
        )
        ids = [leaf.pk for leaf in leaves]
        middle = push(work(rng, 0.1, 0.3), [ids[0], ids[2]])
        fan_in = push(work(rng, 0.1, 0.3), [*ids, middle.pk])
        after = push(work(rng, 0.1, 0.3), [fan_in.pk])
        graph += [*leaves, middle, fan_in, after]
    fleet = start_fleet("prune-dep", WORKERS, WORKER_ARGS, slot_env={DELETES_AT_ACK: DELETING_ENV})
    pruning = PruneLoop()
    pruning.start()
    fleet.wait_started()

    late: dict[int, str] = {}  # each new dependent accepted -> its status when enqueued
    refused: list[tuple[list[int], float]] = []

    def enqueue_late(kind: int) -> None:
        """A new dependent naming a job running now, one whose run has just ended, or both (by ``kind``)."""
        live = {worker_id for worker_id, _ in fleet.workers}
        runs = ledger.executions()
        running = [run.job_id for run in runs if run.ended_at is None and run.worker in live]
        ended = [run.job_id for run in runs[-40:] if run.finished]
        pools = [[running], [ended], [running, ended]][kind % 3]
        names = sorted({rng.choice(pool) for pool in pools if pool})
        if not names:
            return
        try:
            job = push(work(rng, 0.1, 0.3), names)
        except DependencyError:
            refused.append((names, time.time()))
        else:
            late[job.pk] = job.status

    began = time.monotonic()
    for round_ in range(KILLS):
        for kind in range(LATE_PER_ROUND):
            time.sleep(KILL_EVERY / LATE_PER_ROUND)
            enqueue_late(kind)
        # At a worker in the middle of a job, struck a moment later so that some kills cut a
        # job short and some let it end unacked, as in the chains' scenario.
        slot = fleet.slot_mid_job(AIM_WITHIN, otherwise=round_ % WORKERS)
        time.sleep(rng.uniform(0.0, 0.3))
        fleet.kill(slot)

    def settled() -> bool:
        return not Job.objects.filter(status__in=("ready", "running", "waiting")).exists()

    # Not a failure by itself: a job left waiting or running is the checker's to name.
    first_within(settled, 180)
    elapsed = time.monotonic() - began
    pruning.stop()
    fleet.stop()
    deleting = {worker_id for worker_id, slot in fleet.slot_of.items() if slot == DELETES_AT_ACK}

    runs = ledger.executions()
    ended_runs = {(run.job_id, run.claim_token): run for run in runs if run.finished}
    deleted = trails.deleted()
    pruned = {job_id for job_id, row in deleted.items() if row.status == "done"}
    # Deleted running: by an ack only if a worker that deletes at its ack ran that claim to its end.
    at_ack = {
        job_id
        for job_id, row in deleted.items()
        if row.status == "running"
        and (run := ended_runs.get((job_id, row.claim_token))) is not None
        and run.worker in deleting
    }
    deleted_done = {
        job_id: (deleted[job_id].claim_token, deleted[job_id].attempts) for job_id in pruned | at_ack
    }
    ids = [job.pk for job in graph] + list(late)
    report = check(ids, kills=fleet.kills, deleted_done=deleted_done)

    tokens = dict(Job.objects.filter(pk__in=ids, status="done").values_list("pk", "claim_token"))
    tokens.update({job_id: claim_token for job_id, (claim_token, _attempts) in deleted_done.items()})
    acked_end = {
        run.job_id: run.ended_at for run in runs if run.finished and tokens.get(run.job_id) == run.claim_token
    }
    first_start: dict[int, float] = {}
    for run in runs:
        first_start.setdefault(run.job_id, run.started_at)
    early = [
        (dependent, dependency)
        for dependent, dependencies in waits.items()
        for dependency in dependencies
        if dependent in first_start and not first_start[dependent] > acked_end.get(dependency, float("inf"))
    ]
    # A dependency deleted while its dependent still waited on another: deleted before the acked
    # run of that other dependency ended.
    deleted_while_waited = {
        dependent
        for dependent, dependencies in waits.items()
        for gone in dependencies
        if gone in deleted_done
        for other in dependencies
        if other != gone and deleted[gone].deleted_at < acked_end.get(other, 0.0)
    }
    # A refusal is right only if a job it named was gone by then, deleted once done.
    wrongly_refused = [
        (names, at)
        for names, at in refused
        if not any(name in deleted_done and deleted[name].deleted_at < at for name in names)
    ]
    figures(
        scenario="dependencies deleted while their dependents wait",
        faults=(
            f"{len(fleet.kills)} SIGKILLs, {KILL_EVERY:g} s apart or more, each at a worker running a job; "
            f"done jobs deleted at the ack by one worker of {WORKERS}, "
            f"pruned every {PRUNE_EVERY:g} s otherwise"
        ),
        workers=f"{WORKERS} x 4 slots, visibility timeout 2 s",
        groups=f"{GROUPS} x (4 dependencies, 1 waiting on 2 of them, 1 fan-in on all 5, 1 after it)",
        drained_in=round(elapsed, 1),
        new_dependents=dict(Counter(late.values())),
        new_dependents_refused=len(refused),
        deleted_at_ack=len(at_ack),
        pruned=len(pruned),
        prune_rounds=pruning.rounds,
        deleted_while_a_dependent_waited=len(deleted_while_waited),
        **report.summary(),
    )
    report.assert_nothing_lost()
    assert report.done_once + report.done_more == len(ids) and report.dead == 0
    assert set(report.extra_runs) <= {KILL}, report.summary()
    assert report.extra_runs[KILL] > 0, "the kills hit running jobs"
    assert not early, f"dependents begun before a dependency's acked run ended: {early[:10]}"
    assert not wrongly_refused, f"refused while every job named was still there: {wrongly_refused[:5]}"
    assert not Dependency.objects.exists(), "an edge was left behind"
    # What the scenario is about happened: deletions by both ways while dependents waited, and
    # new dependents both accepted and refused.
    assert at_ack and pruned and deleted_while_waited, report.summary()
    assert late and refused, (late, refused)
    # Every job gone from the table is one of those deleted once done (else the checker's lost).
    assert len(deleted_done) == len(deleted), {j: r for j, r in deleted.items() if j not in deleted_done}
