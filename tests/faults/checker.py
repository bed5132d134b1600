"""Classify every job of a scenario from the queue's tables and the ledger.

A job is *done once*, *done more than once* (each extra execution explained by
a kill, an expired claim or an error of the run itself), *dead-lettered*,
*cancelled*, *stuck* (still ready, running or waiting when the scenario is
over) or *lost* (in neither table, and not known to have been deleted once
done). Lost and stuck must be 0 in every scenario.

Given more of what the scenario did, the checker also holds the run to the
rules of the outcomes a worker decides itself (``violations``, which must be
empty):

- ``cancels`` (the jobs it cancelled): each ends ``cancelled``, never
  dead-lettered, never done, never claimed again; no other job ends cancelled.
- ``child_kills`` (the child processes of ``--pool processes`` it killed): the
  execution each one cut is logged ``outcome=lost`` (or its cancel, or its
  timeout, if it was being stopped for one), and the job runs again only as a
  new attempt (the lost one counted).
- ``logs`` (each worker's log): every execution on a worker that was not
  killed logged one outcome, ``done`` only for the execution whose ack the job
  shows; every attempt that timed out (``timed out after`` in its error) was
  retried, or dead-lettered with that error if it was the last.
"""

from __future__ import annotations

import re
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
CHILD_KILL, TIMEOUT = "child process killed", "timed out"

# The executor's line for each outcome: "job NAME id=N attempt=A/M duration=Xs outcome=O ...".
OUTCOME_LINE = re.compile(
    r"job (?P<name>\S+) id=(?P<job>\d+) attempt=(?P<attempt>\d+)/\d+ duration=\S+ "
    r"outcome=(?P<outcome>\w+)(?P<rest>.*)$",
    re.MULTILINE,
)
TIMED_OUT = "timed out after"


@dataclass(frozen=True)
class Logged:
    """One outcome line of a worker's log."""

    job_id: int
    attempt: int
    worker: str
    outcome: str
    rest: str  # what follows the outcome: next_attempt_in, moved_to, error

    @property
    def timed_out(self) -> bool:
        return TIMED_OUT in self.rest


def logged_outcomes(logs: Mapping[str, str]) -> dict[tuple[int, int, str], list[Logged]]:
    """The outcome lines of ``logs`` (worker id -> its log), by (job id, attempt, worker)."""
    found: dict[tuple[int, int, str], list[Logged]] = defaultdict(list)
    for worker, text in logs.items():
        for match in OUTCOME_LINE.finditer(text):
            line = Logged(int(match["job"]), int(match["attempt"]), worker, match["outcome"], match["rest"])
            found[(line.job_id, line.attempt, worker)].append(line)
    return found


@dataclass(frozen=True)
class Final:
    """Where a job ended: its row's status (or ``dead``), claim token and attempts."""

    status: str
    claim_token: int | None
    attempts: int
    error: str = ""


@dataclass
class Report:
    jobs: int = 0
    done_once: int = 0
    done_more: int = 0
    dead: int = 0
    stuck: int = 0
    lost: int = 0
    cancelled: int = 0
    # Cancelled jobs whose running attempt logged outcome=cancelled.
    cancelled_running: int = 0
    # Attempts logged as timed out, and how each went on.
    timed_out: int = 0
    timeouts_retried: int = 0
    timeouts_dead: int = 0
    # Executions cut by a child process the scenario killed.
    child_killed: int = 0
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
    # Broken rules of the worker's own outcomes (cancel, timeout, child killed, logged outcomes).
    violations: list[str] = field(default_factory=list)

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
            "cancelled_running": self.cancelled_running,
            "timed_out": self.timed_out,
            "timeouts_retried": self.timeouts_retried,
            "timeouts_dead": self.timeouts_dead,
            "child_killed": self.child_killed,
            "executions": self.executions,
            "after_ack": len(self.after_ack),
            "violations": len(self.violations),
            "rescue": self.rescue_summary(),
        }

    def assert_nothing_lost(self) -> None:
        assert (self.lost, self.stuck) == (0, 0), (
            f"lost {self.lost_ids[:20]} stuck {self.stuck_ids[:20]}: {self.summary()}"
        )
        assert not self.after_ack, f"handed out after a successful ack: {self.after_ack[:5]}"
        assert not self.violations, f"{len(self.violations)} broken rule(s): {self.violations[:10]}"


def check(
    job_ids: Iterable[int],
    *,
    using: str = "default",
    kills: Mapping[str, float] | None = None,
    stops: Mapping[str, float] | None = None,
    child_kills: Mapping[int, float] | None = None,
    cancels: Mapping[int, float] | None = None,
    logs: Mapping[str, str] | None = None,
    deleted_done: Mapping[int, tuple[int, int]] | None = None,
) -> Report:
    """Classify the jobs ``job_ids`` on database ``using``.

    ``kills`` maps the id of each worker the scenario killed to the time of the
    kill; ``stops``, each worker it stopped with a signal to the time of the
    signal; ``child_kills``, the pid of each pool child it killed to the time of
    the kill; ``cancels``, each job it cancelled (``cancel`` returned True) to
    the time of the cancel; ``logs``, each worker's id to its log. The rules of
    each are checked only when it is given (see the module's docstring).
    ``deleted_done`` maps each job the scenario knows was deleted once done (at
    its ack with ``KEEP_COMPLETED = 0``, or pruned) to the claim token and the
    attempts its row had then: such a job, in neither table, is done, not lost.
    """
    kills = kills or {}
    stops = stops or {}
    ids = sorted(set(job_ids))
    by_job: dict[int, list[Execution]] = defaultdict(list)
    for execution in ledger.executions(using):
        by_job[execution.job_id].append(execution)
    finals = _finals(using, ids)
    for job_id, (claim_token, attempts) in (deleted_done or {}).items():
        finals.setdefault(job_id, Final(JobStatus.DONE, claim_token, attempts))
    lines = logged_outcomes(logs) if logs is not None else None
    report = Report(jobs=len(ids))
    jobs: dict[int, tuple[list[Execution], dict[int, Logged]]] = {}
    for job_id in ids:
        runs = sorted(by_job.get(job_id, []), key=lambda run: (run.claim_token, run.id))
        jobs[job_id] = (runs, _lines_of(runs, lines or {}))
    cut = _cut_by_child_kills(jobs, child_kills or {})
    for job_id, (runs, logged) in jobs.items():
        final = finals.get(job_id)
        report.executions += len(runs)
        if sum(run.finished for run in runs) > 1:
            report.finished_twice += 1
        if cancels is not None:
            _check_cancel(report, job_id, job_id in cancels, runs, logged, final)
        if child_kills:
            _check_child_kills(report, job_id, runs, logged, cut, kills, checked=logs is not None)
        if logs is not None:
            _check_logged(report, job_id, runs, logged, final, kills, set(logs))
        if final is None:
            report.lost += 1
            report.lost_ids.append(job_id)
            continue
        if final.status == "dead":
            report.dead += 1
            report.dead_ids.append(job_id)
            _explain(report, runs, logged, None, kills, stops, cut)
        elif final.status == JobStatus.DONE:
            if len(runs) <= 1:
                report.done_once += 1
            else:
                report.done_more += 1
            _explain(report, runs, logged, final.claim_token, kills, stops, cut)
        elif final.status == JobStatus.CANCELLED:
            report.cancelled += 1
        else:
            report.stuck += 1
            report.stuck_ids.append(job_id)
    if lines is not None:
        _check_timeouts(report, set(ids), finals, lines)
    return report


def _lines_of(runs: list[Execution], lines: Mapping[tuple[int, int, str], list[Logged]]) -> dict[int, Logged]:
    """Each run's outcome line, by ledger id (none for a run whose worker died before logging it).

    A worker logs one line per execution, in the order it ran them: the n-th
    execution of a job's attempt on a worker (several only after a hand-back)
    has the n-th line. A job handed back before its code started (its child
    died before taking it) logs ``released`` without an execution: where a
    key has more lines than executions, those lines are the extra ones.
    """
    found: dict[int, Logged] = {}
    seen: Counter[tuple[int, int, str]] = Counter()
    executions = Counter((run.job_id, run.attempt, run.worker) for run in runs)
    for run in runs:
        key = (run.job_id, run.attempt, run.worker)
        logged = _without_unstarted(lines.get(key, []), executions[key])
        if seen[key] < len(logged):
            found[run.id] = logged[seen[key]]
        seen[key] += 1
    return found


def _without_unstarted(logged: list[Logged], executions: int) -> list[Logged]:
    """``logged`` less its first ``released`` lines beyond ``executions``: unstarted jobs handed back."""
    extra = len(logged) - executions
    kept = []
    for line in logged:
        if extra > 0 and line.outcome == "released":
            extra -= 1
            continue
        kept.append(line)
    return kept


def _explain(
    report: Report,
    runs: list[Execution],
    logged: Mapping[int, Logged],
    acked_token: int | None,
    kills: Mapping[str, float],
    stops: Mapping[str, float],
    cut: Mapping[int, float],
) -> None:
    """Give each run that was not the acked one its reason; flag runs handed out after the ack."""
    for index, run in enumerate(runs):
        if acked_token is not None and run.claim_token > acked_token:
            report.after_ack.append(run)
            continue
        if acked_token is not None and run.claim_token == acked_token:
            continue
        later = [other for other in runs[index + 1 :] if other.claim_token > run.claim_token]
        line = logged.get(run.id)
        if run.id in cut:
            report.extra_runs[CHILD_KILL] += 1
            if later:
                report.rescue_delays.append(later[0].started_at - cut[run.id])
        elif line is not None and line.timed_out:
            # Before the kill test: a run that timed out ended before its worker was killed.
            report.extra_runs[TIMEOUT] += 1
        elif run.worker in kills:
            report.extra_runs[KILL] += 1
            if later:
                report.rescue_delays.append(later[0].started_at - kills[run.worker])
        elif run.worker in stops:
            report.extra_runs[SHUTDOWN] += 1
        elif run.finished:
            report.extra_runs[EXPIRED] += 1
        else:
            report.extra_runs[ERROR] += 1


def _answered(line: Logged | None) -> bool:
    """Whether ``line`` is a verdict its child sent back (the child did not die under it)."""
    return line is not None and line.outcome in ("done", "retry", "dead") and "child process" not in line.rest


def _cut_by_child_kills(
    jobs: Mapping[int, tuple[list[Execution], Mapping[int, Logged]]], child_kills: Mapping[int, float]
) -> dict[int, float]:
    """The executions that killed children were running: ledger id -> time of the kill.

    A child runs one job at a time: the one it cut is the last it started
    before the kill, unless that one had ended already: its ack is the job's,
    or its line is a verdict the child sent back (a child left idle after a
    job that raised may be the one killed).
    """
    last: dict[int, Execution] = {}
    for runs, _logged in jobs.values():
        for run in runs:
            killed_at = child_kills.get(run.pid)
            if killed_at is None or run.started_at > killed_at:
                continue
            if run.pid not in last or run.started_at > last[run.pid].started_at:
                last[run.pid] = run
    return {
        run.id: child_kills[pid]
        for pid, run in last.items()
        if not _answered(jobs[run.job_id][1].get(run.id))
    }


def _check_cancel(
    report: Report,
    job_id: int,
    asked: bool,
    runs: list[Execution],
    logged: Mapping[int, Logged],
    final: Final | None,
) -> None:
    """A cancelled job ends cancelled, never dead-lettered or done, and is never claimed again."""
    ended_cancelled = final is not None and final.status == JobStatus.CANCELLED
    if not asked:
        if ended_cancelled:
            report.violations.append(f"job {job_id}: cancelled, but the scenario did not cancel it")
        return
    if final is None:
        return  # counted as lost
    if not ended_cancelled:
        report.violations.append(f"job {job_id}: cancelled, but it ended {final.status}")
        return
    assert final.claim_token is not None  # a row's
    if any(run.claim_token > final.claim_token for run in runs):
        report.violations.append(f"job {job_id}: ran on a claim newer than the one its cancel ended")
    for run in runs:
        line = logged.get(run.id)
        if line is not None and line.outcome in ("done", "dead"):
            report.violations.append(
                f"job {job_id}: cancelled, but attempt {run.attempt} logged {line.outcome}"
            )
        if line is not None and line.outcome == "cancelled" and run.claim_token == final.claim_token:
            report.cancelled_running += 1


def _check_child_kills(
    report: Report,
    job_id: int,
    runs: list[Execution],
    logged: Mapping[int, Logged],
    cut: Mapping[int, float],
    kills: Mapping[str, float],
    *,
    checked: bool,
) -> None:
    """An execution cut by a killed child is logged lost (if ``checked``), and rescued as a new attempt."""
    for run in runs:
        if run.id not in cut:
            continue
        report.child_killed += 1
        line = logged.get(run.id)
        # Killed as it was being stopped for a cancel, or after its time limit: that outcome stands.
        allowed = line is not None and (
            (line.outcome == "lost" and "child process" in line.rest)
            or line.outcome == "cancelled"
            or (line.timed_out and line.outcome in ("retry", "dead"))
        )
        if checked and run.worker not in kills and not allowed:
            report.violations.append(
                f"job {job_id}: attempt {run.attempt} cut by a killed child logged "
                f"{line.outcome if line else 'nothing'}, not outcome=lost"
            )
        for other in runs:
            if other.claim_token > run.claim_token and other.attempt <= run.attempt:
                report.violations.append(
                    f"job {job_id}: ran again as attempt {other.attempt} after attempt {run.attempt} "
                    "was cut by a killed child: the lost attempt was not counted"
                )


def _check_logged(
    report: Report,
    job_id: int,
    runs: list[Execution],
    logged: Mapping[int, Logged],
    final: Final | None,
    kills: Mapping[str, float],
    workers: set[str],
) -> None:
    """Every execution on a live worker logged an outcome; ``done`` only the one whose ack stands.

    Only the executions of ``workers`` (those whose logs were given) are held to it.
    """
    acked = final.claim_token if final is not None and final.status == JobStatus.DONE else None
    for run in runs:
        if run.worker not in workers:
            continue
        line = logged.get(run.id)
        if line is None:
            if run.worker not in kills:
                report.violations.append(
                    f"job {job_id}: attempt {run.attempt} on {run.worker} logged no outcome"
                )
        elif run.claim_token == acked and line.outcome != "done":
            report.violations.append(
                f"job {job_id}: its acked attempt {run.attempt} logged {line.outcome}, not done"
            )
        elif run.claim_token != acked and line.outcome == "done":
            report.violations.append(
                f"job {job_id}: attempt {run.attempt} logged done, but its ack is not the job's"
            )


def _check_timeouts(
    report: Report,
    ids: set[int],
    finals: Mapping[int, Final],
    lines: Mapping[tuple[int, int, str], list[Logged]],
) -> None:
    """Every attempt that timed out was retried, or dead-lettered with its error if it was the last."""
    for (job_id, attempt, _worker), logged in lines.items():
        if job_id not in ids:
            continue
        final = finals.get(job_id)
        for line in logged:
            if not line.timed_out:
                continue
            report.timed_out += 1
            if final is None:
                continue  # counted as lost
            if line.outcome == "retry":
                report.timeouts_retried += 1
                # Claimed again, unless cancelled while it waited for its retry.
                if final.attempts <= attempt and final.status != JobStatus.CANCELLED:
                    report.violations.append(
                        f"job {job_id}: attempt {attempt} timed out and was to be retried, "
                        f"but it ended {final.status} after {final.attempts} attempt(s)"
                    )
            elif line.outcome == "dead":
                report.timeouts_dead += 1
                if final.status != "dead" or final.attempts != attempt or TIMED_OUT not in final.error:
                    report.violations.append(
                        f"job {job_id}: attempt {attempt} timed out and was logged dead, but it ended "
                        f"{final.status} after {final.attempts} attempt(s), error {final.error[:80]!r}"
                    )
            else:
                report.violations.append(
                    f"job {job_id}: attempt {attempt} timed out and logged outcome={line.outcome}, "
                    "neither a retry nor a dead letter"
                )


def _finals(using: str, ids: list[int]) -> dict[int, Final]:
    """Where each of ``ids`` ended: its row, else its dead letter; missing if neither."""
    finals: dict[int, Final] = {}
    wanted = set(ids)
    with connections[using].cursor() as cursor:
        for start in range(0, len(ids), 500):
            chunk = ids[start : start + 500]
            cursor.execute(
                f"SELECT id, status, claim_token, attempts FROM {Job._meta.db_table} "
                f"WHERE id IN ({', '.join(['%s'] * len(chunk))})",
                chunk,
            )
            finals.update({row[0]: Final(row[1], row[2], row[3]) for row in cursor.fetchall()})
        cursor.execute(f"SELECT job_id, attempts, error FROM {DeadLetter._meta.db_table}")
        for job_id, attempts, error in cursor.fetchall():
            if job_id in wanted:
                # A dead letter wins: its job left the live table when it was written.
                finals[job_id] = Final("dead", None, attempts, error)
    return finals
