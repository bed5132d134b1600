"""The job list and a job's page: find a job, see why it is stuck, retry it now or cancel it."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from django.contrib import admin, messages
from django.contrib.admin.utils import flatten_fieldsets, unquote
from django.contrib.admin.views.main import SEARCH_VAR
from django.core.exceptions import PermissionDenied
from django.core.paginator import Paginator
from django.db import connections
from django.db.backends.base.base import BaseDatabaseWrapper
from django.db.models import BooleanField, Expression, F, Q, QuerySet, Subquery
from django.db.models.sql.compiler import SQLCompiler
from django.http import HttpRequest, HttpResponse, HttpResponseNotAllowed, HttpResponseRedirect
from django.template.response import TemplateResponse
from django.utils.html import format_html
from django.utils.safestring import SafeString

from ..indexed import keyed_status
from ..models import LIVE_STATUSES, Job, JobStatus
from ..queue import JobChange, engine_for
from . import dependencies
from .audit import log_job_changes
from .base import SAMPLE_SIZE, MatchedIdsPaginator, capped_count, carried_selection, id_batches, parse_id
from .display import (
    EMPTY,
    cut_column,
    date_field,
    plural,
    preformatted,
    pretty_json,
    progress_in_list,
    with_relative,
)
from .filters import BatchFilter, NameFilter, QueueFilter, StatusFilter
from .job_fields import JobFieldsAdmin
from .job_status import EARLIER_ERROR, earlier_error_note, status_hint, status_pill, time_in_status

RETRYABLE = (JobStatus.READY, JobStatus.CANCELLED)
CANCELLABLE = (*LIVE_STATUSES, JobStatus.WAITING)


class InRowsOf(Expression):
    """``column`` among the rows of a subquery, as the engine writes it (``Engine.in_rows``).

    On PostgreSQL the subquery runs once, before the scan, and its ids are
    looked up in an index, also as one arm of an OR beside another indexed
    term: the finished jobs' partition keeps a bitmap OR of its indexes. As
    ``IN (subquery)`` it is a subplan run per row, which no index can serve,
    and such an OR falls back to reading the whole partition.
    """

    output_field = BooleanField()
    conditional = True

    def __init__(self, column: F, rows: Subquery) -> None:
        super().__init__()
        # Any: once resolved, the column is Django's Col and the rows a resolved Subquery.
        self.column: Any = column
        self.rows: Any = rows

    def get_source_expressions(self) -> list[Any]:
        return [self.column, self.rows]

    def set_source_expressions(self, exprs: Sequence[Any]) -> None:
        self.column, self.rows = exprs

    def as_sql(self, compiler: SQLCompiler, connection: BaseDatabaseWrapper) -> tuple[str, tuple[Any, ...]]:
        column_sql, column_params = compiler.compile(self.column)
        rows_sql, rows_params = compiler.compile(self.rows)  # a Subquery compiles in parentheses
        return engine_for(connection).in_rows(column_sql, rows_sql), (*column_params, *rows_params)


class JobAdmin(JobFieldsAdmin):
    list_display = (
        "id",
        "job_name",
        "job_queue",
        "job_status",
        "job_priority",
        "attempts_of_max",
        "progress_of_running",
        "when",
    )
    list_display_links = ("id", "job_name")
    list_filter = (BatchFilter, StatusFilter, QueueFilter, NameFilter)
    filter_params = frozenset({"status", "queue", "name", "batch"})
    search_help_text = (
        "A job id, a job name, a unique key or a ready or running job's concurrency key, exactly."
    )
    # Newest first: the primary key read backwards, or (queue, id) / (name, id) when filtered.
    ordering = ("-id",)
    actions = ("retry_now", "cancel")
    fieldsets = (
        (
            None,
            {
                "fields": (
                    "id",
                    "name",
                    "queue",
                    "status_detail",
                    "priority",
                    "attempts_of_max",
                    "unique_key",
                    "key_for_concurrency",
                    "limit_for_concurrency",
                    "batch_link",
                )
            },
        ),
        (
            "Claim",
            {"fields": ("locked_by", "claim_deadline", "claim_token", "claim_timeout", "attempt_time_limit")},
        ),
        ("Times", {"fields": ("enqueued", "runs_at", "finished")}),
        ("Dependencies", {"fields": ("waits_on", "waited_on_by")}),
        ("Payload", {"fields": ("payload_json",)}),
        ("Last error", {"fields": ("last_error_text", "last_traceback_text")}),
        ("Attempts", {"fields": ("attempt_timeline",)}),
        ("Result", {"fields": ("result_json",)}),
    )
    readonly_fields = tuple(flatten_fieldsets(fieldsets))

    def has_delete_permission(self, request: HttpRequest, obj: Job | None = None) -> bool:
        # A job is cancelled, then pruned; it is never deleted by hand.
        return False

    def get_paginator(
        self, request: HttpRequest, queryset: QuerySet[Job], *args: Any, **kwargs: Any
    ) -> Paginator:
        # A search reads the live partition by a scan (no index on name there): once, not twice.
        if request.GET.get(SEARCH_VAR, "").strip():
            return MatchedIdsPaginator(queryset, *args, **kwargs)
        return super().get_paginator(request, queryset, *args, **kwargs)

    def search_filter(self, term: str, using: str) -> Q:
        # A concurrency key is looked up in the claim's partial indexes on it,
        # which hold ready and running jobs only: a key match over every status
        # has no index, and in an OR it would turn each search into a scan.
        # The live partition has no index on name and is read by a scan; the
        # keys are found apart, by their indexes, so that the scan compares a
        # row's name and id only, not every column up to the last key's.
        if engine_for(connections[using]).reads_in_subquery_under_or:
            by_key = Q(concurrency_key=term, status=JobStatus.READY) | Q(
                concurrency_key=term, status=JobStatus.RUNNING
            )
            by_keys = Job.objects.using(using).filter(Q(unique_key=term) | by_key).values("pk")
            found = Q(name=term) | Q(InRowsOf(F("pk"), Subquery(by_keys)))
        else:
            found = Q(name=term) | Q(pk__in=_newest_ids_by_keys(term, using))
        job_id = parse_id(term)
        return found | Q(pk=job_id) if job_id is not None else found

    # -- list columns --------------------------------------------------------

    job_name = cut_column("name")
    job_queue = cut_column("queue")

    @admin.display(description="status")
    def job_status(self, job: Job) -> SafeString:
        return status_pill(job)

    @admin.display(description="priority")
    def job_priority(self, job: Job) -> int:
        return job.priority

    @admin.display(description="progress")
    def progress_of_running(self, job: Job) -> SafeString | str:
        # The row is loaded whole already: no query per row. Only a running job's progress is news.
        return progress_in_list(job.progress) if job.status == JobStatus.RUNNING else EMPTY

    @admin.display(description="when")
    def when(self, job: Job) -> SafeString:
        return time_in_status(job)

    # -- detail fields ---------------------------------------------------------

    @admin.display(description="status")
    def status_detail(self, job: Job) -> SafeString:
        return format_html("{} {}", status_pill(job), status_hint(job))

    @admin.display(description="claim deadline")
    def claim_deadline(self, job: Job) -> SafeString | str:
        return with_relative(job.locked_until) if job.status == JobStatus.RUNNING else EMPTY

    enqueued = date_field("created_at", "enqueued at")
    runs_at = date_field("run_at", "run at")
    finished = date_field("finished_at", "finished at")

    @admin.display(description="waits on")
    def waits_on(self, job: Job) -> SafeString | str:
        return dependencies.waits_on(job, self.admin_site.name)

    @admin.display(description="waited on by")
    def waited_on_by(self, job: Job) -> SafeString | str:
        return dependencies.waited_on_by(job, self.admin_site.name)

    @admin.display(description="error")
    def last_error_text(self, job: Job) -> SafeString:
        note = earlier_error_note(job)
        if not note:
            return preformatted(job.last_error)
        return format_html('<p class="jq-note">{}</p>{}', note, preformatted(job.last_error))

    @admin.display(description="traceback")
    def last_traceback_text(self, job: Job) -> SafeString:
        return preformatted(job.last_traceback)

    @admin.display(description="result")
    def result_json(self, job: Job) -> SafeString:
        return pretty_json(job.result) if job.result is not None else preformatted("")

    def get_fieldsets(self, request: HttpRequest, obj: Job | None = None) -> Any:
        if obj is None or not earlier_error_note(obj):
            return self.fieldsets
        # The job got past that error: say so where an operator looks first.
        return tuple(
            (EARLIER_ERROR if title == "Last error" else title, options) for title, options in self.fieldsets
        )

    def buttons(self, request: HttpRequest, obj: Job | None) -> dict[str, Any]:
        may_change = self.has_change_permission(request)
        return {
            "can_retry_now": may_change and obj is not None and obj.status in RETRYABLE,
            "can_cancel": may_change and obj is not None and obj.status in CANCELLABLE,
        }

    # -- actions ---------------------------------------------------------------

    @admin.action(description="Retry selected jobs now", permissions=["change"])
    def retry_now(self, request: HttpRequest, queryset: QuerySet[Job]) -> None:
        changed, chosen = self.run_in_batches(
            request, queryset, self.client(request).retry_jobs_now, JobStatus.READY, "Retried now."
        )
        self.report(
            request,
            changed,
            chosen,
            "Retried {} now.",
            "only ready and cancelled jobs can be retried, and not a cancelled one "
            "whose unique key a live job holds",
        )

    @admin.action(description="Cancel selected jobs", permissions=["change"])
    def cancel(self, request: HttpRequest, queryset: QuerySet[Job]) -> HttpResponse | None:
        if request.POST.get("post") != "yes":
            running = queryset.filter(status=JobStatus.RUNNING)
            if running.exists():
                return self.confirm_cancel(request, running, queryset, form_action=request.get_full_path())
        changed, chosen = self.run_in_batches(
            request, queryset, self.client(request).cancel_jobs, JobStatus.CANCELLED, "Cancelled."
        )
        self.report(request, changed, chosen, "Cancelled {}.", "they had already finished")
        return None

    def confirm_cancel(
        self,
        request: HttpRequest,
        running: QuerySet[Job],
        chosen: QuerySet[Job] | None,
        *,
        form_action: str,
    ) -> TemplateResponse:
        """Say what cancelling does to running jobs, before it is done (a running handler is not stopped)."""
        running_count, more_than = capped_count(running)
        return self.confirmation(
            request,
            "admin/django_jobqueue/job/cancel_confirmation.html",
            {
                "title": "Cancel running jobs" if chosen is not None else "Cancel a running job",
                "running_count": running_count,
                "more_than": more_than,
                "sample": list(running.order_by("-pk")[:SAMPLE_SIZE]),
                "hidden": carried_selection(request, "cancel" if chosen is not None else None),
                "over_selection": chosen is not None,
                "form_action": form_action,
                "back": request.get_full_path() if chosen is not None else self.url("change", running[0].pk),
            },
        )

    def run_in_batches(
        self,
        request: HttpRequest,
        queryset: QuerySet[Job],
        change: Callable[[Sequence[int]], list[JobChange]],
        status: str,
        message: str,
    ) -> tuple[int, int]:
        """Apply ``change`` to the jobs of ``queryset`` a batch at a time; return (changed, chosen)."""
        changed = chosen = 0
        for ids in id_batches(queryset):
            chosen += len(ids)
            changes = change(ids)
            log_job_changes(request, changes, status, message)
            changed += len(changes)
        return changed, chosen

    def report(self, request: HttpRequest, changed: int, chosen: int, done: str, why_not: str) -> None:
        if changed:
            self.message_user(request, done.format(plural(changed, "job")), messages.SUCCESS)
        if chosen > changed:
            left = chosen - changed
            self.message_user(
                request,
                f"{plural(left, 'job')} left as {'it was' if left == 1 else 'they were'}: {why_not}.",
                messages.WARNING,
            )

    # -- the buttons on a job's page --------------------------------------------

    def own_views(self) -> list[tuple[str, Callable[..., HttpResponse], str]]:
        return [
            ("<path:object_id>/retry-now/", self.retry_now_view, "retry_now"),
            ("<path:object_id>/cancel/", self.cancel_view, "cancel"),
        ]

    def retry_now_view(self, request: HttpRequest, object_id: str) -> HttpResponse:
        return self.one_job(
            request, object_id, self.client(request).retry_jobs_now, JobStatus.READY, "Retried now."
        )

    def cancel_view(self, request: HttpRequest, object_id: str) -> HttpResponse:
        """Cancel a ready job at once; ask first about a running one (GET asks too)."""
        if request.method == "GET" or request.POST.get("post") != "yes":
            asked = self.ask_before_cancelling(request, object_id)
            if asked is not None:
                return asked
        return self.one_job(
            request, object_id, self.client(request).cancel_jobs, JobStatus.CANCELLED, "Cancelled."
        )

    def ask_before_cancelling(self, request: HttpRequest, object_id: str) -> HttpResponse | None:
        """The confirmation page for a running job, or None where cancelling needs no question."""
        if request.method not in ("GET", "POST"):
            return HttpResponseNotAllowed(["GET", "POST"])
        if not self.has_change_permission(request):
            raise PermissionDenied
        job_id = parse_id(unquote(object_id))
        running = self.get_queryset(request).filter(pk=job_id, status=JobStatus.RUNNING)
        if job_id is not None and running.exists():
            return self.confirm_cancel(request, running, None, form_action=request.path)
        if request.method == "POST":
            # Nothing runs yet: a ready job is cancelled at once (and Retry now undoes it).
            return None
        if job_id is None:
            return self.does_not_exist(request, object_id)
        return HttpResponseRedirect(self.url("change", job_id))

    def one_job(
        self,
        request: HttpRequest,
        object_id: str,
        change: Callable[[Sequence[int]], list[JobChange]],
        status: str,
        message: str,
    ) -> HttpResponse:
        def act(job_id: int) -> HttpResponse | None:
            changes = change([job_id])
            if changes:
                log_job_changes(request, changes, status, message)
                self.message_user(request, f"Job #{job_id}: {message}", messages.SUCCESS)
            else:
                job = Job.objects.using(self.client(request).using).filter(pk=job_id).first()
                if job is None:
                    return None
                self.message_user(
                    request, f"Job #{job_id} is {job.status}: it was left as it was.", messages.WARNING
                )
            return HttpResponseRedirect(self.url("change", job_id))

        return self.row_button(request, object_id, act)


def _newest_ids_by_keys(term: str, using: str) -> list[int]:
    """The ids of the newest 10,000 jobs at most (as the count caps) whose unique key or live
    concurrency key is ``term``, read where an OR with a subquery would scan the table (MySQL).

    One read an index: ORed, the optimizer may weigh their merge, sorted, against
    the primary key read backwards to the limit, which reads the whole table.
    """
    jobs = Job.objects.using(using)
    parts = [
        jobs.filter(unique_key=term),
        keyed_status(jobs.filter(concurrency_key=term), exact=JobStatus.READY),
        keyed_status(jobs.filter(concurrency_key=term), exact=JobStatus.RUNNING),
    ]
    ids: set[int] = set()
    for part in parts:
        ids.update(part.order_by("-pk").values_list("pk", flat=True)[:10_001])
    return sorted(ids, reverse=True)[:10_001]
