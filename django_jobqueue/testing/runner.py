"""``run_jobs``: the queue's own claim, run and ack, here and now, inside the test's transaction.

A test enqueues jobs the way the project does (``enqueue``, ``fn.enqueue``, a
Django Task's ``enqueue``), and ``run_jobs`` runs the rows: claimed by the
queue's claim statement, run by the worker's executor, acked, retried or
dead-lettered by the statements ``runworker`` uses. It runs on the caller's
connection, in the calling thread, inside whatever transaction is open (a
``TestCase``'s, pytest-django's ``db`` fixture's), so nothing needs to commit
and the test's rollback takes everything away. It goes on until nothing is
due: jobs that jobs enqueue, dependents an ack releases, batch callbacks.

What differs from a worker, and why:

- one job at a time, in the calling thread: a test reads one order of events;
- no heartbeat: nothing else could claim the job meanwhile; and no time
  limit unless ``time_limits=True`` asks for the worker's watchdog;
- a job's own ``transaction.atomic()`` is a savepoint of the test's
  transaction, and ``on_commit`` callbacks wait for the test's commit (none
  under ``TestCase``; use ``captureOnCommitCallbacks``);
- on PostgreSQL the clock of the statements (``now()``) is the test
  transaction's start: a retry's backoff or a ``delay`` is not due until
  ``scheduled=True`` brings it forward.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any, TypeGuard

from ..decorators import JobFunction
from ..exceptions import Fail, JobTimeout, Retry
from ..models import Job, JobStatus
from ..queue import QueueClient
from ..queue.schedules import ScheduleBook
from ..schedules import declared_schedules
from ..worker.run.attempt import run_job
from ..worker.run.control import RunControl, ThreadTarget
from ..worker.run.executor import Executor
from ..worker.run.outcomes import Attempt, Outcome
from ..worker.run.progress import ProgressReport
from ..worker.run.watchdog import Attempts, Watchdog
from .assertions import job_name
from .performing import as_stored

# The claims run_jobs takes are in this name, as a worker's are in its id.
WORKER_ID = "run_jobs"


class TooManyJobs(AssertionError):
    """``run_jobs`` ran ``limit`` jobs and more were due: a job that enqueues itself for ever?"""


@dataclass
class RunReport:
    """What one ``run_jobs`` call ran: the jobs by outcome, in the order they ran, and their results.

    ``done``, ``retried``, ``dead`` and ``cancelled`` are lists of ``Job``;
    ``results`` maps a job's id to its result as stored (through JSON). Each
    ``Job`` is read again after its outcome, so its ``status``, ``attempts``
    and ``result`` are the row's (a job moved to the dead letters, or deleted
    with ``KEEP_COMPLETED = 0``, is the row as it was claimed).
    """

    done: list[Job] = field(default_factory=list)
    retried: list[Job] = field(default_factory=list)
    dead: list[Job] = field(default_factory=list)
    cancelled: list[Job] = field(default_factory=list)
    results: dict[int, Any] = field(default_factory=dict)  # job id -> result, as stored

    @property
    def ran(self) -> int:
        """How many attempts ran."""
        return len(self.done) + len(self.retried) + len(self.dead) + len(self.cancelled)


class _HereAndNow:
    """The executor's ``Runner`` for a test: the job's code in this thread, what it raised kept."""

    def __init__(self, client: QueueClient) -> None:
        self.client = client
        self.last: Attempt | None = None

    def attempt(self, job: Job, control: RunControl, report: ProgressReport) -> Attempt:
        # The time limit's interrupt (time_limits=True) lands in the job's own code, as in a slot's thread.
        target = ThreadTarget()
        control.attach(target)
        self.last = run_job(
            job, WORKER_ID, self.client, lambda: control.stopping, guard=target, report=report
        )
        return self.last


def run_jobs(
    queue: str | None = None,
    names: str | JobFunction | Iterable[str | JobFunction] | None = None,
    *,
    scheduled: bool = False,
    raise_errors: bool = True,
    limit: int = 1000,
    time_limits: bool = False,
    using: str | None = None,
) -> RunReport:
    """Run the due jobs (of ``queue``, of ``names``) until none is due; return what ran.

    ``scheduled=True`` also runs jobs due later (a ``delay``, a retry's
    backoff), bringing each forward to now. ``raise_errors=True`` records a
    failed attempt (its retry or dead letter written) and raises the job's
    own exception here; a ``Retry`` or ``Fail`` the job raised is its answer,
    not an error, and is reported instead. ``False`` retries every failure at
    once until the job is done or dead-lettered. More than ``limit`` jobs
    raises ``TooManyJobs``. ``time_limits=True`` keeps each job's ``timeout``
    as a worker does: ``JobTimeout`` is raised in the job's code at its deadline.
    """
    if isinstance(limit, bool) or not isinstance(limit, int) or limit < 1:
        raise ValueError(f"limit must be a positive int, got {limit!r}")
    if isinstance(names, (str, JobFunction)):
        names = [names]  # one name given alone
    wanted = None if names is None else {job_name(name) for name in names}
    client = QueueClient(using)
    runner = _HereAndNow(client)
    watchdog = Watchdog(Attempts(), _told_to_stop, _told_to_stop) if time_limits else None
    executor = Executor(client, WORKER_ID, watchdog=watchdog, tends_connections=False)
    report = RunReport()
    passed_over: list[Job] = []
    untouched = _times_of_others(client, wanted)
    if watchdog is not None:
        watchdog.start()
    try:
        while (job := _next_job(client, queue, wanted, scheduled, passed_over)) is not None:
            if report.ran >= limit:
                client.release(job, worker_id=WORKER_ID)
                raise TooManyJobs(
                    f"run_jobs ran {limit} jobs and {job.name} (id {job.pk}) is still due: a job that "
                    "enqueues itself for ever? Pass a higher limit= if so many are expected."
                )
            runner.last = None
            outcome = executor.run(job, runner)
            attempt = runner.last
            _record(report, client, job, outcome, attempt)
            raised = attempt.raised if attempt is not None else None
            if raise_errors:
                if _is_error(raised) and outcome in (Outcome.RETRY, Outcome.DEAD):
                    raise _as_told(raised, job)
            elif outcome is Outcome.RETRY:
                client.retry_jobs_now([job.pk])  # a retry at once, its backoff skipped
    finally:
        if watchdog is not None:
            watchdog.stop()
        _give_back(client, passed_over, untouched)
    return report


def _told_to_stop(control: RunControl) -> None:
    """Nothing to do: the job runs in the test's own thread, whose return writes its timeout."""


def run_schedule(name: str, *, using: str | None = None, **options: Any) -> RunReport:
    """Fire the periodic schedule ``name`` now, and ``run_jobs(**options)``: what its fire time would run.

    The job is enqueued as the admin's *Run now* enqueues it: the schedule's
    job, payload, queue, priority and concurrency key, due now. An unknown name
    raises ``LookupError`` listing the schedules declared.
    """
    schedules = {schedule.name: schedule for schedule in declared_schedules()}
    if name not in schedules:
        raise LookupError(
            f"no schedule is declared as {name!r}; declared: {', '.join(sorted(schedules)) or 'none'}"
        )
    ScheduleBook(using).run_now(schedules[name])
    return run_jobs(using=using, **options)


def _is_error(raised: BaseException | None) -> TypeGuard[BaseException]:
    """Whether a job raised an error: ``Retry`` and ``Fail`` are answers it chose, not errors."""
    return raised is not None and not isinstance(raised, (Retry, Fail))


def _as_told(raised: BaseException, job: Job) -> BaseException:
    """The job's exception; a time limit's, raised into the job bare, with the outcome's words."""
    if isinstance(raised, JobTimeout) and not raised.args and job.timeout is not None:
        return JobTimeout(f"timed out after {job.timeout:g} s").with_traceback(raised.__traceback__)
    return raised


def _next_job(
    client: QueueClient, queue: str | None, wanted: set[str] | None, scheduled: bool, passed_over: list[Job]
) -> Job | None:
    """Claim the next due job (of ``queue`` and ``wanted``): the queue's claim, one job at a time.

    A job of another name is claimed too, and held aside unrun until
    ``run_jobs`` hands it back as it was (``_give_back``), so that the claim
    moves on to the next one.
    """
    client.flag_dependencies_now()
    if scheduled:
        _bring_forward(client, queue, wanted)
    while True:
        claimed = client.claim(WORKER_ID, None if queue is None else [(queue, 1)], 1)
        if not claimed:
            return None
        job = claimed[0]
        if wanted is None or job.name in wanted:
            return job
        passed_over.append(job)


def _times_of_others(client: QueueClient, wanted: set[str] | None) -> dict[int, tuple[Any, Any]]:
    """When the ready jobs of other names started and were last attempted, to be put back as they were."""
    if wanted is None:
        return {}
    others = Job.objects.using(client.using).filter(status=JobStatus.READY).exclude(name__in=wanted)
    return {
        pk: (started, attempted)
        for pk, started, attempted in others.values_list("pk", "started_at", "last_attempted_at")
    }


def _give_back(client: QueueClient, passed_over: list[Job], times: dict[int, tuple[Any, Any]]) -> None:
    """Hand back the jobs held aside unrun, as they were: their attempt and their claim's times undone."""
    for job in passed_over:
        client.release(job, worker_id=WORKER_ID)
        started, attempted = times.get(job.pk, (None, None))  # one enqueued meanwhile had none
        Job.objects.using(client.using).filter(pk=job.pk).update(
            started_at=started, last_attempted_at=attempted
        )


def _bring_forward(client: QueueClient, queue: str | None, wanted: set[str] | None) -> None:
    """Make every ready job (of ``queue`` and ``wanted``) due now: a test does not wait for a ``run_at``."""
    ready = Job.objects.using(client.using).filter(status=JobStatus.READY)
    if queue is not None:
        ready = ready.filter(queue=queue)
    if wanted is not None:
        ready = ready.filter(name__in=wanted)
    client.retry_jobs_now(ready.values_list("pk", flat=True))


def _record(
    report: RunReport, client: QueueClient, job: Job, outcome: Outcome, attempt: Attempt | None
) -> None:
    latest = Job.objects.using(client.using).filter(pk=job.pk).first() or job
    if outcome is Outcome.DONE:
        report.done.append(latest)
        report.results[job.pk] = latest.result if latest is not job else _as_stored(attempt)
    elif outcome is Outcome.RETRY:
        report.retried.append(latest)
    elif outcome is Outcome.DEAD:
        report.dead.append(latest)
    elif outcome in (Outcome.CANCELLED, Outcome.LOST):
        # Nothing else claims in a test: a claim lost is the job cancelled while it ran.
        report.cancelled.append(latest)
    else:
        raise RuntimeError(f"run_jobs: job {job.name} (id {job.pk}) ended {outcome}; its log line says why")


def _as_stored(attempt: Attempt | None) -> Any:
    """The result the ack wrote, read back as the row would give it (``KEEP_COMPLETED = 0`` kept no row)."""
    return as_stored(attempt.verdict.result) if attempt is not None else None
