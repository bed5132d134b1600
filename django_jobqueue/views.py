"""The queue's figures for Prometheus, read from the database: ``django_jobqueue.views.metrics``.

Mount it in your URLconf, ``path("jobqueue/metrics", metrics)``. A scrape reads
the figures of ``stats.metrics_snapshot`` (partial indexes and small tables
only, so it stays cheap at millions of jobs) and renders them with
prometheus_client. It answers a logged-in active staff user, or a request
with ``Authorization: Bearer <JOBQUEUE["METRICS_TOKEN"]>``; anyone else gets
403. The workers' own series (jobs run, durations) come from ``runworker
--metrics-port``, not from here.
"""

from __future__ import annotations

import hmac
import logging
from collections.abc import Iterator

from django.db import DatabaseError
from django.http import HttpRequest, HttpResponse
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_GET
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from .conf import jobqueue_settings, queue_databases
from .stats import MetricsSnapshot, metrics_snapshot

logger = logging.getLogger(__name__)

# The job states of jobqueue_queue_jobs; each is a field of stats.QueueStats.
JOB_STATES = ("ready", "scheduled", "running", "waiting")
# Every series this view exports: what recipes, dashboards and alerts may name.
QUEUE_SERIES = (
    "jobqueue_queue_jobs",
    "jobqueue_queue_dead_letters",
    "jobqueue_queue_oldest_ready_age_seconds",
    "jobqueue_queue_paused",
    "jobqueue_workers_alive",
)
BEARER = "bearer "


class QueueCollector(Collector):
    """The families of one snapshot per queue database: every known queue gets every series, zeros included.

    A series that is missing while a queue is empty would break ``rate()`` and
    alerts on it; a zero keeps it continuous. Every series carries the alias of
    its database (``database``), so that queues of the same name on two
    databases stay apart.
    """

    def __init__(self, snapshots: dict[str, MetricsSnapshot]) -> None:
        self.snapshots = snapshots

    def collect(self) -> Iterator[Metric]:
        jobs = GaugeMetricFamily(
            "jobqueue_queue_jobs",
            "Live jobs per queue: ready (due now), scheduled (run_at in the future), running, "
            "waiting (for a dependency).",
            labels=["database", "queue", "state"],
        )
        dead = GaugeMetricFamily(
            "jobqueue_queue_dead_letters", "Dead letters per queue.", labels=["database", "queue"]
        )
        oldest = GaugeMetricFamily(
            "jobqueue_queue_oldest_ready_age_seconds",
            "Seconds the oldest due ready job has waited, by the database's clock; 0 when none is due.",
            labels=["database", "queue"],
        )
        paused = GaugeMetricFamily(
            "jobqueue_queue_paused", "1 while the queue is paused.", labels=["database", "queue"]
        )
        alive = GaugeMetricFamily(
            "jobqueue_workers_alive",
            "Registered workers whose last heartbeat is under 60 seconds old.",
            labels=["database"],
        )
        for database, snapshot in self.snapshots.items():
            for queue in snapshot.queues:
                where = [database, queue.queue]
                for state in JOB_STATES:
                    jobs.add_metric([*where, state], getattr(queue, state))
                dead.add_metric(where, queue.dead)
                oldest.add_metric(where, queue.oldest_ready_age or 0.0)
                paused.add_metric(where, 1 if queue.paused else 0)
            alive.add_metric([database], snapshot.workers_alive)
        yield from (jobs, dead, oldest, paused, alive)


@never_cache
@require_GET
def metrics(request: HttpRequest) -> HttpResponse:
    """Answer the queue's figures in Prometheus's text format; 403 without staff or the token.

    Every queue database is read (``JOBQUEUE["DATABASE"]`` and
    ``JOBQUEUE["DATABASES"]``). 503 when one does not answer: the scrape fails
    visibly, as Prometheus's ``up`` shows, rather than reporting empty queues.
    """
    refusal = _refusal(request)
    if refusal is not None:
        return HttpResponse(refusal, status=403, content_type="text/plain; charset=utf-8")
    snapshots = {}
    for database in queue_databases():
        try:
            snapshots[database] = metrics_snapshot(database)
        except DatabaseError as exc:
            logger.warning("queue metrics: the database %r did not answer: %s", database, exc)
            return HttpResponse(
                f"the queue's database {database!r} did not answer\n",
                status=503,
                content_type="text/plain; charset=utf-8",
            )
    return HttpResponse(generate_latest(QueueCollector(snapshots)), content_type=CONTENT_TYPE_LATEST)


def _refusal(request: HttpRequest) -> str | None:
    """Why ``request`` may not read the metrics, or None when it may.

    A request that carries an Authorization header is judged by its token alone,
    so a scraper with a wrong token fails even from a browser with a staff session.
    """
    header = request.headers.get("Authorization")
    if header is not None:
        return _token_refusal(header)
    user = getattr(request, "user", None)
    if user is not None and user.is_authenticated and user.is_active and user.is_staff:
        return None
    return "log in as an active staff user, or send Authorization: Bearer <JOBQUEUE['METRICS_TOKEN']>\n"


def _token_refusal(header: str) -> str | None:
    expected = jobqueue_settings.METRICS_TOKEN
    if not isinstance(expected, str) or not expected:
        return "no JOBQUEUE['METRICS_TOKEN'] is set: only staff sessions may read the metrics\n"
    if not header.lower().startswith(BEARER):
        return "the Authorization header must be 'Bearer <token>'\n"
    given = header[len(BEARER) :].strip()
    # Bytes, since compare_digest refuses non-ASCII strings; constant time either way.
    if not hmac.compare_digest(given.encode(), expected.encode()):
        return "wrong metrics token\n"
    return None
