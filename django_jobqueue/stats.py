"""Read-only figures about the queue: what the admin's overview and ``jobqueue status`` show.

Every query here is served by an index, so that the figures stay cheap on a
table of millions of jobs: ready jobs by the claim's partial indexes (jobs
without a concurrency key and jobs with one are in different indexes, so each
half is counted apart and the two added), running jobs by theirs, the last
hour by the finished-jobs index, dead letters by their queue index. Ages are
measured against the database's clock, like everything else in the queue.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from django.db import connections, models, transaction
from django.db.models import Count, Max, Min, Q
from django.db.models.functions import TruncMinute

from .conf import jobqueue_settings
from .indexed import finished_at, keyed_status, ready_half
from .models import DeadLetter, Job, JobStatus, Worker
from .queue import WORKER_STALE_AFTER, QueueClient, engine_for
from .queue.flow import QueueLimits, configured_limits
from .queue.rows import to_datetime

# A worker beats at least every 10 s; three missed beats and it is shown as late.
# (Its row is deleted by the other workers' upkeep after 60 s of silence.)
LATE_HEARTBEAT = 30.0
THROUGHPUT_MINUTES = 60
# The overview's table of concurrency keys stops here: the ones holding the most slots.
BUSIEST_KEYS = 10


@dataclass
class QueueStats:
    """One queue's figures. ``oldest_ready_age``: seconds the job at the front has been due."""

    queue: str
    ready: int = 0
    scheduled: int = 0
    running: int = 0
    dead: int = 0
    # Enqueued with depends_on, waiting for a dependency: not claimable, so not backlog.
    waiting: int = 0
    done_last_hour: int = 0
    oldest_ready_age: float | None = None
    # An operator's pause (QueueState) and JOBQUEUE["QUEUES"]'s limits.
    paused: bool = False
    limits: QueueLimits = field(default_factory=QueueLimits)

    @property
    def backlog(self) -> int:
        return self.ready + self.scheduled + self.running + self.dead

    def add(self, other: QueueStats) -> None:
        self.ready += other.ready
        self.scheduled += other.scheduled
        self.running += other.running
        self.dead += other.dead
        self.waiting += other.waiting
        self.done_last_hour += other.done_last_hour
        if other.oldest_ready_age is not None:
            self.oldest_ready_age = max(self.oldest_ready_age or 0.0, other.oldest_ready_age)


# WorkerStats' fields that the admin shows and `jobqueue status --json` leaves out.
ADMIN_ONLY = frozenset({"min_concurrency", "max_concurrency"})


@dataclass
class WorkerStats:
    worker_id: str
    hostname: str
    pid: int
    queues: list[str]
    concurrency: int
    started_at: datetime
    last_heartbeat: datetime
    heartbeat_age: float
    # --concurrency MIN:MAX's bounds, for the admin; None for a fixed number (or an older worker's row).
    min_concurrency: int | None = None
    max_concurrency: int | None = None
    # Its LISTEN: "live", "deaf" (it polls), "off" (it polls only), "checking"; None for an older worker.
    listen: str | None = None

    @property
    def late(self) -> bool:
        return self.heartbeat_age > LATE_HEARTBEAT


@dataclass
class Minute:
    """Jobs done and jobs that failed for good in the minute from ``start``."""

    start: datetime
    done: int = 0
    failed: int = 0


@dataclass
class KeyStats:
    """A concurrency key's running jobs, and the highest limit they carry."""

    key: str
    running: int
    limit: int | None


@dataclass
class Overview:
    now: datetime
    queues: list[QueueStats]
    total: QueueStats
    workers: list[WorkerStats]
    minutes: list[Minute] = field(default_factory=list)
    # Why JOBQUEUE["QUEUES"] could not be read (the limits are then left out); the check says the same.
    limits_problem: str | None = None

    def as_json(self) -> dict[str, Any]:
        """A JSON-ready dict: what ``jobqueue status --json`` prints."""

        def queue(stats: QueueStats) -> dict[str, Any]:
            figures = asdict(stats)
            if stats.oldest_ready_age is not None:
                figures["oldest_ready_age"] = round(stats.oldest_ready_age, 1)
            figures["limits"] = limits_json(stats.limits)
            return figures

        not_totals = {"queue", "paused", "limits"}
        return {
            "database_time": self.now.isoformat(),
            "queues": [queue(stats) for stats in self.queues],
            "total": {key: value for key, value in queue(self.total).items() if key not in not_totals},
            "workers": [
                {
                    # The range is the admin's; the command's JSON keeps the fields it documents.
                    **{key: value for key, value in asdict(worker).items() if key not in ADMIN_ONLY},
                    "heartbeat_age": round(worker.heartbeat_age, 1),
                    "started_at": worker.started_at.isoformat(),
                    "last_heartbeat": worker.last_heartbeat.isoformat(),
                    "late": worker.late,
                }
                for worker in self.workers
            ],
        }


def limits_json(limits: QueueLimits) -> dict[str, Any]:
    """``{"concurrency": 10, "rate_limit": "100/m"}``, ``None`` for a limit the queue has not."""
    rate = None if limits.rate is None else str(limits.rate)
    return {"concurrency": limits.concurrency, "rate_limit": rate}


def database_now(using: str) -> datetime:
    """Return the database's clock, as an aware datetime under ``USE_TZ``."""
    connection = connections[using]
    with connection.cursor() as cursor:
        # An empty parameter list, so that SQLite's %% escapes are unfolded.
        cursor.execute(f"SELECT {engine_for(connection).now}", [])
        value = cursor.fetchone()[0]
    now = to_datetime(value)
    if now is None:
        raise ValueError("the database returned no value for its clock")
    return now


@contextmanager
def one_snapshot(using: str) -> Iterator[None]:
    """Run the block's reads in one transaction that sees one state of the database.

    Read statement by statement, a claim committing between the count of ready
    jobs and that of running ones would count its job in both (or neither).
    Inside a transaction already (``ATOMIC_REQUESTS``), the reads join it as
    they are: its isolation was set by its first statement. On SQLite the reads
    stay statement by statement (see its engine's ``snapshot_read``).
    """
    connection = connections[using]
    engine = engine_for(connection)
    if engine.snapshot_read is None or connection.in_atomic_block:
        yield
        return
    with transaction.atomic(using=using):
        with connection.cursor() as cursor:
            cursor.execute(engine.snapshot_read)
            if engine.snapshot_plans is not None:
                cursor.execute(engine.snapshot_plans)
        yield


def overview(using: str | None = None, *, minutes: bool = True) -> Overview:
    """Collect every queue's figures, the live workers and (if ``minutes``) the last hour."""
    using = using or jobqueue_settings.DATABASE
    with one_snapshot(using):
        return _overview(using, minutes=minutes)


def _overview(using: str, *, minutes: bool) -> Overview:
    now = database_now(using)
    queues = _live_queue_stats(using, now)
    hour_ago = now - timedelta(hours=1)
    done = finished_at(Job.objects.using(using).order_by().filter(status=JobStatus.DONE), gte=hour_ago)
    for name, count in _count_by_queue(done):
        queues.setdefault(name, QueueStats(name)).done_last_hour = count
    limits, problem = _configured_limits()
    for name, queue_limits in limits.items():
        queues.setdefault(name, QueueStats(name)).limits = queue_limits

    ordered = [queues[name] for name in sorted(queues)]
    total = QueueStats("total")
    for entry in ordered:
        total.add(entry)
    return Overview(
        now=now,
        queues=ordered,
        total=total,
        workers=live_workers(using, now),
        minutes=last_hour(using, now) if minutes else [],
        limits_problem=problem,
    )


@dataclass
class MetricsSnapshot:
    """What ``django_jobqueue.views.metrics`` exports: the live queues' figures and the live workers.

    ``done_last_hour`` and ``limits`` of each queue are left unread: done jobs are
    not a series (the workers count them as they finish), and counting them would
    be the one query here that grows with the history kept.
    """

    now: datetime
    queues: list[QueueStats]
    workers_alive: int


def metrics_snapshot(using: str | None = None) -> MetricsSnapshot:
    """Read every queue's ready, scheduled, running and dead jobs, its pause, and the live workers.

    Every query is served by a partial index or a small table, so the cost follows
    the live jobs and dead letters, never the done jobs kept. A queue of
    ``JOBQUEUE["QUEUES"]`` and the default queue are listed even while empty, so
    that their series do not vanish between jobs. All is read from one
    snapshot, so that a job is counted in one state only.
    """
    using = using or jobqueue_settings.DATABASE
    with one_snapshot(using):
        return _metrics_snapshot(using)


def _metrics_snapshot(using: str) -> MetricsSnapshot:
    now = database_now(using)
    queues = _live_queue_stats(using, now)
    for name in [jobqueue_settings.DEFAULT_QUEUE, *_configured_limits()[0]]:
        queues.setdefault(name, QueueStats(name))
    # The ticker's rule: a worker silent for longer is dead, and its row is deleted.
    since = now - timedelta(seconds=WORKER_STALE_AFTER)
    alive = Worker.objects.using(using).filter(last_heartbeat__gte=since).count()
    return MetricsSnapshot(now=now, queues=[queues[name] for name in sorted(queues)], workers_alive=alive)


def _live_queue_stats(using: str, now: datetime) -> dict[str, QueueStats]:
    """Per queue: ready jobs due and scheduled, the oldest due one's age, running jobs, dead letters, pause.

    A paused queue is listed even while it holds no job.
    """
    queues: dict[str, QueueStats] = {}

    def stats(name: str) -> QueueStats:
        return queues.setdefault(name, QueueStats(name))

    jobs = Job.objects.using(using).order_by()
    for row in _ready_by_queue(jobs, now):
        entry = stats(row["queue"])
        entry.ready += row["due"]
        entry.scheduled += row["later"]
        if row["oldest"] is not None:
            age = max(0.0, (now - row["oldest"]).total_seconds())
            entry.oldest_ready_age = max(entry.oldest_ready_age or 0.0, age)
    for name, count in _count_by_queue(jobs.filter(status=JobStatus.RUNNING)):
        stats(name).running = count
    # In the waiting jobs' partial index: the cost follows the waiting jobs alone.
    for name, count in _count_by_queue(jobs.filter(status=JobStatus.WAITING)):
        stats(name).waiting = count
    for name, count in _count_by_queue(DeadLetter.objects.using(using).order_by()):
        stats(name).dead = count
    for name in QueueClient(using).paused_queues():
        stats(name).paused = True
    return queues


def _ready_by_queue(jobs: models.QuerySet[Job], now: datetime) -> list[dict[str, Any]]:
    """Per queue, ready jobs due and scheduled and the oldest due, in two rows: without a key and with one.

    One query for each half, each in the partial index of its half; a query
    over every ready job at once would match neither and scan the table. Each
    half is said as the claim indexes hold it (``indexed.ready_half``).
    """
    rows: list[dict[str, Any]] = []
    for keyed in (False, True):
        half = (
            jobs.filter(ready_half(jobs.db, keyed))
            .values("queue")
            .annotate(
                due=Count("pk", filter=Q(run_at__lte=now)),
                later=Count("pk", filter=Q(run_at__gt=now)),
                oldest=Min("run_at", filter=Q(run_at__lte=now)),
            )
        )
        rows.extend(dict(row) for row in half)
    return rows


def _configured_limits() -> tuple[dict[str, QueueLimits], str | None]:
    # A bad setting is the system check's to report (E014); the figures still show.
    try:
        return configured_limits(), None
    except ValueError as exc:
        return {}, str(exc)


def busiest_keys(using: str, now: datetime, limit: int = BUSIEST_KEYS) -> list[KeyStats]:
    """The concurrency keys with the most running jobs, most first; only unexpired claims count.

    As for the claim, a job whose claim expired holds no slot. Read in the
    index of running jobs with a key.
    """
    keyed = Job.objects.using(using).filter(concurrency_key__isnull=False, locked_until__gt=now)
    rows = (
        keyed_status(keyed, exact=JobStatus.RUNNING)
        .values("concurrency_key")
        .annotate(running=Count("pk"), limit=Max("concurrency_limit"))
        .order_by("-running", "concurrency_key")[:limit]
    )
    return [KeyStats(str(row["concurrency_key"]), row["running"], row["limit"]) for row in rows]


def _count_by_queue(queryset: models.QuerySet[Any]) -> list[tuple[str, int]]:
    # COUNT(*), not COUNT(id): the id is in no queue index, and counting it would read every
    # row from the table (100,000 dead letters: a scan of 180 ms instead of an index-only 20 ms).
    return [(row["queue"], row["count"]) for row in queryset.values("queue").annotate(count=Count("*"))]


def live_workers(using: str, now: datetime) -> list[WorkerStats]:
    """The registered workers, by id, with the age of their last heartbeat."""
    return [
        WorkerStats(
            worker_id=worker.worker_id,
            hostname=worker.hostname,
            pid=worker.pid,
            queues=list(worker.queues or []),
            concurrency=worker.concurrency,
            started_at=worker.started_at,
            last_heartbeat=worker.last_heartbeat,
            heartbeat_age=max(0.0, (now - worker.last_heartbeat).total_seconds()),
            min_concurrency=worker.min_concurrency,
            max_concurrency=worker.max_concurrency,
            listen=worker.listen,
        )
        for worker in Worker.objects.using(using).order_by("worker_id")
    ]


def last_hour(using: str, now: datetime) -> list[Minute]:
    """Jobs done and dead-lettered in each of the last 60 minutes, oldest minute first.

    Done jobs are counted while they are kept (``KEEP_COMPLETED``): with 0 they
    are deleted on ack and the chart shows failures only.
    """
    current = now.replace(second=0, microsecond=0)
    start = current - timedelta(minutes=THROUGHPUT_MINUTES - 1)
    minutes = {
        start + timedelta(minutes=i): Minute(start + timedelta(minutes=i)) for i in range(THROUGHPUT_MINUTES)
    }
    # Bounded on both sides: a stored date in year 9999 has no minute in a time
    # zone east of UTC, and truncating it would fail the whole page.
    end = current + timedelta(minutes=1)
    # Minutes cut in UTC: every time zone's offset is whole minutes, so they are the
    # same minutes, and MySQL then needs no time zone tables (CONVERT_TZ) to cut them.
    done = (
        finished_at(Job.objects.using(using).filter(status=JobStatus.DONE), gte=start, lt=end)
        .annotate(minute=TruncMinute("finished_at", tzinfo=UTC))
        .values("minute")
        .annotate(count=Count("pk"))
        .order_by()
    )
    for row in done:
        if row["minute"] in minutes:
            minutes[row["minute"]].done = row["count"]
    failed = (
        DeadLetter.objects.using(using)
        .filter(failed_at__gte=start, failed_at__lt=end)
        .annotate(minute=TruncMinute("failed_at", tzinfo=UTC))
        .values("minute")
        .annotate(count=Count("pk"))
        .order_by()
    )
    for row in failed:
        if row["minute"] in minutes:
            minutes[row["minute"]].failed = row["count"]
    return list(minutes.values())


def describe_limits(limits: QueueLimits) -> str:
    """``10 at once, 100/m``: a queue's ``JOBQUEUE["QUEUES"]`` limits as a person reads them, or ``—``."""
    parts = [] if limits.concurrency is None else [f"{limits.concurrency:,} at once"]
    if limits.rate is not None:
        parts.append(str(limits.rate))
    return ", ".join(parts) or "—"


def format_age(seconds: float | None) -> str:
    """``45 s``, ``12 min``, ``3 h 5 min``, ``2 d 4 h``: a duration a person reads at a glance."""
    if seconds is None:
        return "—"
    seconds = max(0.0, seconds)
    if seconds < 60:
        return f"{seconds:.0f} s"
    minutes = int(seconds // 60)
    if minutes < 60:
        return f"{minutes} min"
    hours, minutes = divmod(minutes, 60)
    if hours < 24:
        return f"{hours} h {minutes} min" if minutes else f"{hours} h"
    days, hours = divmod(hours, 24)
    return f"{days} d {hours} h" if hours else f"{days} d"
