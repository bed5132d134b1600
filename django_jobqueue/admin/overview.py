"""The queue overview, the page an operator opens first, and the list of live workers.

Besides the figures, the overview pauses and resumes queues: a button per
queue posts to a view that calls ``QueueClient`` and answers with a redirect.
Only users who may change jobs see the buttons; the views refuse the others.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from django.contrib import admin, messages
from django.core.exceptions import PermissionDenied
from django.db.models import QuerySet
from django.db.models.functions import Now
from django.http import HttpRequest, HttpResponse, HttpResponseNotAllowed, HttpResponseRedirect
from django.template.response import TemplateResponse
from django.urls import URLPattern, path, reverse
from django.utils import timezone
from django.utils.html import format_html
from django.utils.safestring import SafeString

from .. import stats
from ..models import QueueState, Worker
from ..queue import QueueClient
from ..queue.validation import check_queue
from .audit import log_queue_state
from .base import ReadOnlyAdmin
from .databases import choose_database, database_context, shown_database
from .display import cut, cut_column, date_column, in_list, pill, slots, timestamp, with_relative

# The chart's drawing box, in SVG units; the browser scales it to the page.
CHART_WIDTH, CHART_HEIGHT, CHART_TOP, CHART_BOTTOM = 720, 150, 14, 20
REFRESH_CHOICES = (5, 10, 30, 60)
PAUSED = "Paused: no worker claims from the queue until it is resumed."
RESUMED = "Resumed: workers claim from the queue again."


@dataclass
class Bar:
    x: float
    width: float
    done_y: float
    done_height: float
    failed_y: float
    failed_height: float
    title: str


def may_pause(request: HttpRequest) -> bool:
    """Pausing a queue stops its jobs, as cancelling does: it takes the permission to change jobs."""
    user = request.user
    return bool(user.is_active and user.is_staff and user.has_perm("django_jobqueue.change_job"))


def may_see_jobs(request: HttpRequest) -> bool:
    user = request.user
    return bool(
        user.is_active
        and user.is_staff
        and (user.has_perm("django_jobqueue.view_job") or user.has_perm("django_jobqueue.change_job"))
    )


class QueueOverviewAdmin(ReadOnlyAdmin):
    """Serves the overview page at this proxy model's list URL; the proxy has no other page."""

    def has_view_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return may_see_jobs(request)

    def has_module_permission(self, request: HttpRequest) -> bool:
        return may_see_jobs(request)

    def get_urls(self) -> list[URLPattern]:
        prefix, view = f"{self.opts.app_label}_{self.opts.model_name}", self.admin_site.admin_view
        return [
            path("", view(self.changelist_view), name=f"{prefix}_changelist"),
            path("pause/", view(self.pause_view), name=f"{prefix}_pause"),
            path("resume/", view(self.resume_view), name=f"{prefix}_resume"),
            path("database/", view(choose_database), name=f"{prefix}_database"),
        ]

    def changelist_view(
        self, request: HttpRequest, extra_context: dict[str, Any] | None = None
    ) -> HttpResponse:
        if not self.has_view_permission(request):
            raise PermissionDenied
        using = shown_database(request)
        figures = stats.overview(using)
        if figures.limits_problem is not None:
            message = f"The queues’ limits are not shown: {figures.limits_problem}."
            self.message_user(request, message, messages.ERROR)
        widest = max((queue.backlog for queue in figures.queues), default=0)
        refresh = request.GET.get("refresh", "")
        return TemplateResponse(
            request,
            "admin/django_jobqueue/overview.html",
            {
                **self.admin_site.each_context(request),
                "opts": self.opts,
                "title": "Queue overview",
                "overview": figures,
                "rows": [
                    (queue, bar_widths(queue, widest), stats.describe_limits(queue.limits))
                    for queue in figures.queues
                ],
                "busiest_keys": stats.busiest_keys(using, figures.now),
                "busiest_cap": stats.BUSIEST_KEYS,
                "may_pause": may_pause(request),
                "chart": chart(figures.minutes),
                "late_heartbeat": stats.LATE_HEARTBEAT,
                "refresh": int(refresh) if refresh.isdigit() and int(refresh) in REFRESH_CHOICES else None,
                "refresh_choices": REFRESH_CHOICES,
                **database_context(request, request.path),
                **(extra_context or {}),
            },
        )

    def pause_view(self, request: HttpRequest) -> HttpResponse:
        return self.set_paused(request, paused=True)

    def resume_view(self, request: HttpRequest) -> HttpResponse:
        return self.set_paused(request, paused=False)

    def set_paused(self, request: HttpRequest, *, paused: bool) -> HttpResponse:
        """Pause or resume the posted queue, log it, say what happened and go back to the overview."""
        if request.method != "POST":
            return HttpResponseNotAllowed(["POST"])
        if not may_pause(request):
            raise PermissionDenied
        back = HttpResponseRedirect(reverse("admin:django_jobqueue_queueoverview_changelist"))
        try:
            queue = check_queue(request.POST.get("queue", ""))
        except ValueError as exc:
            self.message_user(request, f"Nothing was changed: {exc}.", messages.ERROR)
            return back
        client = QueueClient(shown_database(request))
        if not (client.pause_queue(queue) if paused else client.resume_queue(queue)):
            state = "already paused" if paused else "not paused"
            self.message_user(request, f"Queue “{queue}” was {state}.", messages.WARNING)
            return back
        row = QueueState.objects.using(client.using).get(queue=queue)
        log_queue_state(request, row, PAUSED if paused else RESUMED)
        if paused:
            done = f"Paused queue “{queue}”: no worker claims from it until it is resumed; "
            done += "enqueueing still works and running jobs finish."
        else:
            done = f"Resumed queue “{queue}”: workers claim from it again."
        self.message_user(request, done, messages.SUCCESS)
        return back


def bar_widths(queue: stats.QueueStats, widest: int) -> list[tuple[str, float, int]]:
    """The queue's stacked bar: (kind, percent of the widest queue's backlog, count)."""
    if not widest:
        return []
    parts = [
        ("ready", queue.ready),
        ("scheduled", queue.scheduled),
        ("running", queue.running),
        ("dead", queue.dead),
    ]
    return [(kind, round(100 * count / widest, 2), count) for kind, count in parts if count]


def chart(minutes: list[stats.Minute]) -> dict[str, Any]:
    """Bars for jobs done (below) and dead-lettered (on top) in each minute of the last hour."""
    if not minutes:
        return {"bars": [], "peak": 0}
    peak = max(minute.done + minute.failed for minute in minutes)
    plot_height = CHART_HEIGHT - CHART_TOP - CHART_BOTTOM
    step = CHART_WIDTH / len(minutes)
    bars = []
    for index, minute in enumerate(minutes):
        scale = plot_height / peak if peak else 0
        done_height = minute.done * scale
        failed_height = minute.failed * scale
        base = CHART_TOP + plot_height
        bars.append(
            Bar(
                x=round(index * step + 1, 2),
                width=round(step - 2, 2),
                done_y=round(base - done_height, 2),
                done_height=round(done_height, 2),
                failed_y=round(base - done_height - failed_height, 2),
                failed_height=round(failed_height, 2),
                title=f"{minute.start:%H:%M}: {minute.done:,} done, {minute.failed:,} failed for good",
            )
        )
    return {
        "bars": bars,
        "peak": peak,
        "width": CHART_WIDTH,
        "height": CHART_HEIGHT,
        "top": CHART_TOP,
        "baseline": CHART_HEIGHT - CHART_BOTTOM,
        "label_y": CHART_HEIGHT - 5,
        "total_done": sum(minute.done for minute in minutes),
        "total_failed": sum(minute.failed for minute in minutes),
    }


class WorkerAdmin(ReadOnlyAdmin):
    """The registered ``runworker`` processes; read-only (the workers write these rows)."""

    # Long ids, host names and queue lists cut to their columns, times by how far away they are.
    list_display = ("worker", "host", "pid", "queues_served", "slots", "started_ago", "heartbeat_ago")
    # The detail page shows the same values whole (Django's own would write
    # an empty queue list as "-" and dates in another format).
    fields = ("worker_id", "hostname", "pid", "serves", "slots", "started", "heartbeat")
    readonly_fields = fields
    ordering = ("worker_id",)

    def get_queryset(self, request: HttpRequest) -> QuerySet[Worker]:
        # The database's clock, read with the rows, to tell a late heartbeat.
        return super().get_queryset(request).annotate(database_now=Now())

    worker = cut_column("worker_id", "worker id")
    host = cut_column("hostname")

    @admin.display(description="queues")
    def serves(self, worker: Worker) -> str:
        return ", ".join(worker.queues) if worker.queues else "every queue"

    @admin.display(description="concurrency")
    def slots(self, worker: Worker) -> str:
        return slots(worker.concurrency, worker.min_concurrency, worker.max_concurrency)

    @admin.display(description="queues")
    def queues_served(self, worker: Worker) -> SafeString | str:
        return cut(self.serves(worker))

    started_ago = date_column("started_at", "started", "started at")

    @admin.display(description="last heartbeat")
    def heartbeat_ago(self, worker: Worker) -> SafeString:
        return self.late(worker, in_list(worker.last_heartbeat, "last heartbeat at"))

    @admin.display(description="started at")
    def started(self, worker: Worker) -> str:
        return timestamp(worker.started_at)

    @admin.display(description="last heartbeat")
    def heartbeat(self, worker: Worker) -> SafeString:
        return self.late(worker, with_relative(worker.last_heartbeat))

    def late(self, worker: Worker, shown: SafeString | str) -> SafeString:
        """``shown`` (the last heartbeat), marked *late* past ``stats.LATE_HEARTBEAT``."""
        now = getattr(worker, "database_now", None) or timezone.now()
        if (now - worker.last_heartbeat).total_seconds() > stats.LATE_HEARTBEAT:
            return format_html("{} {}", shown, pill("late", "late"))
        return format_html("{}", shown)
