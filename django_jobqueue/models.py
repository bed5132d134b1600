"""The queue's tables: live jobs, dead letters and running workers.

Rows of ``Job`` and ``DeadLetter`` are written only by ``queue/ops/``; read
them freely through the ORM.
"""

from __future__ import annotations

from django.db import models
from django.db.models import Q

from .fields import ReportField
from .model_bases import ConditionalIndexes


class JobStatus(models.TextChoices):
    READY = "ready", "ready"  # waiting to be claimed, now or at its run_at
    RUNNING = "running", "running"  # claimed by a worker until locked_until
    DONE = "done", "done"
    CANCELLED = "cancelled", "cancelled"
    # Enqueued with depends_on: released (-> ready) in the transaction that acks
    # its last dependency. No claim index covers it, so claims never see it.
    WAITING = "waiting", "waiting"


LIVE_STATUSES = (JobStatus.READY, JobStatus.RUNNING)
FINISHED_STATUSES = (JobStatus.DONE, JobStatus.CANCELLED)


class Job(ConditionalIndexes):
    """A unit of work, from enqueue until it is done (or moves to the dead letters)."""

    id = models.BigAutoField(primary_key=True)
    name = models.CharField(max_length=200)
    queue = models.CharField(max_length=63)
    payload = models.JSONField(default=dict)
    priority = models.SmallIntegerField(default=0, help_text="-100..100, higher runs first")
    status = models.CharField(max_length=16, choices=JobStatus.choices, default=JobStatus.READY)
    attempts = models.IntegerField(default=0, help_text="claims so far")
    max_attempts = models.IntegerField()
    visibility_timeout = models.FloatField(help_text="seconds a claim lasts without a heartbeat")
    # Fixed at enqueue like visibility_timeout: the worker ends an attempt that runs longer.
    timeout = models.FloatField(
        null=True, blank=True, help_text="seconds one attempt may run; empty = no limit"
    )
    # Flow control (queue/ops/limited.py): at most concurrency_limit jobs with this
    # key run at once across every worker. Both NULL for a job without a key.
    concurrency_key = models.CharField(max_length=255, null=True, blank=True)  # noqa: DJ001 - NULL = no key
    concurrency_limit = models.IntegerField(null=True, blank=True)
    run_at = models.DateTimeField()
    locked_by = models.CharField(max_length=255, null=True, blank=True)  # noqa: DJ001 - NULL = unowned
    locked_until = models.DateTimeField(null=True, blank=True)
    # Changes at every claim: an ack carrying an older token is refused even
    # when it comes from the same worker id.
    claim_token = models.BigIntegerField(default=0)
    unique_key = models.CharField(max_length=255, null=True, blank=True)  # noqa: DJ001 - NULL = no key
    result = models.JSONField(null=True, blank=True)
    last_error = models.TextField(blank=True, default="")
    last_traceback = models.TextField(blank=True, default="")
    created_at = models.DateTimeField()
    finished_at = models.DateTimeField(null=True, blank=True)
    # The first and the latest claim of this job (a Task's started_at and last_attempted_at).
    started_at = models.DateTimeField(null=True, blank=True)
    last_attempted_at = models.DateTimeField(null=True, blank=True)
    # Django's Tasks framework (backends.py): the TASKS alias a job was enqueued
    # through, empty for @job jobs. Only a job marked so is resolved by its
    # name, the task's module path; any other name goes through the registry.
    task_backend = models.CharField(max_length=100, blank=True, default="", db_default="")
    # A Task job's worker per counted attempt, oldest first (TaskResult.worker_ids).
    worker_ids = models.JSONField(blank=True, default=list, db_default=[])
    # ctx.progress(): {"current", "total", "message"} as the running job last reported it.
    progress = ReportField(null=True, blank=True)
    # Every attempt that did not end in "done", oldest first and bounded: attempt,
    # worker, started_at, duration, outcome, error (docs/observability.md).
    attempt_history = models.JSONField(blank=True, default=list, db_default=[])
    # The W3C trace context of the span that enqueued the job (the opentelemetry extra).
    trace_context = models.JSONField(null=True, blank=True)
    # The Batch this job belongs to (``batch()``); NULL for a job of none. Set when
    # the batch's block ends, in its transaction, and never changed after.
    batch_id = models.BigIntegerField(null=True, blank=True)
    # Set (for good) when a job is first named in a depends_on: the plain ack
    # excludes such a job, which takes the ack that releases its dependents instead.
    has_dependents = models.BooleanField(default=False, db_default=False)

    class Meta:
        indexes = [
            # The claim: ready jobs of one queue in the order they are taken.
            # Jobs with a concurrency key have indexes of their own below, so that
            # a tenant's backlog never lies in the way of a claim it cannot join.
            models.Index(
                fields=["queue", "-priority", "run_at", "id"],
                condition=Q(status="ready", concurrency_key__isnull=True),
                name="jobqueue_claim_idx",
            ),
            # The claim over every queue (pull() without queue names).
            models.Index(
                fields=["-priority", "run_at", "id"],
                condition=Q(status="ready", concurrency_key__isnull=True),
                name="jobqueue_claim_any_idx",
            ),
            # The limited claim (queue/ops/limited.py): ready jobs with a key, in claim
            # order (its window), per queue, and per key (its walk over the keys).
            # Only jobs with a key pay for these four.
            models.Index(
                fields=["-priority", "run_at", "id"],
                condition=Q(status="ready", concurrency_key__isnull=False),
                name="jobqueue_keyed_claim_idx",
            ),
            models.Index(
                fields=["queue", "-priority", "run_at", "id"],
                condition=Q(status="ready", concurrency_key__isnull=False),
                name="jobqueue_keyed_queue_idx",
            ),
            models.Index(
                fields=["concurrency_key", "-priority", "run_at", "id"],
                condition=Q(status="ready", concurrency_key__isnull=False),
                name="jobqueue_key_ready_idx",
            ),
            # How many jobs of a key run now.
            models.Index(
                fields=["concurrency_key"],
                condition=Q(status="running", concurrency_key__isnull=False),
                name="jobqueue_key_running_idx",
            ),
            # Running jobs, for tick_timeouts. locked_until is left out of the
            # index so that a heartbeat stays a HOT update.
            models.Index(fields=["id"], condition=Q(status="running"), name="jobqueue_running_idx"),
            models.Index(
                fields=["finished_at"],
                condition=Q(status__in=["done", "cancelled"]),
                name="jobqueue_finished_idx",
            ),
            # Waiting jobs (depends_on), for the tick's repair pass and the counts.
            models.Index(fields=["id"], condition=Q(status="waiting"), name="jobqueue_waiting_idx"),
            # The admin's job list is newest first; filtered by queue or by name it
            # reads these backwards, and lists a filter's choices by skipping
            # through them (one probe per distinct value, not a scan).
            models.Index(fields=["queue", "id"], name="jobqueue_queue_id_idx"),
            models.Index(fields=["name", "id"], name="jobqueue_name_id_idx"),
            # The admin's cancelled jobs: few among millions of done ones, and
            # only they pay for this index.
            models.Index(fields=["id"], condition=Q(status="cancelled"), name="jobqueue_cancelled_idx"),
            # The admin's search by unique key, finished jobs included (the
            # unique constraint covers live jobs only).
            models.Index(
                fields=["unique_key"],
                condition=Q(unique_key__isnull=False),
                name="jobqueue_unique_key_idx",
            ),
            # A batch's jobs, and whether any is still live (queue/ops/batches.py):
            # only jobs of a batch pay for it.
            models.Index(
                fields=["batch_id", "status"],
                condition=Q(batch_id__isnull=False),
                name="jobqueue_batch_idx",
            ),
        ]
        constraints = [
            models.UniqueConstraint(
                fields=["unique_key"],
                condition=Q(status__in=["ready", "running"]) & Q(unique_key__isnull=False),
                name="jobqueue_live_unique_key",
            ),
            models.CheckConstraint(
                condition=Q(priority__gte=-100) & Q(priority__lte=100),
                name="jobqueue_priority_range",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.name} #{self.pk} ({self.status})"


class DeadLetter(ConditionalIndexes):
    """A job that failed for good: everything needed to investigate and replay it."""

    id = models.BigAutoField(primary_key=True)
    job_id = models.BigIntegerField(help_text="the job's id while it was live")
    name = models.CharField(max_length=200)
    queue = models.CharField(max_length=63)
    payload = models.JSONField(default=dict)
    priority = models.SmallIntegerField(default=0)
    attempts = models.IntegerField()
    max_attempts = models.IntegerField()
    visibility_timeout = models.FloatField()
    # The job's time limit, kept so that a retry restores it.
    timeout = models.FloatField(
        null=True, blank=True, help_text="seconds one attempt may run; empty = no limit"
    )
    # Kept from the job, so that a retry restores them.
    concurrency_key = models.CharField(max_length=255, null=True, blank=True)  # noqa: DJ001 - NULL = no key
    concurrency_limit = models.IntegerField(null=True, blank=True)
    enqueued_at = models.DateTimeField(help_text="when the job was first enqueued")
    worker_id = models.CharField(max_length=255, null=True, blank=True)  # noqa: DJ001
    error = models.TextField(blank=True, default="")
    traceback = models.TextField(blank=True, default="")
    failed_at = models.DateTimeField()
    # Kept from the job, so that a dead Task still reads as one and a retry stays a Task.
    started_at = models.DateTimeField(null=True, blank=True)
    last_attempted_at = models.DateTimeField(null=True, blank=True)
    task_backend = models.CharField(max_length=100, blank=True, default="", db_default="")
    worker_ids = models.JSONField(blank=True, default=list, db_default=[])
    # Kept from the job, and restored by a retry.
    progress = ReportField(null=True, blank=True)
    attempt_history = models.JSONField(blank=True, default=list, db_default=[])
    trace_context = models.JSONField(null=True, blank=True)
    # Kept from the job: a dead letter of a batch counts as failed, and a retry rejoins it.
    batch_id = models.BigIntegerField(null=True, blank=True)

    class Meta:
        indexes = [
            models.Index(fields=["failed_at"], name="jobqueue_dead_failed_idx"),
            models.Index(fields=["queue", "failed_at"], name="jobqueue_dead_queue_idx"),
            models.Index(fields=["name", "failed_at"], name="jobqueue_dead_name_idx"),
            # A Task's result by id (backends.py) looks here once the job is dead.
            models.Index(fields=["job_id"], name="jobqueue_dead_job_idx"),
            models.Index(
                fields=["batch_id"], condition=Q(batch_id__isnull=False), name="jobqueue_dead_batch_idx"
            ),
        ]

    def __str__(self) -> str:
        return f"{self.name} (job #{self.job_id}) failed"


class Batch(ConditionalIndexes):
    """Jobs enqueued in one ``with batch(...)`` block, and the callback enqueued once all have finished.

    ``total`` is fixed when the block ends; ``done``, ``failed`` and
    ``cancelled`` move in the transaction that records each job's outcome (a
    retried dead letter or a cancelled job run again moves one back), so a
    crash can never leave them behind the jobs. Whether a batch has finished
    is read from the jobs themselves: no live job left. ``finished_at`` and
    ``callback_job_id`` are set in the transaction that enqueues the
    callback, exactly once. Written only by ``queue/ops/batches.py``.
    """

    id = models.BigAutoField(primary_key=True)
    on_finish = models.CharField(max_length=200, help_text="the job enqueued once every job has finished")
    payload = models.JSONField(default=dict, help_text="the callback's payload, before the counts")
    # The callback's enqueue options, fixed (and checked) when the batch was opened.
    callback_options = models.JSONField(default=dict)
    total = models.IntegerField(default=0, help_text="jobs enqueued in the block")
    done = models.IntegerField(default=0)
    failed = models.IntegerField(default=0, help_text="jobs in the dead letters")
    cancelled = models.IntegerField(default=0)
    created_at = models.DateTimeField()
    finished_at = models.DateTimeField(null=True, blank=True)
    callback_job_id = models.BigIntegerField(null=True, blank=True)

    class Meta:
        verbose_name_plural = "batches"
        indexes = [
            # The tick's repair pass reads the batches not finished yet, and only they pay.
            models.Index(
                fields=["id"], condition=Q(finished_at__isnull=True), name="jobqueue_batch_open_idx"
            ),
        ]

    def __str__(self) -> str:
        return f"batch #{self.pk} -> {self.on_finish}"


class BatchCount(models.Model):
    """Counts of a batch that an operator's change moved, not yet added to the batch's row.

    An operator's cancel, run-now or dead-letter retry counts its batches'
    jobs here, an insert, instead of updating the batch row: a worker's ack
    updates that row and would otherwise wait on it for as long as the
    operator's transaction stayed open. Once that transaction commits, the
    rows are added to the batch's and deleted, and the batch finished if
    that was its last job; the tick does it for any left. A batch's counts
    are its row's plus these. Written only by ``queue/ops/batches.py``.
    """

    id = models.BigAutoField(primary_key=True)
    # No foreign key, as for Dependency: the rows go with their batch's row by the statements.
    batch_id = models.BigIntegerField()
    done = models.IntegerField(default=0)
    failed = models.IntegerField(default=0)
    cancelled = models.IntegerField(default=0)

    class Meta:
        indexes = [models.Index(fields=["batch_id"], name="jobqueue_batchcount_idx")]

    def __str__(self) -> str:
        counts = f"{self.done:+} done, {self.failed:+} failed, {self.cancelled:+} cancelled"
        return f"batch #{self.batch_id}: {counts}"


class Dependency(models.Model):
    """One outstanding dependency: ``dependent`` waits until ``dependency_id`` is done.

    The row is deleted in the transaction that acks the dependency (and the
    dependent released when it was its last one), or cancels it. While the
    dependency sits in the dead letters the row stays, naming the job id the
    dead letter keeps in ``job_id``; a retry points it to the new job. Written
    only by ``queue/ops/dependencies.py``.
    """

    id = models.BigAutoField(primary_key=True)
    # No database constraint: rows go with their jobs by the statements that finish them.
    dependent = models.ForeignKey(
        Job, on_delete=models.DO_NOTHING, related_name="+", db_constraint=False, db_index=False
    )
    # No foreign key: the dependency may be a dead letter's old job id.
    dependency_id = models.BigIntegerField()

    class Meta:
        indexes = [
            # An ack's release, a cancel's cascade and a retry's re-pointing go by dependency.
            models.Index(fields=["dependency_id", "dependent"], name="jobqueue_dep_dependency_idx"),
        ]
        constraints = [
            # And a dependent's own edges, by the unique index's leading column.
            models.UniqueConstraint(fields=["dependent", "dependency_id"], name="jobqueue_dep_unique"),
        ]

    def __str__(self) -> str:
        return f"job #{self.dependent_id} waits on #{self.dependency_id}"


class QueueOverview(Job):
    """Not a table of its own: the admin's queue overview page hangs off this proxy."""

    class Meta:
        proxy = True
        verbose_name = "queue overview"
        verbose_name_plural = "queue overview"


class Worker(models.Model):
    """One running ``runworker`` process and its last heartbeat."""

    worker_id = models.CharField(max_length=255, unique=True)
    hostname = models.CharField(max_length=255)
    pid = models.IntegerField()
    queues = models.JSONField(default=list)
    concurrency = models.IntegerField()  # the slots it runs now
    # --concurrency MIN:MAX's bounds, written when it registers; NULL for a fixed
    # --concurrency, and on the row of a worker of a release before these columns.
    min_concurrency = models.IntegerField(null=True, blank=True)
    max_concurrency = models.IntegerField(null=True, blank=True)
    started_at = models.DateTimeField()
    last_heartbeat = models.DateTimeField()
    # The ids of running jobs whose claims the last beat could not renew, their rows
    # held by another transaction: tick_timeouts leaves them while this row beats.
    held_claims = models.JSONField(null=True, blank=True)
    # What wakes it for new jobs (docs/workers.md, "Wake-ups"): "checking" until its LISTEN
    # hears the NOTIFY it sends itself, then "live", or "deaf" if it never does (it polls);
    # "off" when it polls only. NULL on the row of a worker of a release before this column,
    # whose INSERT names no such column: NOT NULL would refuse it (Django keeps a field's
    # default in its own INSERTs, not in the table).
    listen = models.CharField(max_length=16, null=True, blank=True)  # noqa: DJ001

    LISTEN_STATES = ("checking", "live", "deaf", "off")

    def __str__(self) -> str:
        return self.worker_id


class Schedule(models.Model):
    """What the fleet has fired of one declared schedule (``JOBQUEUE["SCHEDULES"]``, ``@job(cron=...)``).

    The declaration lives in code; this row is the fleet's shared memory of it.
    ``handled_through`` is the guarantee: every fire time up to it has been
    enqueued (or skipped by ``catch_up``), and a worker moves it forward only
    from the value it read, in the transaction that inserts the jobs. Written
    only by ``queue/ops/schedules.py``.
    """

    name = models.CharField(max_length=200, unique=True)
    job = models.CharField(max_length=200)
    # The declaration as the workers that last synced it read it, and its digest:
    # a worker fires only while its own copy matches (a rolling deploy).
    definition = models.JSONField(default=dict)
    signature = models.CharField(max_length=64)
    handled_through = models.DateTimeField(help_text="every fire time up to here is handled")
    last_fire_at = models.DateTimeField(null=True, blank=True, help_text="the newest fire time enqueued")
    last_job_id = models.BigIntegerField(null=True, blank=True)
    # How a worker finds the schedules that are due without computing every one's
    # fire times: the first fire time after handled_through, or an earlier moment
    # (which only has a worker look at the row sooner), never a later one. None
    # (a row older code wrote) is due. A paused row's moves along its timetable
    # too, so that workers wake for it once it is resumed.
    next_fire_at = models.DateTimeField(
        null=True, blank=True, help_text="no fire time after handled_through comes before this"
    )
    paused = models.BooleanField(default=False)
    created_at = models.DateTimeField()
    updated_at = models.DateTimeField()

    class Meta:
        ordering = ["name"]
        indexes = [
            # A wake's read of the due rows, and the earliest next fire time after them.
            models.Index(fields=["next_fire_at"], name="jobqueue_schedule_due_idx"),
        ]

    def __str__(self) -> str:
        return self.name


class QueueState(models.Model):
    """An operator's word on one queue: paused or not. A queue without a row runs.

    Every claim reads the paused rows, so a pause reaches every worker at its
    next claiming round and survives restarts. Written only by ``queue/ops/pauses.py``.
    """

    queue = models.CharField(max_length=63, unique=True)
    paused = models.BooleanField(default=False)
    updated_at = models.DateTimeField()

    class Meta:
        ordering = ["queue"]

    def __str__(self) -> str:
        return f"{self.queue} ({'paused' if self.paused else 'running'})"


class QueueStart(models.Model):
    """One start of a job of a rate-limited queue: the sliding window's ledger.

    A claim counts a queue's rows newer than its window and writes one per job
    it starts; rows older than every window are deleted. Written only by
    ``queue/ops/limited.py``.
    """

    id = models.BigAutoField(primary_key=True)
    queue = models.CharField(max_length=63)
    started_at = models.DateTimeField()

    class Meta:
        indexes = [models.Index(fields=["queue", "started_at"], name="jobqueue_start_queue_idx")]

    def __str__(self) -> str:
        return f"{self.queue} at {self.started_at}"
