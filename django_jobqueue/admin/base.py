"""What the queue's admin pages share: read-only detail pages, cheap lists, tolerant URLs."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any, ClassVar

from django.contrib import admin, messages
from django.contrib.admin.helpers import ACTION_CHECKBOX_NAME
from django.contrib.admin.utils import unquote
from django.contrib.admin.views.main import ERROR_FLAG, ORDER_VAR, PAGE_VAR, SEARCH_VAR, ChangeList
from django.core.exceptions import PermissionDenied
from django.core.paginator import EmptyPage, Page, Paginator
from django.db.models import Model, Q, QuerySet
from django.http import HttpRequest, HttpResponse, HttpResponseNotAllowed, HttpResponseRedirect
from django.template.response import TemplateResponse
from django.urls import URLPattern, path, reverse
from django.utils.functional import cached_property
from django.utils.html import format_html
from django.utils.http import urlencode
from django.utils.safestring import SafeString
from django.utils.text import capfirst
from django.utils.translation import gettext as _

from ..queue import QueueClient
from .databases import database_context, shown_database
from .display import EMPTY

MAX_ID = 2**63 - 1
# Rows per statement when an action runs over a whole filtered list.
ACTION_BATCH = 500
# Query-string keys every list understands, besides its filters' own.
COMMON_PARAMS = frozenset({PAGE_VAR, SEARCH_VAR, ORDER_VAR, ERROR_FLAG, "_popup"})
# A confirmation counts this far, then says "more than"; it lists a few.
CONFIRM_COUNT_CAP = 1_000_000
SAMPLE_SIZE = 10


def parse_id(value: object) -> int | None:
    """Return ``value`` as a row id, or None if it is not one (so that it never reaches SQL)."""
    text = str(value).strip().removeprefix("#")
    if not text.isascii() or not text.isdigit() or len(text) > 19:
        return None
    number = int(text)
    return number if 0 < number <= MAX_ID else None


class CappedPaginator(Paginator):
    """Counts at most ``cap`` rows and pages through those.

    ``COUNT(*)`` over a million jobs is the slow part of an admin list; nobody
    reads page 200 of one either. A list longer than the cap says "more than
    10,000" and invites a filter.
    """

    cap = 10_000
    capped = False

    @cached_property
    def count(self) -> int:
        objects = self.object_list
        if isinstance(objects, QuerySet):
            # No ORDER BY: any cap + 1 matching rows will do, found the cheapest way.
            counted = objects.order_by()[: self.cap + 1].count()
        else:
            counted = len(objects)
        self.capped = counted > self.cap
        return min(counted, self.cap)

    def validate_number(self, number: Any) -> int:
        """Clamp a page number out of range to the first or last page, instead of failing."""
        try:
            return super().validate_number(number)
        except EmptyPage:
            return 1 if int(number) < 1 else self.num_pages


class MatchedIdsPaginator(CappedPaginator):
    """For a search: the matching ids read once, in the list's order and up to the cap; pages by id.

    Counting the matches and then reading a page runs the search twice, and a
    search of the job list scans the live partition each time (it has no index
    on ``name``, on purpose: docs/performance.md). One query for the ids gives
    the count and every page; a page is then its ids looked up by primary key.
    """

    def __init__(self, object_list: QuerySet[Any], *args: Any, **kwargs: Any) -> None:
        super().__init__(object_list, *args, **kwargs)
        self.queryset = object_list

    @cached_property
    def ids(self) -> list[Any]:
        return list(self.queryset.values_list("pk", flat=True)[: self.cap + 1])

    @cached_property
    def count(self) -> int:
        self.capped = len(self.ids) > self.cap
        return min(len(self.ids), self.cap)

    def page(self, number: Any) -> Page:
        # Django's page and its bounds, its rows taken by their ids instead of the search again.
        page = super().page(number)
        first = max(page.start_index() - 1, 0)
        page.object_list = self.rows(self.ids[first : page.end_index()])
        return page

    def rows(self, ids: list[Any]) -> QuerySet[Any]:
        """The rows of ``ids``, in the list's order; the search's own conditions still apply."""
        return self.queryset.filter(pk__in=ids)


def id_batches(queryset: QuerySet[Any], size: int | None = None) -> Iterator[list[int]]:
    """Yield the ids of ``queryset`` in ascending batches, holding one batch at a time."""
    ids = queryset.order_by("pk").values_list("pk", flat=True)
    size = size or ACTION_BATCH
    last = 0
    while batch := list(ids.filter(pk__gt=last)[:size]):
        yield batch
        last = batch[-1]


def capped_count(queryset: QuerySet[Any]) -> tuple[int, bool]:
    """How many rows ``queryset`` holds, up to ``CONFIRM_COUNT_CAP``, and whether it holds more."""
    counted = queryset.order_by()[: CONFIRM_COUNT_CAP + 1].count()
    return min(counted, CONFIRM_COUNT_CAP), counted > CONFIRM_COUNT_CAP


def carried_selection(request: HttpRequest, action: str | None = None) -> list[tuple[str, str]]:
    """The hidden fields that post a list's selection again from a confirmation, and its ``action``."""
    fields = [(ACTION_CHECKBOX_NAME, pk) for pk in request.POST.getlist(ACTION_CHECKBOX_NAME)]
    if action is not None:
        fields += [("action", action), ("select_across", request.POST.get("select_across", "0"))]
    return fields


class OperatorChangeList(ChangeList):
    """Django's list, with each row's link made from one ``reverse()`` per page instead of one per link,
    and a search's rows read by the ids its ``MatchedIdsPaginator`` found rather than by the search again.
    """

    _change_url: tuple[str, str] | None = None

    def get_results(self, request: HttpRequest) -> None:
        super().get_results(request)
        # Django lists a result of one page (or "show all") by running the whole search again;
        # its ids are known already.
        whole = not self.multi_page or (self.show_all and self.can_show_all)
        if whole and isinstance(self.paginator, MatchedIdsPaginator):
            self.result_list = self.paginator.rows(self.paginator.ids[: self.paginator.count])

    def url_for_result(self, result: Model) -> str:
        pk = getattr(result, self.pk_attname)
        if not isinstance(pk, int):
            return str(super().url_for_result(result))
        if self._change_url is None:
            # The URL of a row whose id is a marker, cut around it: any integer id goes in between
            # as it is (digits need no quoting), which is what reverse() would make of it.
            marker = "0-jobqueue-row-0"
            name = f"admin:{self.opts.app_label}_{self.opts.model_name}_change"
            url = reverse(name, args=(marker,), current_app=self.model_admin.admin_site.name)
            before, _, after = url.rpartition(marker)
            self._change_url = (before, after)
        before, after = self._change_url
        return f"{before}{pk}{after}"


class TitledAdmin(admin.ModelAdmin):
    """A list titled by what it lists ("Jobs", "Batches"), not Django's "Select job to change".

    Nothing on these pages is edited, and the title says what the list holds.
    """

    def changelist_view(self, request: HttpRequest, extra_context: dict[str, Any] | None = None) -> Any:
        extra_context = {
            "title": capfirst(self.opts.verbose_name_plural),
            **database_context(request, request.path),
            **(extra_context or {}),
        }
        return super().changelist_view(request, extra_context)

    def render_change_form(
        self, request: HttpRequest, context: dict[str, Any], *args: Any, **kwargs: Any
    ) -> Any:
        changelist = reverse(
            f"admin:{self.opts.app_label}_{self.opts.model_name}_changelist", current_app=self.admin_site.name
        )
        context.update(database_context(request, changelist))
        return super().render_change_form(request, context, *args, **kwargs)


class ReadOnlyAdmin(TitledAdmin):
    """Rows the queue and its workers write (batches, workers): nobody adds, changes or deletes one."""

    show_facets = admin.ShowFacets.NEVER
    empty_value_display = EMPTY

    class Media:
        css = {"all": ["django_jobqueue/admin.css"]}

    def get_queryset(self, request: HttpRequest) -> QuerySet[Any]:
        # The queue's database (JOBQUEUE["DATABASE"], or another chosen), which need not be "default".
        return super().get_queryset(request).using(shown_database(request))

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Model | None = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Model | None = None) -> bool:
        return False


class OperatorAdmin(TitledAdmin):
    """A list an operator reads and acts on; rows change only through ``QueueClient``."""

    paginator = CappedPaginator
    show_full_result_count = False
    # Facet counts are a COUNT per choice over the whole table.
    show_facets = admin.ShowFacets.NEVER
    list_per_page = 50
    # One marker for "no value" on every page, the one the columns write themselves.
    empty_value_display = EMPTY
    # The query-string keys of this list's filters; any other key is dropped with a message.
    filter_params: ClassVar[frozenset[str]] = frozenset()

    def client(self, request: HttpRequest) -> QueueClient:
        """The queue of the database these pages show (see ``databases.py``)."""
        return QueueClient(shown_database(request))

    def get_changelist(self, request: HttpRequest, **kwargs: Any) -> type[ChangeList]:
        return OperatorChangeList

    def action_checkbox(self, obj: Model) -> SafeString:
        """Django's own checkbox, the same markup, without a template render for each row.

        Django renders a ``CheckboxInput`` through the form renderer's templates:
        about a fifth of a 50-row list page's time, for one fixed tag.
        """
        label = format_html(_("Select this object for an action - {}"), str(obj))
        return format_html(
            '<input type="checkbox" name="{}" value="{}" class="action-select" aria-label="{}">',
            ACTION_CHECKBOX_NAME,
            obj.pk,
            label,
        )

    def get_queryset(self, request: HttpRequest) -> QuerySet[Any]:
        # The queue's database (JOBQUEUE["DATABASE"], or another chosen), which need not be "default".
        return super().get_queryset(request).using(shown_database(request))

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Model | None = None) -> bool:
        # The detail page never saves a form (that would write the row with the
        # ORM): it is read-only for everyone, and every change is an action or a
        # button that calls QueueClient. Without an object this is the question
        # "may this user run the change actions?".
        if obj is not None:
            return False
        return super().has_change_permission(request)

    def changelist_view(self, request: HttpRequest, extra_context: dict[str, Any] | None = None) -> Any:
        cleaned = self.clean_query_string(request)
        if cleaned is not None:
            return cleaned
        # Filtered by a batch (the links of a batch's page), the list says whose rows it shows.
        batch_id = parse_id(request.GET.get("batch", "")) if "batch" in self.filter_params else None
        if batch_id is not None:
            title = f"{capfirst(self.opts.verbose_name_plural)} of batch #{batch_id}"
            extra_context = {"title": title, **(extra_context or {})}
        return super().changelist_view(request, extra_context)

    def clean_query_string(self, request: HttpRequest) -> HttpResponse | None:
        """Redirect to the list without the query-string keys it does not know, with a message.

        Django would otherwise filter by any model field named in the URL (a slow
        scan, or a database error page for a malformed value).
        """
        known = COMMON_PARAMS | self.filter_params
        dropped = sorted(
            key
            for key, values in request.GET.lists()
            if key not in known or any("\x00" in value for value in values)
        )
        if not dropped:
            return None
        self.message_user(
            request,
            f"Ignored what this list cannot filter by: {', '.join(dropped)}.",
            messages.WARNING,
        )
        kept = [
            (key, value) for key in request.GET if key not in dropped for value in request.GET.getlist(key)
        ]
        return HttpResponseRedirect(f"{request.path}?{urlencode(kept)}" if kept else request.path)

    def response_action(
        self, request: HttpRequest, queryset: QuerySet[Any], *args: Any, **kwargs: Any
    ) -> Any:
        # A forged selection must not reach SQL as a malformed id (a 500).
        selected = request.POST.getlist(ACTION_CHECKBOX_NAME)
        if any(parse_id(value) is None for value in selected):
            self.message_user(request, "A selected id was malformed; nothing was changed.", messages.ERROR)
            return HttpResponseRedirect(request.get_full_path())
        return super().response_action(request, queryset, *args, **kwargs)

    def render_change_form(
        self,
        request: HttpRequest,
        context: dict[str, Any],
        add: bool = False,
        change: bool = False,
        form_url: str = "",
        obj: Any = None,
    ) -> Any:
        context.update(self.buttons(request, obj))
        return super().render_change_form(request, context, add, change, form_url, obj)

    def buttons(self, request: HttpRequest, obj: Any) -> dict[str, Any]:
        """What a row's page offers this user besides its fields: its template's ``can_…`` flags."""
        return {}

    def confirmation(self, request: HttpRequest, template: str, context: dict[str, Any]) -> TemplateResponse:
        """A page that asks before an action is done, in the admin's frame: ``template`` with ``context``."""
        return TemplateResponse(
            request, template, {**self.admin_site.each_context(request), "opts": self.opts, **context}
        )

    def get_search_results(
        self, request: HttpRequest, queryset: QuerySet[Any], search_term: str
    ) -> tuple[QuerySet[Any], bool]:
        term = search_term.strip()
        if not term:
            return queryset, False
        return queryset.filter(self.search_filter(term, queryset.db)), False

    def search_filter(self, term: str, using: str) -> Q:
        """The rows a search term finds on database ``using``; each admin matches exactly, on indexed
        columns."""
        raise NotImplementedError

    def does_not_exist(self, request: HttpRequest, object_id: str) -> HttpResponseRedirect:
        """Say that ``object_id`` names no row, and go where Django's own pages go: the admin index."""
        # Django's words, so that its translations apply; the id is cut to keep the message short.
        message = _("%(name)s with ID “%(key)s” doesn’t exist. Perhaps it was deleted?") % {
            "name": self.opts.verbose_name,
            "key": object_id[:40],
        }
        self.message_user(request, message, messages.WARNING)
        return HttpResponseRedirect(reverse("admin:index", current_app=self.admin_site.name))

    def row_button(
        self, request: HttpRequest, object_id: str, act: Callable[[int], HttpResponse | None]
    ) -> HttpResponse:
        """Answer a button of a row's page: a POST, by a user who may change rows; ``act`` on the row's id.

        ``act`` answers None where no row has that id, as a malformed id has none.
        """
        if request.method != "POST":
            return HttpResponseNotAllowed(["POST"])
        if not self.has_change_permission(request):
            raise PermissionDenied
        object_id = unquote(object_id)
        row_id = parse_id(object_id)
        response = act(row_id) if row_id is not None else None
        return response if response is not None else self.does_not_exist(request, object_id)

    def own_views(self) -> list[tuple[str, Callable[..., HttpResponse], str]]:
        """This page's views besides Django's: (route, view, URL name), each behind the admin's login."""
        return []

    def get_urls(self) -> list[URLPattern]:
        login = self.admin_site.admin_view
        own = [path(route, login(view), name=self.url_name(name)) for route, view, name in self.own_views()]
        return [*own, *super().get_urls()]

    def url_name(self, view: str) -> str:
        return f"{self.opts.app_label}_{self.opts.model_name}_{view}"

    def url(self, view: str, *args: Any) -> str:
        return reverse(f"admin:{self.url_name(view)}", args=args, current_app=self.admin_site.name)
