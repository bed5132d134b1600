"""What a job's page and its dead letter's page both show: the job as it was enqueued, and its attempts.

A dead letter keeps the columns of the job it was (its options, payload and
attempts), so the two pages show them with the same fields.
"""

from __future__ import annotations

from django.contrib import admin
from django.utils.safestring import SafeString

from ..models import DeadLetter, Job
from .attempts import timeline
from .base import OperatorAdmin
from .databases import database_of
from .display import EMPTY, concurrency_limit, linked_batch, pretty_payload, seconds, time_limit


class JobFieldsAdmin(OperatorAdmin):
    """The list columns and detail fields of a ``Job`` or a ``DeadLetter`` row, by the names they share."""

    # Columns are methods, so that a crafted ?o= cannot sort a million rows by an unindexed column.
    sortable_by = ("id",)
    # Shows the search box; search_filter() decides what a term matches.
    search_fields = ("name",)

    class Media:
        css = {"all": ["django_jobqueue/admin.css"]}

    @admin.display(description="attempts")
    def attempts_of_max(self, row: Job | DeadLetter) -> str:
        return f"{row.attempts} / {row.max_attempts}"

    @admin.display(description="concurrency key")
    def key_for_concurrency(self, row: Job | DeadLetter) -> str:
        return row.concurrency_key or EMPTY

    @admin.display(description="concurrency limit")
    def limit_for_concurrency(self, row: Job | DeadLetter) -> str:
        return concurrency_limit(row.concurrency_limit)

    @admin.display(description="batch")
    def batch_link(self, row: Job | DeadLetter) -> SafeString | str:
        return linked_batch(row.batch_id, database_of(row), self.admin_site.name)

    @admin.display(description="visibility timeout")
    def claim_timeout(self, row: Job | DeadLetter) -> str:
        return seconds(row.visibility_timeout)

    @admin.display(description="time limit")
    def attempt_time_limit(self, row: Job | DeadLetter) -> str:
        return time_limit(row.timeout)

    @admin.display(description="payload")
    def payload_json(self, row: Job | DeadLetter) -> SafeString:
        return pretty_payload(row.payload)

    @admin.display(description="attempts")
    def attempt_timeline(self, row: Job | DeadLetter) -> SafeString:
        return timeline(row)
