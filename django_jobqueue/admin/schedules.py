"""The periodic jobs: when each fires next and fired last; pause, resume, run now.

The code declares the schedules (``JOBQUEUE["SCHEDULES"]``, ``@job(cron=...)``)
and the rows are the fleet's memory of them. Opening the list gives each
declared schedule without a row its row (``ScheduleBook.add_missing``), so the
page lists every schedule before any worker ran; it never changes or deletes a
row a worker wrote. Every change goes through ``ScheduleBook``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from django.contrib import admin, messages
from django.contrib.admin.utils import flatten_fieldsets
from django.contrib.admin.views.main import ChangeList
from django.db import transaction
from django.db.models import Q, QuerySet
from django.http import HttpRequest, HttpResponse, HttpResponseRedirect
from django.urls import reverse
from django.utils.html import format_html, format_html_join
from django.utils.safestring import SafeString

from ..models import Job, Schedule
from ..queue.schedules import ScheduleBook
from .audit import log_schedule_changes
from .base import OperatorAdmin, OperatorChangeList, parse_id
from .display import (
    EMPTY,
    concurrency_limit,
    cut,
    cut_column,
    date_field,
    in_list,
    pretty_json,
    pretty_payload,
    timestamp,
    with_relative,
)
from .overview import may_see_jobs
from .run_now import TOKEN_FIELD, ScheduleActionForm, new_token, posted_token, run_once
from .schedule_rows import Declarations, annotate, state_of, state_pills

PAUSED = "Paused."
RESUMED = "Resumed: fires again from its next fire time; those that came while it was paused are skipped."


class ScheduleChangeList(OperatorChangeList):
    """The list, each row of the page given its state with one query for the last jobs."""

    def get_results(self, request: HttpRequest) -> None:
        super().get_results(request)
        rows = list(self.result_list)  # fills the queryset's cache, which the template reads
        using = self.queryset.db  # the queue's database (OperatorAdmin.get_queryset)
        annotate(rows, Declarations.read(), ScheduleBook(using).now(), link_jobs=may_see_jobs(request))


class ScheduleAdmin(OperatorAdmin):
    # The list's times read by how far away they are (the dates in their tooltips): a list is read across.
    list_display = (
        "schedule_name",
        "schedule_job",
        "when_cut",
        "catch_up",
        "next_fire_in",
        "last_fire_ago",
        "state",
    )
    list_display_links = ("schedule_name",)
    sortable_by = ()
    ordering = ("name",)
    search_fields = ("name",)
    search_help_text = "A schedule's name or a job name, exactly."
    actions = ("pause", "resume", "run_now")
    action_form = ScheduleActionForm
    fieldsets = (
        (None, {"fields": ("name", "job", "when", "catch_up", "job_queue", "job_priority", "declaration")}),
        ("State", {"fields": ("state", "next_fire", "last_fire", "handled_through_at", "updated")}),
        ("Payload", {"fields": ("payload_json",)}),
    )
    # Shown only for a schedule that declares a concurrency key (get_fieldsets).
    concurrency_fields = ("key_for_concurrency", "limit_for_concurrency")
    readonly_fields = (*flatten_fieldsets(fieldsets), *concurrency_fields, "stored_json")

    class Media:
        css = {"all": ["django_jobqueue/admin.css"]}

    def book(self, request: HttpRequest) -> ScheduleBook:
        return ScheduleBook(self.client(request).using)

    def has_delete_permission(self, request: HttpRequest, obj: Schedule | None = None) -> bool:
        # A row goes when its schedule is no longer declared (the workers' sync).
        return False

    def search_filter(self, term: str, using: str) -> Q:
        return Q(name=term) | Q(job=term)

    def get_changelist(self, request: HttpRequest, **kwargs: Any) -> type[ChangeList]:
        return ScheduleChangeList

    def changelist_view(self, request: HttpRequest, extra_context: dict[str, Any] | None = None) -> Any:
        if request.method == "GET":  # an action's POST acts on rows there are, then redirects here
            declarations = Declarations.read()
            if declarations.problem is not None:
                message = f"The schedules cannot be read: {declarations.problem}"
                self.message_user(request, message, messages.ERROR)
            declarations.add_missing(self.book(request))
        return super().changelist_view(request, extra_context)

    def get_object(self, request: HttpRequest, object_id: str, from_field: str | None = None) -> Any:
        # A malformed id is "no such schedule", not a database error.
        if parse_id(object_id) is None:
            return None
        row = super().get_object(request, object_id, from_field)
        if row is not None:
            annotate([row], Declarations.read(), self.book(request).now(), link_jobs=may_see_jobs(request))
        return row

    def get_fieldsets(self, request: HttpRequest, obj: Schedule | None = None) -> Any:
        if obj is None:
            return self.fieldsets
        fieldsets = self._with_concurrency(obj)
        if state_of(obj).current or state_of(obj).stored is None:
            return fieldsets
        # During a deploy: what the row holds, beside this process's declaration.
        return (*fieldsets, ("The row's declaration", {"fields": ("stored_json",)}))

    def _with_concurrency(self, row: Schedule) -> Any:
        """The fieldsets, with the concurrency key and limit after the priority if the schedule has a key."""
        shown = state_of(row).shown
        if shown is None or shown.concurrency_key is None:
            return self.fieldsets
        (title, options), *rest = self.fieldsets
        fields = options["fields"]
        at = fields.index("job_priority") + 1
        first = (title, {**options, "fields": (*fields[:at], *self.concurrency_fields, *fields[at:])})
        return (first, *rest)

    # -- columns and fields ----------------------------------------------------

    schedule_name = cut_column("name")
    schedule_job = cut_column("job")

    @admin.display(description="when")
    def when(self, row: Schedule) -> str:
        shown = state_of(row).shown
        return shown.when if shown is not None else EMPTY

    @admin.display(description="catch up")
    def catch_up(self, row: Schedule) -> str:
        shown = state_of(row).shown
        return shown.catch_up if shown is not None else EMPTY

    @admin.display(description="queue")
    def job_queue(self, row: Schedule) -> str:
        shown = state_of(row).shown
        return (shown.queue or "the job's own") if shown is not None else EMPTY

    @admin.display(description="priority")
    def job_priority(self, row: Schedule) -> str:
        shown = state_of(row).shown
        if shown is None:
            return EMPTY
        return str(shown.priority) if shown.priority is not None else "the job's own"

    @admin.display(description="concurrency key")
    def key_for_concurrency(self, row: Schedule) -> str:
        shown = state_of(row).shown
        return (shown.concurrency_key or EMPTY) if shown is not None else EMPTY

    @admin.display(description="concurrency limit")
    def limit_for_concurrency(self, row: Schedule) -> str:
        shown = state_of(row).shown
        if shown is None or shown.concurrency_key is None:
            return EMPTY
        if shown.concurrency_limit is None:
            return "the job's own"
        return concurrency_limit(shown.concurrency_limit)

    @admin.display(description="declaration")
    def declaration(self, row: Schedule) -> str:
        state = state_of(row)
        if state.declared is None:
            return "Not declared by this process: shown as the row holds it; it cannot be run now from here."
        if not state.current:
            return "The row holds another declaration (below): workers that run other code synced it."
        return "As this process declares it, and as the row holds it."

    @admin.display(description="when")
    def when_cut(self, row: Schedule) -> SafeString | str:
        shown = state_of(row).shown
        return cut(shown.when) if shown is not None else EMPTY

    @admin.display(description="next fire")
    def next_fire(self, row: Schedule) -> SafeString | str:
        if row.paused:
            return "paused"
        return with_relative(state_of(row).next_fire_at)

    @admin.display(description="next fire")
    def next_fire_in(self, row: Schedule) -> SafeString | str:
        if row.paused:
            return "paused"
        return in_list(state_of(row).next_fire_at, "fires at")

    @admin.display(description="last fire")
    def last_fire(self, row: Schedule) -> SafeString | str:
        return self.with_last_job(row, with_relative(row.last_fire_at))

    @admin.display(description="last fire")
    def last_fire_ago(self, row: Schedule) -> SafeString | str:
        return self.with_last_job(row, in_list(row.last_fire_at, "fired at"))

    def with_last_job(self, row: Schedule, shown: SafeString | str) -> SafeString | str:
        """``shown`` (the last fire's time) and the job it enqueued, a link for those who may see jobs."""
        if row.last_job_id is None:
            return shown
        link, state = f"job #{row.last_job_id}", state_of(row)
        if not state.last_job_exists:
            gone = '{} · <span class="jq-quiet" title="no longer kept (pruned)">{}</span>'
            return format_html(gone, shown, link)
        if not state.link_jobs:
            return format_html("{} · {}", shown, link)
        url = reverse(
            "admin:django_jobqueue_job_change", args=[row.last_job_id], current_app=self.admin_site.name
        )
        return format_html('{} · <a href="{}">{}</a>', shown, url, link)

    @admin.display(description="state")
    def state(self, row: Schedule) -> SafeString:
        return state_pills(row)

    handled_through_at = date_field("handled_through", "handled through")

    @admin.display(description="row updated at")
    def updated(self, row: Schedule) -> str:
        return timestamp(row.updated_at)

    @admin.display(description="payload")
    def payload_json(self, row: Schedule) -> SafeString:
        shown = state_of(row).shown
        return pretty_payload(shown.payload if shown is not None else row.definition.get("payload", {}))

    @admin.display(description="declaration")
    def stored_json(self, row: Schedule) -> SafeString:
        definition = dict(row.definition)
        payload = pretty_payload(definition.pop("payload", {}))
        return format_html("{}<p>payload:</p>{}", pretty_json(definition), payload)

    def buttons(self, request: HttpRequest, obj: Schedule | None) -> dict[str, Any]:
        may_change = obj is not None and self.has_change_permission(request)
        return {
            "can_act": may_change,
            "can_run_now": may_change and obj is not None and state_of(obj).declared is not None,
            "once_field": TOKEN_FIELD,
            "once": new_token(),
        }

    # -- actions ---------------------------------------------------------------

    @admin.action(description="Pause selected schedules", permissions=["change"])
    def pause(self, request: HttpRequest, queryset: QuerySet[Schedule]) -> None:
        self.set_paused(request, list(queryset), paused=True)

    @admin.action(description="Resume selected schedules", permissions=["change"])
    def resume(self, request: HttpRequest, queryset: QuerySet[Schedule]) -> None:
        self.set_paused(request, list(queryset), paused=False)

    @admin.action(description="Run selected schedules now (one job each)", permissions=["change"])
    def run_now(self, request: HttpRequest, queryset: QuerySet[Schedule]) -> None:
        self.run_rows(request, list(queryset))

    def set_paused(self, request: HttpRequest, rows: list[Schedule], *, paused: bool) -> None:
        book, by_name = self.book(request), {row.name: row for row in rows}
        with transaction.atomic(using=book.using):
            changed = (book.pause if paused else book.resume)(by_name)
            log_schedule_changes(request, [by_name[name] for name in changed], PAUSED if paused else RESUMED)
        if changed and paused:
            self.message_user(
                request, f"Paused {quoted(changed)}: no job is fired until resumed.", messages.SUCCESS
            )
        elif changed:
            self.message_user(
                request,
                f"Resumed {quoted(changed)}: fired again from the next fire time on; "
                "the fire times that came while paused are skipped.",
                messages.SUCCESS,
            )
        left = [name for name in by_name if name not in changed]
        if left:
            state = "paused" if paused else "running"
            self.message_user(request, f"{quoted(left)} {are(left)} already {state}.", messages.WARNING)

    def run_rows(self, request: HttpRequest, rows: list[Schedule]) -> list[Job]:
        """Enqueue one job for each row's schedule, once per form; return the jobs."""
        token = posted_token(request)
        if token is None:
            self.message_user(
                request, "The form had no one-time token: reload the page; nothing was run.", messages.ERROR
            )
            return []
        declarations, book = Declarations.read(), self.book(request)
        ran: list[tuple[str, Job]] = []
        undeclared, repeated = [], []
        for row in rows:
            schedule = declarations.by_name.get(row.name)
            if schedule is None:
                undeclared.append(row.name)
                continue
            job = run_once(request, book, row, schedule, token)
            if job is None:
                repeated.append(row.name)
            else:
                ran.append((row.name, job))
        if ran:
            links = format_html_join(
                ", ", "“{}” as {}", ((name, self.job_link(request, job)) for name, job in ran)
            )
            self.message_user(request, format_html("Ran now: {}.", links), messages.SUCCESS)
        if repeated:
            self.message_user(
                request,
                f"{quoted(repeated)} already ran from this form: nothing more was run. "
                "Reload the page to run again.",
                messages.WARNING,
            )
        if undeclared:
            why = declarations.problem or "this process declares no schedule by that name"
            self.message_user(request, f"{quoted(undeclared)} cannot be run now: {why}.", messages.ERROR)
        return [job for _, job in ran]

    def job_link(self, request: HttpRequest, job: Job) -> SafeString:
        text = format_html("job #{}", job.pk)
        if not may_see_jobs(request):
            return text
        url = reverse("admin:django_jobqueue_job_change", args=[job.pk], current_app=self.admin_site.name)
        return format_html('<a href="{}">{}</a>', url, text)

    # -- the buttons on a schedule's page ------------------------------------------

    def own_views(self) -> list[tuple[str, Callable[..., HttpResponse], str]]:
        return [
            ("<path:object_id>/pause/", self.pause_view, "pause"),
            ("<path:object_id>/resume/", self.resume_view, "resume"),
            ("<path:object_id>/run-now/", self.run_now_view, "run_now"),
        ]

    def pause_view(self, request: HttpRequest, object_id: str) -> HttpResponse:
        return self.one_row(request, object_id, lambda row: self.set_paused(request, [row], paused=True))

    def resume_view(self, request: HttpRequest, object_id: str) -> HttpResponse:
        return self.one_row(request, object_id, lambda row: self.set_paused(request, [row], paused=False))

    def run_now_view(self, request: HttpRequest, object_id: str) -> HttpResponse:
        ran: list[Job] = []
        response = self.one_row(request, object_id, lambda row: ran.extend(self.run_rows(request, [row])))
        if ran and may_see_jobs(request):
            job_url = reverse(
                "admin:django_jobqueue_job_change", args=[ran[0].pk], current_app=self.admin_site.name
            )
            return HttpResponseRedirect(job_url)
        return response

    def one_row(
        self, request: HttpRequest, object_id: str, act: Callable[[Schedule], object]
    ) -> HttpResponse:
        """Act on one row, then go back to its page (a POST answered with a redirect)."""

        def on_row(row_id: int) -> HttpResponse | None:
            row = self.get_queryset(request).filter(pk=row_id).first()
            if row is None:
                return None
            act(row)
            return HttpResponseRedirect(self.url("change", row.pk))

        return self.row_button(request, object_id, on_row)


def quoted(names: list[str]) -> str:
    return ", ".join(f"“{name}”" for name in names)


def are(names: list[str]) -> str:
    return "is" if len(names) == 1 else "are"
