"""The dead letters: find why a job failed for good, then retry it or delete it.

Retrying and deleting go through ``QueueClient`` in batches, so that a filtered
list of thousands is handled without loading it into memory, and a dead letter
retried twice (a double submit, two operators) still becomes one job.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import partial
from typing import Any

from django.contrib import admin, messages
from django.contrib.admin.options import IncorrectLookupParameters
from django.contrib.admin.utils import flatten_fieldsets
from django.core.exceptions import PermissionDenied
from django.db.models import Q, QuerySet
from django.http import HttpRequest, HttpResponse, HttpResponseRedirect
from django.template.response import TemplateResponse
from django.urls import reverse
from django.utils.html import format_html
from django.utils.safestring import SafeString

from ..models import DeadLetter
from ..queue import RetriedDeadLetter
from .audit import log_deleted, log_retried
from .base import SAMPLE_SIZE, capped_count, carried_selection, parse_id
from .display import EMPTY, cut_column, date_column, date_field, plural, preformatted
from .filters import BatchFilter, FailedFilter, NameFilter, QueueFilter
from .job_fields import JobFieldsAdmin


class DeadLetterAdmin(JobFieldsAdmin):
    list_display = (
        "id",
        "letter_name",
        "letter_queue",
        "original_job",
        "attempts_of_max",
        "error_summary",
        "failed",
    )
    list_display_links = ("id", "letter_name")
    list_filter = (BatchFilter, QueueFilter, NameFilter, FailedFilter)
    filter_params = frozenset({"queue", "name", "failed", "batch"})
    search_help_text = "A dead letter's id, the failed job's id or a job name, exactly."
    # Newest failure first: (failed_at), (queue, failed_at) or (name, failed_at) read backwards.
    ordering = ("-failed_at",)
    actions = ("retry", "delete_letters")
    fieldsets = (
        (
            None,
            {
                "fields": (
                    "id",
                    "name",
                    "queue",
                    "original_job",
                    "priority",
                    "attempts_of_max",
                    "key_for_concurrency",
                    "limit_for_concurrency",
                    "batch_link",
                )
            },
        ),
        (
            "Failure",
            {"fields": ("failed_when", "worker_id", "enqueued", "claim_timeout", "attempt_time_limit")},
        ),
        ("Payload", {"fields": ("payload_json",)}),
        ("Error", {"fields": ("error_text",)}),
        ("Traceback", {"fields": ("traceback_text",)}),
        ("Attempts", {"fields": ("attempt_timeline",)}),
    )
    readonly_fields = tuple(flatten_fieldsets(fieldsets))

    def search_filter(self, term: str, using: str) -> Q:
        found = Q(name=term)
        number = parse_id(term)
        return found | Q(pk=number) | Q(job_id=number) if number is not None else found

    def get_actions(self, request: HttpRequest, action_location: Any = None) -> dict[str, Any]:
        # Django 6.1 says where the actions are shown; Django 5.2 takes only the request.
        location = () if action_location is None else (action_location,)
        actions = super().get_actions(request, *location)
        # Django's own would load every object to list them, then delete with the ORM.
        actions.pop("delete_selected", None)
        return actions

    # -- columns and fields ----------------------------------------------------

    letter_name = cut_column("name")
    letter_queue = cut_column("queue")

    @admin.display(description="job")
    def original_job(self, letter: DeadLetter) -> str:
        return f"#{letter.job_id}"

    @admin.display(description="error")
    def error_summary(self, letter: DeadLetter) -> SafeString | str:
        first_line = (letter.error or "").strip().splitlines()[:1]
        if not first_line:
            return EMPTY
        # CSS cuts the line to the column; the tooltip holds the error's start.
        return format_html(
            '<span class="jq-cut" title="{}">{}</span>', letter.error[:500], first_line[0][:200]
        )

    failed = date_column("failed_at", "failed", "failed at")
    failed_when = date_field("failed_at", "failed at")
    enqueued = date_field("enqueued_at", "first enqueued at")

    @admin.display(description="error")
    def error_text(self, letter: DeadLetter) -> SafeString:
        return preformatted(letter.error)

    @admin.display(description="traceback")
    def traceback_text(self, letter: DeadLetter) -> SafeString:
        return preformatted(letter.traceback)

    def buttons(self, request: HttpRequest, obj: DeadLetter | None) -> dict[str, Any]:
        return {"can_retry": obj is not None and self.has_change_permission(request)}

    def changelist_view(self, request: HttpRequest, extra_context: dict[str, Any] | None = None) -> Any:
        extra_context = {**(extra_context or {}), "can_retry": self.has_change_permission(request)}
        return super().changelist_view(request, extra_context)

    # -- deleting: Django's views and confirmation, QueueClient's statement -------

    def delete_model(self, request: HttpRequest, obj: DeadLetter) -> None:
        # Django's delete view has already written its LogEntry.
        self.client(request).delete_dead_letters([obj.pk])

    def delete_queryset(self, request: HttpRequest, queryset: QuerySet[DeadLetter]) -> None:
        self.client(request).delete_dead_letters(queryset, on_batch=partial(log_deleted, request))

    # -- actions ---------------------------------------------------------------

    @admin.action(description="Retry selected dead letters", permissions=["change"])
    def retry(self, request: HttpRequest, queryset: QuerySet[DeadLetter]) -> None:
        self.retry_all(request, queryset)

    @admin.action(description="Delete selected dead letters", permissions=["delete"])
    def delete_letters(self, request: HttpRequest, queryset: QuerySet[DeadLetter]) -> HttpResponse | None:
        if request.POST.get("post") != "yes":
            return self.confirm(
                request,
                queryset,
                title="Delete dead letters",
                question="Delete {}? Their payloads and tracebacks are gone for good.",
                confirm_label="Yes, delete them",
                danger=True,
                hidden=carried_selection(request, "delete_letters"),
                form_action=request.get_full_path(),
            )
        deleted = self.client(request).delete_dead_letters(queryset, on_batch=partial(log_deleted, request))
        self.message_user(request, f"Deleted {plural(deleted, 'dead letter')}.", messages.SUCCESS)
        return None

    def retry_all(self, request: HttpRequest, queryset: QuerySet[DeadLetter]) -> int:
        retried = self.client(request).retry_dead_letters(queryset, on_batch=partial(log_retried, request))
        if retried:
            self.message_user(
                request,
                f"Retried {plural(retried, 'dead letter')}: back on their queues as ready jobs.",
                messages.SUCCESS,
            )
        else:
            self.message_user(request, "No dead letter was retried: none is left.", messages.WARNING)
        return retried

    def confirm(
        self, request: HttpRequest, queryset: QuerySet[DeadLetter], *, question: str, **context: Any
    ) -> TemplateResponse:
        count, more = capped_count(queryset)
        what = f"more than {plural(count, 'dead letter')}" if more else plural(count, "dead letter")
        return self.confirmation(
            request,
            "admin/django_jobqueue/deadletter/confirm.html",
            {
                "question": question.format(what),
                "count": count,
                "sample": list(queryset.order_by("-failed_at", "-pk")[:SAMPLE_SIZE]),
                "query_string": f"?{request.GET.urlencode()}" if request.GET else "",
                **context,
            },
        )

    # -- views: retry one, retry all matching ------------------------------------

    def own_views(self) -> list[tuple[str, Callable[..., HttpResponse], str]]:
        return [
            ("retry-matching/", self.retry_matching_view, "retry_matching"),
            ("<path:object_id>/retry/", self.retry_view, "retry"),
        ]

    def retry_view(self, request: HttpRequest, object_id: str) -> HttpResponse:
        return self.row_button(request, object_id, partial(self.retry_one, request))

    def retry_one(self, request: HttpRequest, letter_id: int) -> HttpResponse:
        retried: list[RetriedDeadLetter] = []

        def log(batch: list[RetriedDeadLetter]) -> None:
            log_retried(request, batch)
            retried.extend(batch)

        self.client(request).retry_dead_letters([letter_id], on_batch=log)
        if not retried:
            self.message_user(
                request,
                f"Dead letter #{letter_id} is gone: it was already retried or deleted.",
                messages.WARNING,
            )
            return HttpResponseRedirect(self.url("changelist"))
        job = retried[0]
        self.message_user(
            request,
            f"Dead letter #{letter_id} is back on queue “{job.queue}” as job #{job.job_id}.",
            messages.SUCCESS,
        )
        if request.user.has_perm("django_jobqueue.view_job") or request.user.has_perm(
            "django_jobqueue.change_job"
        ):
            job_url = reverse(
                "admin:django_jobqueue_job_change", args=[job.job_id], current_app=self.admin_site.name
            )
            return HttpResponseRedirect(job_url)
        return HttpResponseRedirect(self.url("changelist"))

    def retry_matching_view(self, request: HttpRequest) -> HttpResponse:
        """Retry every dead letter the list shows with these filters and this search."""
        if not self.has_change_permission(request):
            raise PermissionDenied
        cleaned = self.clean_query_string(request)
        if cleaned is not None:
            return cleaned
        back = self.url("changelist") + (f"?{request.GET.urlencode()}" if request.GET else "")
        try:
            changelist = self.get_changelist_instance(request)
        except IncorrectLookupParameters:
            self.message_user(request, "These filters cannot be applied.", messages.ERROR)
            return HttpResponseRedirect(self.url("changelist"))
        queryset = changelist.queryset
        if request.method == "POST" and request.POST.get("post") == "yes":
            self.retry_all(request, queryset)
            return HttpResponseRedirect(back)
        conditions = [
            f"{spec.title}: {choice['display']}"
            for spec in changelist.filter_specs
            for choice in spec.choices(changelist)
            if choice["selected"] and choice["display"] != "All"
        ]
        if changelist.query:
            conditions.append(f"search: “{changelist.query}”")
        return self.confirm(
            request,
            queryset,
            title="Retry all matching dead letters",
            question="Retry {}? Each goes back on its queue as a ready job with its attempts reset.",
            confirm_label="Yes, retry them",
            danger=False,
            conditions=conditions or ["no filter: every dead letter"],
            hidden=[],
            form_action=request.get_full_path(),
        )
