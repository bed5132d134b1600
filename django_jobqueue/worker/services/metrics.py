"""The worker's Prometheus series, in a registry of its own (``runworker --metrics-port``).

Each worker keeps a ``CollectorRegistry`` of its own rather than
prometheus_client's global one, so that several workers in one process (the
tests, an embedding program) never count into each other's series. Every
observation is made in the worker process, also under ``--pool processes``:
the executor writes a child's job outcome in the parent, and tells
``job_finished`` there.

The hot path pays one dictionary look-up, one counter increment and one
histogram observation per job: the label children are cached per (queue,
name, outcome) and (queue, name). ``jobqueue_jobs_running`` costs nothing
per job: it is counted from the executor's attempts when scraped.

Cardinality: ``queue`` is configuration; ``name`` is the job's registered
name (code, not data). A name that the worker's registry does not know (a
typo'd enqueue, a job from a newer deploy) is folded into ``UNKNOWN_NAME``,
so that rows with arbitrary names cannot create series without bound.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterable, Iterator
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, Info
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

from ... import registry
from ...models import Job
from ..run.outcomes import Outcome
from ..run.watchdog import Attempts

# The ``name`` label of a job whose name this worker does not know.
UNKNOWN_NAME = "__unknown__"
# From 1 ms to 10 minutes: a job's duration spans six orders of magnitude.
JOB_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600)
# A claim round is one transaction: from a fraction of a millisecond to seconds under a lock storm.
ROUND_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5)
# The outcomes a job's attempt is counted under; a timed-out attempt counts as TIMEOUT instead of
# RETRY or DEAD (see metric_outcome). PENDING never reaches the metrics: its line is logged later.
TIMEOUT = "timeout"


def metric_outcome(outcome: Outcome, timed_out: bool) -> str:
    """The ``outcome`` label of an attempt: ``timeout`` for one that ran past its timeout and was
    retried or dead-lettered for it, else the word its log line says."""
    if timed_out and outcome in (Outcome.RETRY, Outcome.DEAD):
        return TIMEOUT
    return str(outcome)


def name_label(job: Job) -> str:
    """The job's name if it is code (registered, or a Django Task's path), else ``UNKNOWN_NAME``."""
    if job.task_backend or registry.lookup(job.name) is not None:
        return job.name
    return UNKNOWN_NAME


class RunningCollector(Collector):
    """``jobqueue_jobs_running{queue}``, counted from the attempts in progress at each scrape.

    A queue that ran a job once keeps its series, at 0 when idle, so that a
    dashboard sees a drop to zero rather than a missing series.
    """

    def __init__(self, attempts: Attempts) -> None:
        self.attempts = attempts
        self._seen: set[str] = set()

    def collect(self) -> Iterable[GaugeMetricFamily]:
        running: dict[str, int] = dict.fromkeys(self._seen, 0)
        for control in self.attempts.snapshot():
            running[control.job.queue] = running.get(control.job.queue, 0) + 1
        self._seen.update(running)
        family = GaugeMetricFamily(
            "jobqueue_jobs_running", "Jobs whose code runs now in this worker.", labels=["queue"]
        )
        for queue_name, count in sorted(running.items()):
            family.add_metric([queue_name], count)
        yield family

    def describe(self) -> Iterable[GaugeMetricFamily]:
        return []  # collected, not described: its label values are only known at scrape time


class DatabaseFailures:
    """Which of the worker's duties are in a database outage now, since when, and why."""

    def __init__(self) -> None:
        self._failing: dict[str, tuple[float, int, str]] = {}  # duty -> (since, failures, error)
        self._lock = threading.Lock()

    def failed(self, duty: str, exc: BaseException) -> None:
        with self._lock:
            since, failures, _error = self._failing.get(duty, (time.monotonic(), 0, ""))
            self._failing[duty] = (since, failures + 1, f"{type(exc).__name__}: {str(exc).strip()}")

    def recovered(self, duty: str) -> None:
        with self._lock:
            self._failing.pop(duty, None)

    def failing(self, duties: Iterable[str]) -> Iterator[str]:
        """A line per duty of ``duties`` in an outage now, saying for how long and why."""
        with self._lock:
            failing = dict(self._failing)
        now = time.monotonic()
        for duty in duties:
            if duty in failing:
                since, failures, error = failing[duty]
                first_line = error.splitlines()[0] if error else ""
                yield f"{duty}: {failures} database error(s) in a row for {now - since:.1f}s: {first_line}"


class WorkerMetrics:
    """One worker's series, and the executor's observer of every job outcome."""

    def __init__(self, attempts: Attempts, slots: int, about: dict[str, str] | None = None) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        self.failures = DatabaseFailures()
        self.last_contact = time.monotonic()  # of a claim round or a heartbeat that succeeded
        reg = self.registry
        self.jobs = Counter(
            "jobqueue_jobs", "Attempts ended, by outcome.", ["queue", "name", "outcome"], registry=reg
        )
        self.durations = Histogram(
            "jobqueue_job_duration_seconds",
            "How long a job's attempt ran, whatever its outcome.",
            ["queue", "name"],
            buckets=JOB_BUCKETS,
            registry=reg,
        )
        self.slots = Gauge("jobqueue_worker_slots", "Jobs this worker runs at once now.", registry=reg)
        self.slots.set(slots)
        self.rounds = Counter(
            "jobqueue_claim_rounds", "Claim rounds: one ack_and_claim transaction each.", registry=reg
        )
        self.round_seconds = Histogram(
            "jobqueue_claim_round_seconds",
            "How long one claim round's transaction took.",
            buckets=ROUND_BUCKETS,
            registry=reg,
        )
        self.claimed = Counter("jobqueue_jobs_claimed", "Jobs claimed.", ["queue"], registry=reg)
        self.acks = Counter(
            "jobqueue_acks",
            "Acks sent to the database, by the statement that carried them: claim (with a claim round), "
            "completer (its own batch), slot (the job's own connection).",
            ["via"],
            registry=reg,
        )
        self.database_errors = Counter(
            "jobqueue_database_errors",
            "Database calls of the worker's duties that failed, by duty.",
            ["operation"],
            registry=reg,
        )
        self.contact_age = Gauge(
            "jobqueue_worker_last_database_contact_seconds",
            "Seconds since a claim round or a heartbeat last reached the database.",
            registry=reg,
        )
        self.contact_age.set_function(lambda: time.monotonic() - self.last_contact)
        # Which database's queue this worker serves, its pool and release: jobqueue_worker_info,
        # for a join (`* on (instance) group_left (database)`) rather than a label on every series.
        Info("jobqueue_worker", "The worker: its queue database, pool and release.", registry=reg).info(
            about or {}
        )
        reg.register(RunningCollector(attempts))
        self._job_children: dict[tuple[str, str, str, bool], tuple[Any, Any]] = {}
        self._claim_children: dict[str, Any] = {}
        self._ack_children = {via: self.acks.labels(via) for via in ("claim", "completer", "slot")}

    # -- the executor's observer ----------------------------------------------

    def job_finished(self, job: Job, outcome: Outcome, duration: float, timed_out: bool) -> None:
        """Count one ended attempt and observe its duration."""
        key = (job.queue, job.name, str(outcome), timed_out)
        children = self._job_children.get(key)
        if children is None:
            children = self._children_for(job, outcome, timed_out)
        counter, histogram = children
        counter.inc()
        histogram.observe(duration)

    def slot_acked(self) -> None:
        self._ack_children["slot"].inc()

    def _children_for(self, job: Job, outcome: Outcome, timed_out: bool) -> tuple[Any, Any]:
        name = name_label(job)
        children = (
            self.jobs.labels(job.queue, name, metric_outcome(outcome, timed_out)),
            self.durations.labels(job.queue, name),
        )
        if name is not UNKNOWN_NAME:
            # Unknown names are not cached: the cache would grow with every name a row holds.
            self._job_children[(job.queue, job.name, str(outcome), timed_out)] = children
        return children

    # -- the supervisor's -----------------------------------------------------

    def set_slots(self, slots: int) -> None:
        """Say how many slots the worker has now (a worker that grows and shrinks them calls it)."""
        self.slots.set(slots)

    def claim_round(self, seconds: float, claimed: list[Job], acks: int) -> None:
        """Count one ack_and_claim transaction that committed."""
        self.last_contact = time.monotonic()
        self.rounds.inc()
        self.round_seconds.observe(seconds)
        if acks:
            self._ack_children["claim"].inc(acks)
        for job in claimed:
            child = self._claim_children.get(job.queue)
            if child is None:
                child = self._claim_children[job.queue] = self.claimed.labels(job.queue)
            child.inc()

    def completer_acked(self, acks: int) -> None:
        self._ack_children["completer"].inc(acks)

    def heartbeat_beat(self) -> None:
        self.last_contact = time.monotonic()

    # -- outage.py's listener --------------------------------------------------

    def database_failed(self, duty: str, exc: BaseException | None) -> None:
        """Count a duty's failed call (``exc``), or note that it recovered (``exc`` is None)."""
        if exc is None:
            self.failures.recovered(duty)
            return
        self.database_errors.labels(duty).inc()
        self.failures.failed(duty, exc)
