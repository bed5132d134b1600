"""Which queue database the admin shows, when the project has several (``JOBQUEUE["DATABASES"]``).

Each database is a queue of its own, with its own job ids: the admin shows one
at a time, the one chosen in the session, ``JOBQUEUE["DATABASE"]`` until one
is. Every page of the queue's admin names it and offers the others; choosing
one goes back to the list the user was on, in the other database.
"""

from __future__ import annotations

from typing import Any

from django.contrib import messages
from django.db.models import Model
from django.http import HttpRequest, HttpResponse, HttpResponseNotAllowed, HttpResponseRedirect
from django.urls import reverse
from django.utils.http import url_has_allowed_host_and_scheme

from ..conf import queue_databases

SESSION_KEY = "jobqueue_database"


def shown_database(request: HttpRequest) -> str:
    """The alias whose queue ``request``'s pages show: the session's choice while it is still one."""
    databases = queue_databases()
    session = getattr(request, "session", None)
    chosen = session.get(SESSION_KEY) if session is not None else None
    return chosen if chosen in databases else databases[0]


def database_of(row: Model) -> str:
    """The database ``row`` was read from, where its related rows are too."""
    return row._state.db or queue_databases()[0]


def database_context(request: HttpRequest, back: str) -> dict[str, Any]:
    """What a page's chooser needs; nothing where only one database holds a queue.

    ``back`` is where choosing another database leads: the list the page
    belongs to, since a row's id means another row, or none, elsewhere.
    """
    databases = queue_databases()
    if len(databases) < 2:
        return {}
    return {"queue_database": shown_database(request), "queue_databases": databases, "database_back": back}


def choose_database(request: HttpRequest) -> HttpResponse:
    """Remember the posted database for this session's pages, then go back to the posted list."""
    if request.method != "POST":
        return HttpResponseNotAllowed(["POST"])
    chosen = request.POST.get("database", "")
    if chosen in queue_databases():
        request.session[SESSION_KEY] = chosen
    else:
        shown = shown_database(request)
        messages.error(request, f"“{chosen}” holds no queue: these pages still show “{shown}”.")
    back = request.POST.get("next", "")
    if not url_has_allowed_host_and_scheme(back, {request.get_host()}, require_https=request.is_secure()):
        back = reverse("admin:django_jobqueue_queueoverview_changelist")
    return HttpResponseRedirect(back)
