"""*Run now* of a schedule, once per click: each form carries a one-time token.

A form that offers *run now* (the list's action bar, a schedule's page) holds a
fresh random token. The job and its ``LogEntry``, which names the token, are
written in one transaction, while the schedule's row is locked; a request that
comes with a token already logged for that schedule (the form submitted twice,
a second click, the browser resending it) finds the entry and enqueues nothing.
The views answer a POST with a redirect, so that reloading the page after it
sends nothing again.
"""

from __future__ import annotations

import re
import secrets

from django import forms
from django.contrib.admin.helpers import ActionForm
from django.contrib.admin.models import LogEntry
from django.db import router, transaction
from django.http import HttpRequest

from ..models import Job, Schedule
from ..queue.schedules import ScheduleBook
from ..queue.timetable import Schedule as Declared
from .audit import log_ran_now, schedule_receipts

# The form field that carries the token, in the action bar and on a schedule's page.
TOKEN_FIELD = "once"
TOKEN = re.compile(r"[0-9a-f]{32}")


def new_token() -> str:
    return secrets.token_hex(16)


def posted_token(request: HttpRequest) -> str | None:
    """The form's token, or None where there is none or it is not one of ours (never reaches SQL)."""
    token = request.POST.get(TOKEN_FIELD, "")
    return token if TOKEN.fullmatch(token) else None


def receipt(token: str) -> str:
    return f"form {token}"


class ScheduleActionForm(ActionForm):
    """Django's action bar, with a fresh token each time it is shown."""

    once = forms.CharField(widget=forms.HiddenInput, required=False, initial=new_token, label="")


def run_once(
    request: HttpRequest, book: ScheduleBook, row: Schedule, schedule: Declared, token: str
) -> Job | None:
    """Enqueue one job of ``schedule`` and log it; None if this token already ran it (or the row is gone).

    The transactions nest queue inside log, so that where the log is on
    another database its entry commits before the row's lock is released.
    """
    logs = router.db_for_write(LogEntry)
    with transaction.atomic(using=book.using), transaction.atomic(using=logs):
        # Another request with the same token waits here (PostgreSQL: FOR UPDATE)
        # until this one commits, then finds its entry; SQLite under BEGIN
        # IMMEDIATE already holds the write lock for the whole transaction.
        job = book.run_now_once(
            schedule, lambda: schedule_receipts(row.pk, receipt(token)).using(logs).exists()
        )
        if job is not None:
            log_ran_now(request, row, job, receipt(token))
    return job
