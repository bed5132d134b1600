"""Batches: each one's progress, counts and callback; read-only (the queue writes these rows)."""

from __future__ import annotations

from django.contrib import admin
from django.db.models import QuerySet
from django.http import HttpRequest
from django.urls import reverse
from django.utils.html import format_html
from django.utils.safestring import SafeString

from ..models import Batch, Job
from ..queue import QueueClient
from .base import TitledAdmin
from .display import EMPTY, timestamp


class BatchAdmin(TitledAdmin):
    """``batch()``'s rows: how far each batch is, and the callback it enqueued once finished."""

    list_display = (
        "id",
        "on_finish",
        "progress",
        "done",
        "failed",
        "cancelled",
        "created",
        "finished",
        "callback",
    )
    fields = (
        "id",
        "on_finish",
        "payload",
        "progress",
        "total",
        "done",
        "failed",
        "cancelled",
        "outstanding",
        "created",
        "finished",
        "callback",
    )
    readonly_fields = fields
    ordering = ("-id",)
    search_fields = ("on_finish",)
    show_facets = admin.ShowFacets.NEVER
    empty_value_display = EMPTY

    class Media:
        css = {"all": ["django_jobqueue/admin.css"]}

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Batch | None = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Batch | None = None) -> bool:
        return False

    def get_queryset(self, request: HttpRequest) -> QuerySet[Batch]:
        return super().get_queryset(request).using(QueueClient().using)

    @admin.display(description="progress")
    def progress(self, batch: Batch) -> SafeString:
        finished = batch.done + batch.failed + batch.cancelled
        total = max(batch.total, finished)
        share = 100 if total == 0 else 100 * finished // total
        state = "finished" if batch.finished_at is not None else "running"
        return format_html(
            '<progress max="{}" value="{}" title="{}%"></progress> {} of {} finished ({}%), {}',
            max(total, 1),
            finished if total else 1,
            share,
            f"{finished:,}",
            f"{total:,}",
            share,
            state,
        )

    @admin.display(description="live jobs")
    def outstanding(self, batch: Batch) -> str:
        # Read from the rows (the batch index), as the batch's end is.
        live = Job.objects.using(QueueClient().using).filter(
            batch_id=batch.pk, status__in=["ready", "running"]
        )
        return f"{live.count():,}"

    @admin.display(description="created at")
    def created(self, batch: Batch) -> str:
        return timestamp(batch.created_at)

    @admin.display(description="finished at")
    def finished(self, batch: Batch) -> str:
        return timestamp(batch.finished_at) if batch.finished_at else EMPTY

    @admin.display(description="callback")
    def callback(self, batch: Batch) -> SafeString | str:
        if batch.callback_job_id is None:
            return "not yet: enqueued once every job has finished"
        # The job's own page checks who may see it (and says so once it is pruned).
        url = reverse(
            "admin:django_jobqueue_job_change", args=[batch.callback_job_id], current_app=self.admin_site.name
        )
        return format_html('<a href="{}">{} job #{}</a>', url, batch.on_finish, batch.callback_job_id)
