"""A worker in its own network namespace is cut off from PostgreSQL mid-job, then healed.

Its job is finished by another worker meanwhile; its late ack is refused; it
goes back to work within seconds of the heal.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from django_jobqueue import QueueClient
from django_jobqueue.models import Job
from tests.worker_support import ROOT, WorkerProcess, wait_until

from . import ledger
from .checker import EXPIRED, check
from .cluster import database_alias, network_namespace, throwaway_cluster
from .conftest import FAULT_JOBS

ALIAS = "faults_partition"
WORKER_ARGS = ("--concurrency", "1", "--visibility-timeout", "2", "--poll-interval", "0.2")


class PrefixedWorker(WorkerProcess):
    """``runworker`` started through ``prefix``: ``ip netns exec NAME`` execs it, so the pid
    is the worker's own."""

    def __init__(self, prefix: list[str], args: list[str], log_path: Path, env: dict[str, str]) -> None:
        self.args = args
        self.log_path = log_path
        self._log_file = log_path.open("wb")
        self.proc = subprocess.Popen(
            [*prefix, sys.executable, "manage.py", "runworker", *args],
            cwd=ROOT,
            env=env,
            stdout=self._log_file,
            stderr=subprocess.STDOUT,
        )


@pytest.mark.slow
def test_a_partitioned_worker_is_refused_its_late_ack_and_goes_back_to_work(
    queue, postgresql_only, tmp_path: Path, figures
):
    with (
        network_namespace(f"jqp{os.getpid()}") as namespace,
        throwaway_cluster((namespace.host_address,), namespace.network) as cluster,
        database_alias(ALIAS, cluster.url()),
    ):
        ledger.create(ALIAS)
        client = QueueClient(ALIAS)
        release = tmp_path / "release"
        job = client.push("faults.gate", {"release": str(release)})
        env = {**os.environ, "JOBQUEUE_MODULES": FAULT_JOBS, "PYTHONUNBUFFERED": "1"}
        inside = PrefixedWorker(
            namespace.command(), [*WORKER_ARGS, "--worker-id", "cut-off"], tmp_path / "cut-off.log",
            {**env, "DATABASE_URL": cluster.url(namespace.host_address)},
        )  # fmt: skip
        outside: WorkerProcess | None = None
        try:
            wait_until(lambda: ledger.executions(ALIAS), 30, "the namespaced worker to start the job")
            namespace.cut()
            cut_at = time.monotonic()
            outside = PrefixedWorker(
                [], [*WORKER_ARGS, "--worker-id", "outside"], tmp_path / "outside.log",
                {**env, "DATABASE_URL": cluster.url()},
            )  # fmt: skip
            wait_until(lambda: len(ledger.executions(ALIAS)) == 2, 30, "the other worker to take over")
            taken_over = time.monotonic() - cut_at
            release.touch()  # both runs finish; only the current claim's ack may count
            done = Job.objects.using(ALIAS).filter(pk=job.pk, status="done")
            wait_until(done.exists, 15, "the other worker's ack")
            assert Job.objects.using(ALIAS).get(pk=job.pk).locked_by == "outside"
            time.sleep(1.0)  # the partition outlasts the takeover a little (a pace, not a wait)

            outside.send(signal.SIGTERM)
            assert outside.wait(15) == 0, outside.log()
            namespace.heal()
            healed_at, healed_wall = time.monotonic(), time.time()
            inside.wait_for_log(rf"job faults\.gate id={job.pk} attempt=1/5 .* outcome=lost", 60)
            ack_refused_after = time.monotonic() - healed_at
            after = client.push_many([("faults.work", {"n": n}, {}) for n in range(20)])
            wait_until(
                lambda: (
                    Job.objects.using(ALIAS).filter(pk__in=[j.pk for j in after], status="done").count()
                    == len(after)
                ),
                30,
                "the healed worker to run new jobs",
            )
            back_to_work = min(
                run.started_at for run in ledger.executions(ALIAS) if run.job_id in {j.pk for j in after}
            )
            new_runs = {run.worker for run in ledger.executions(ALIAS) if run.job_id in {j.pk for j in after}}
            assert new_runs == {"cut-off"}
            final = Job.objects.using(ALIAS).get(pk=job.pk)
            assert (final.status, final.locked_by, final.attempts) == ("done", "outside", 2)
            report = check([job.pk, *(j.pk for j in after)], using=ALIAS)
            figures(
                scenario="network partition",
                faults="the worker's namespace cut off (veth down) mid-job past its 2 s claim, then healed",
                taken_over_after=round(taken_over, 1),
                late_ack_refused_after_heal=round(ack_refused_after, 1),
                back_to_work_after_heal=round(back_to_work - healed_wall, 1),
                **report.summary(),
            )
            report.assert_nothing_lost()
            assert (report.done_more, dict(report.extra_runs)) == (1, {EXPIRED: 1})
            inside.send(signal.SIGTERM)
            assert inside.wait(15) == 0, inside.log()
        finally:
            inside.close()
            if outside is not None:
                outside.close()
