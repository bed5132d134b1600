"""Classify every job of a scenario from the queue's tables and the ledger.

A job is *done once*, *done more than once* (each extra execution explained by
a kill, an expired claim or an error of the run itself), *dead-lettered*,
*stuck* (still ready or running when the scenario is over) or *lost* (in
neither table). Lost and stuck must be 0 in every scenario.
"""

from __future__ import annotations

import statistics
from collections import Counter, defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from django.db import connections

from django_jobqueue.models import DeadLetter, Job, JobStatus

from . import ledger
from .ledger import Execution

KILL, SHUTDOWN, EXPIRED, ERROR = "kill", "handed back at shutdown", "expired claim", "error"


@dataclass
class Report:
    jobs: int = 0
    done_once: int = 0
    done_more: int = 0
    dead: int = 0
    stuck: int = 0
    lost: int = 0
    cancelled: int = 0
    executions: int = 0
    # Why each execution other than the one that was acked happened: KILL, EXPIRED or ERROR.
    extra_runs: Counter[str] = field(default_factory=Counter)
    # Jobs whose function reached its end more than once (its side effects happened twice).
    finished_twice: int = 0
    # Executions handed out after the execution whose ack succeeded: must be 0.
    after_ack: list[Execution] = field(default_factory=list)
    stuck_ids: list[int] = field(default_factory=list)
    lost_ids: list[int] = field(default_factory=list)
    dead_ids: list[int] = field(default_factory=list)
    # Seconds from a kill to the next run of each job its worker held.
    rescue_delays: list[float] = field(default_factory=list)

    @property
    def duplicated(self) -> int:
        return self.done_more

    def rescue_summary(self) -> str:
        if not self.rescue_delays:
            return "-"
        return f"median {statistics.median(self.rescue_delays):.1f} s, max {max(self.rescue_delays):.1f} s"

    def summary(self) -> dict[str, Any]:
        return {
            "jobs": self.jobs,
            "done_once": self.done_once,
            "done_more": self.done_more,
            "extra_runs": dict(self.extra_runs),
            "finished_twice": self.finished_twice,
            "dead": self.dead,
            "stuck": self.stuck,
            "lost": self.lost,
            "cancelled": self.cancelled,
            "executions": self.executions,
            "after_ack": len(self.after_ack),
            "rescue": self.rescue_summary(),
        }

    def assert_nothing_lost(self) -> None:
        assert (self.lost, self.stuck) == (0, 0), (
            f"lost {self.lost_ids[:20]} stuck {self.stuck_ids[:20]}: {self.summary()}"
        )
        assert not self.after_ack, f"handed out after a successful ack: {self.after_ack[:5]}"


def check(
    job_ids: Iterable[int],
    *,
    using: str = "default",
    kills: Mapping[str, float] | None = None,
    stops: Mapping[str, float] | None = None,
) -> Report:
    """Classify the jobs ``job_ids`` on database ``using``.

    ``kills`` maps the id of each worker the scenario killed to the time of the
    kill; ``stops``, each worker it stopped with a signal to the time of the signal.
    """
    kills = kills or {}
    stops = stops or {}
    ids = sorted(set(job_ids))
    by_job: dict[int, list[Execution]] = defaultdict(list)
    for execution in ledger.executions(using):
        by_job[execution.job_id].append(execution)
    rows = _job_rows(using, ids)
    dead = _dead_letters(using, ids)
    report = Report(jobs=len(ids))
    for job_id in ids:
        runs = by_job.get(job_id, [])
        report.executions += len(runs)
        if sum(run.finished for run in runs) > 1:
            report.finished_twice += 1
        if job_id in dead:
            report.dead += 1
            report.dead_ids.append(job_id)
            _explain(report, runs, None, kills, stops)
            continue
        row = rows.get(job_id)
        if row is None:
            report.lost += 1
            report.lost_ids.append(job_id)
            continue
        status, claim_token = row
        if status == JobStatus.DONE:
            if len(runs) <= 1:
                report.done_once += 1
            else:
                report.done_more += 1
            _explain(report, runs, claim_token, kills, stops)
        elif status == JobStatus.CANCELLED:
            report.cancelled += 1
        else:
            report.stuck += 1
            report.stuck_ids.append(job_id)
    return report


def _explain(
    report: Report,
    runs: list[Execution],
    acked_token: int | None,
    kills: Mapping[str, float],
    stops: Mapping[str, float],
) -> None:
    """Give each run that was not the acked one its reason; flag runs handed out after the ack."""
    runs = sorted(runs, key=lambda run: (run.claim_token, run.id))
    for index, run in enumerate(runs):
        if acked_token is not None and run.claim_token > acked_token:
            report.after_ack.append(run)
            continue
        if acked_token is not None and run.claim_token == acked_token:
            continue
        if run.worker in kills:
            report.extra_runs[KILL] += 1
            later = [other for other in runs[index + 1 :] if other.claim_token > run.claim_token]
            if later:
                report.rescue_delays.append(later[0].started_at - kills[run.worker])
        elif run.worker in stops:
            report.extra_runs[SHUTDOWN] += 1
        elif run.finished:
            report.extra_runs[EXPIRED] += 1
        else:
            report.extra_runs[ERROR] += 1


def _job_rows(using: str, ids: list[int]) -> dict[int, tuple[str, int]]:
    rows: dict[int, tuple[str, int]] = {}
    with connections[using].cursor() as cursor:
        for start in range(0, len(ids), 500):
            chunk = ids[start : start + 500]
            cursor.execute(
                f"SELECT id, status, claim_token FROM {Job._meta.db_table} "
                f"WHERE id IN ({', '.join(['%s'] * len(chunk))})",
                chunk,
            )
            rows.update({row[0]: (row[1], row[2]) for row in cursor.fetchall()})
    return rows


def _dead_letters(using: str, ids: list[int]) -> set[int]:
    wanted = set(ids)
    with connections[using].cursor() as cursor:
        cursor.execute(f"SELECT job_id FROM {DeadLetter._meta.db_table}")
        return {row[0] for row in cursor.fetchall() if row[0] in wanted}
