"""Chains under SIGKILL: 4 chains of 50 links (depends_on), 3 workers, 15 SIGKILLs a second or more
apart, each at a worker in the middle of a link.

Every link runs, is done once (a repeat only where a kill explains it, as the
checker's rules say), and starts only after the acked run of the link before it.
"""

from __future__ import annotations

import random
import time

import pytest

from django_jobqueue.models import Dependency, Job
from tests.worker_support import wait_until

from . import ledger
from .checker import KILL, check

CHAINS = 4
LINKS = 50
WORKERS = 3
KILLS = 15
KILL_EVERY = 1.0
# How long a kill waits for a worker in the middle of a link before it strikes one anyway.
AIM_WITHIN = 10.0
WORKER_ARGS = ("--concurrency", "4", "--visibility-timeout", "2", "--poll-interval", "0.1")


@pytest.mark.slow
def test_chains_run_every_link_once_in_order_with_workers_sigkilled(queue, start_fleet, figures):
    rng = random.Random(18)
    chains: list[list[Job]] = []
    for chain in range(CHAINS):
        links = [queue.push("faults.work", {"seconds": rng.uniform(0.15, 0.35), "n": chain * LINKS})]
        for n in range(1, LINKS):
            payload = {"seconds": rng.uniform(0.15, 0.35), "n": chain * LINKS + n}
            links.append(queue.push("faults.work", payload, depends_on=[links[-1]]))
        chains.append(links)
    assert Job.objects.filter(status="waiting").count() == CHAINS * (LINKS - 1)
    fleet = start_fleet("chain", WORKERS, WORKER_ARGS)

    began = time.monotonic()
    for round_ in range(KILLS):
        time.sleep(KILL_EVERY)
        # A worker that has begun a link, struck a moment later, within a link's length, so that
        # some kills cut a link short and some let it finish.
        slot = fleet.slot_mid_job(AIM_WITHIN, otherwise=round_ % WORKERS)
        time.sleep(rng.uniform(0.0, 0.4))
        fleet.kill(slot)

    total = CHAINS * LINKS
    done_in_chaos = Job.objects.filter(status="done").count()
    wait_until(lambda: Job.objects.filter(status="done").count() == total, 240, "every link to be done")
    elapsed = time.monotonic() - began

    report = check([job.pk for links in chains for job in links], kills=fleet.kills)
    figures(
        scenario="chains under SIGKILL",
        faults=f"{len(fleet.kills)} SIGKILLs, {KILL_EVERY:g} s apart, each at a worker running a link",
        workers=f"{WORKERS} x 4 slots, visibility timeout 2 s",
        chains=f"{CHAINS} x {LINKS} links",
        drained_in=round(elapsed, 1),
        done_during_chaos=done_in_chaos,
        **report.summary(),
    )
    report.assert_nothing_lost()
    assert report.done_once + report.done_more == total and report.dead == 0
    assert set(report.extra_runs) <= {KILL}, report.summary()
    assert report.extra_runs[KILL] > 0, "the kills hit running links"
    assert not Dependency.objects.exists(), "every edge went with its dependency's ack"

    runs = ledger.executions()
    tokens = dict(Job.objects.values_list("pk", "claim_token"))
    acked_end = {
        run.job_id: run.ended_at for run in runs if run.finished and tokens.get(run.job_id) == run.claim_token
    }
    first_start: dict[int, float] = {}
    for run in runs:
        first_start.setdefault(run.job_id, run.started_at)
    for links in chains:
        for before, after in zip(links, links[1:], strict=False):
            assert before.pk in acked_end, f"link #{before.pk} has no finished run of its acked claim"
            assert first_start[after.pk] > acked_end[before.pk], (
                f"link #{after.pk} started before link #{before.pk}'s acked run ended"
            )
    fleet.stop()
