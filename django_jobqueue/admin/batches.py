"""Batches: each one's progress, counts and callback; read-only (the queue writes these rows)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from django.contrib import admin
from django.db.models import Count
from django.urls import reverse
from django.utils.html import format_html, format_html_join
from django.utils.safestring import SafeString

from ..models import Batch, DeadLetter, Job, JobStatus
from .base import ReadOnlyAdmin
from .databases import database_of
from .display import EMPTY, cut_column, date_column, plural, progress_cell, timestamp

# A batch's jobs by status on its page, in the order a job goes through them.
STATES = (JobStatus.WAITING, JobStatus.READY, JobStatus.RUNNING, JobStatus.DONE, JobStatus.CANCELLED)
LIVE = (JobStatus.WAITING, JobStatus.READY, JobStatus.RUNNING)


@dataclass
class BatchRows:
    """The rows a batch has now: its jobs by status, and its dead letters."""

    jobs: dict[str, int]
    dead_letters: int


def rows_of(batch: Batch) -> BatchRows:
    """Count the batch's rows once per page, by the batch index of each table."""
    cached = getattr(batch, "_jobqueue_rows", None)
    if isinstance(cached, BatchRows):
        return cached
    using = database_of(batch)
    by_status = (
        Job.objects.using(using)
        .filter(batch_id=batch.pk)
        .order_by()
        .values("status")
        .annotate(count=Count("*"))
    )
    dead = DeadLetter.objects.using(using).filter(batch_id=batch.pk).order_by()
    rows = BatchRows({row["status"]: row["count"] for row in by_status}, dead.count())
    batch._jobqueue_rows = rows  # type: ignore[attr-defined]
    return rows


def count_of(field: str) -> Callable[[Any, Batch], str]:
    """A column of one of the batch's counts, with thousands separated (``9,017``) as the page's others."""

    @admin.display(description=field, ordering=field)
    def column(admin_page: Any, batch: Batch) -> str:
        return f"{getattr(batch, field):,}"

    return column


class BatchAdmin(ReadOnlyAdmin):
    """``batch()``'s rows: how far each batch is, and the callback it enqueued once finished."""

    # The list's own columns of the callback, progress and times are short: a list is read across.
    list_display = (
        "id",
        "callback_name",
        "share_finished",
        "done_count",
        "failed_count",
        "cancelled_count",
        "created_ago",
        "finished_ago",
        "callback_link",
    )
    fields = (
        "id",
        "on_finish",
        "payload",
        "progress",
        "total_count",
        "done_count",
        "failed_count",
        "cancelled_count",
        "outstanding",
        "jobs",
        "dead_letters",
        "created",
        "finished",
        "callback",
    )
    readonly_fields = fields
    ordering = ("-id",)
    total_count = count_of("total")
    done_count = count_of("done")
    failed_count = count_of("failed")
    cancelled_count = count_of("cancelled")
    search_fields = ("on_finish",)

    @admin.display(description="progress")
    def progress(self, batch: Batch) -> SafeString:
        return format_html("{} {}", progress_bar(batch), progress_words(batch))

    callback_name = cut_column("on_finish", "on finish")

    @admin.display(description="progress")
    def share_finished(self, batch: Batch) -> SafeString:
        # The bar and its share; the counts and the state in the tooltip (and the columns beside).
        return progress_cell(progress_bar(batch), f"{progress_share(batch)}%", progress_words(batch))

    created_ago = date_column("created_at", "created", "created at")
    finished_ago = date_column("finished_at", "finished", "finished at")

    @admin.display(description="callback")
    def callback_link(self, batch: Batch) -> SafeString:
        if batch.callback_job_id is None:
            return format_html('<span title="{}">not yet</span>', "enqueued once every job has finished")
        url = reverse(
            "admin:django_jobqueue_job_change", args=[batch.callback_job_id], current_app=self.admin_site.name
        )
        return format_html('<a href="{}" title="{}">job #{}</a>', url, batch.on_finish, batch.callback_job_id)

    @admin.display(description="live jobs")
    def outstanding(self, batch: Batch) -> str:
        # Read from the rows, as the batch's end is: a waiting job (depends_on) is live too.
        counts = rows_of(batch).jobs
        return f"{sum(counts.get(status, 0) for status in LIVE):,}"

    @admin.display(description="jobs")
    def jobs(self, batch: Batch) -> SafeString:
        """How many job rows the batch has, linked to the job list filtered by it, and per status."""
        rows = rows_of(batch)
        total = sum(rows.jobs.values())
        url = reverse("admin:django_jobqueue_job_changelist", current_app=self.admin_site.name)
        shown = (
            format_html('<a href="{}?batch={}">{}</a>', url, batch.pk, plural(total, "job"))
            if total
            else "0 jobs"
        )
        states = format_html_join(
            ", ",
            '<a href="{}?batch={}&amp;status={}">{} {}</a>',
            (
                (url, batch.pk, status, f"{rows.jobs[status]:,}", status)
                for status in STATES
                if rows.jobs.get(status)
            ),
        )
        if states:
            shown = format_html("{}: {}", shown, states)
        # Finished jobs are pruned after KEEP_COMPLETED, and a dead letter may be deleted.
        gone = batch.total - total - rows.dead_letters
        if gone > 0:
            verb = "is" if gone == 1 else "are"
            note = f"{gone:,} more {verb} no longer kept: pruned once finished, or deleted"
            shown = format_html('{} <span class="jq-quiet">({})</span>', shown, note)
        return format_html("{}", shown)

    @admin.display(description="dead letters")
    def dead_letters(self, batch: Batch) -> SafeString | str:
        """How many of the batch's jobs are in the dead letters, linked to that list filtered by it."""
        count = rows_of(batch).dead_letters
        if not count:
            return "0 dead letters"
        url = reverse("admin:django_jobqueue_deadletter_changelist", current_app=self.admin_site.name)
        return format_html('<a href="{}?batch={}">{}</a>', url, batch.pk, plural(count, "dead letter"))

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


def _finished_of_total(batch: Batch) -> tuple[int, int]:
    finished = batch.done + batch.failed + batch.cancelled
    return finished, max(batch.total, finished)


def progress_share(batch: Batch) -> int:
    """The share of the batch's jobs finished, in percent, floored."""
    finished, total = _finished_of_total(batch)
    return 100 if total == 0 else 100 * finished // total


def progress_bar(batch: Batch) -> SafeString:
    finished, total = _finished_of_total(batch)
    return format_html(
        '<progress class="jq-progress" max="{}" value="{}" title="{}%"></progress>',
        max(total, 1),
        finished if total else 1,
        progress_share(batch),
    )


def progress_words(batch: Batch) -> str:
    """``9,015 of 12,000 finished (75%), running``."""
    finished, total = _finished_of_total(batch)
    state = "finished" if batch.finished_at is not None else "running"
    return f"{finished:,} of {total:,} finished ({progress_share(batch)}%), {state}"
