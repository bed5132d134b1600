"""How a job's status reads: its pill, the time a list shows beside it, and what it means now.

Read from the web server's clock: these words are for a person, not for a decision.
"""

from __future__ import annotations

from datetime import datetime

from django.utils import timezone
from django.utils.html import format_html
from django.utils.safestring import SafeString

from ..models import Job, JobStatus
from ..stats import format_age
from .display import EMPTY, pill, relative, timestamp


def status_pill(job: Job) -> SafeString:
    if job.status == JobStatus.READY and job.run_at > timezone.now():
        return pill("scheduled", "scheduled")
    if job.status == JobStatus.RUNNING:
        # The owner, in the pill's tooltip: a column of its own would be empty on most rows.
        return pill(job.status, job.status, title=f"claimed by {job.locked_by or EMPTY}")
    return pill(job.status, job.status)


def time_in_status(job: Job) -> SafeString:
    """The one time a list row needs, read beside its status: ready *for 3 min*, scheduled *in 7 min*,
    running *for 2 min*, done *3 min ago*. The tooltip has the date, and when the job was enqueued.

    A ready job counts from its ``run_at`` (as the overview's "oldest ready waits"), a running
    one from its claim, a waiting one from its enqueue; a finished one says when it ended.
    """
    now = timezone.now()
    enqueued = f"enqueued at {timestamp(job.created_at)}"

    def shown(text: str, what: str = "", when: datetime | None = None) -> SafeString:
        title = f"{what} {timestamp(when)}; {enqueued}" if what else enqueued
        return format_html('<span title="{}">{}</span>', title, text)

    def since(when: datetime) -> str:
        return f"for {format_age((now - when).total_seconds())}"

    if job.status == JobStatus.READY:
        if job.run_at > now:
            return shown(relative(job.run_at), "runs at", job.run_at)
        return shown(since(job.run_at), "due since", job.run_at)
    if job.status == JobStatus.RUNNING and job.last_attempted_at is not None:
        return shown(since(job.last_attempted_at), "claimed at", job.last_attempted_at)
    if job.status in (JobStatus.RUNNING, JobStatus.WAITING):
        return shown(since(job.created_at))
    if job.finished_at is not None:
        return shown(relative(job.finished_at), "finished at", job.finished_at)
    return shown(EMPTY)


EARLIER_ERROR = "Error of an earlier attempt"


def earlier_error_note(job: Job) -> str:
    """Why the job's last error is not its present state, or "" where it is."""
    if not job.last_error:
        return ""
    if job.status == JobStatus.DONE:
        return f"Attempt {job.attempts} succeeded; an earlier attempt failed with this error."
    if job.status == JobStatus.RUNNING:
        return f"Attempt {job.attempts} is running; an earlier attempt failed with this error."
    return ""


def status_hint(job: Job) -> str:
    """What the status means for this job now, read from the web server's clock."""
    now = timezone.now()
    if job.status == JobStatus.READY:
        if job.run_at > now:
            return f"runs {relative(job.run_at)}" + (" (backoff)" if job.attempts else "")
        return f"due for {format_age((now - job.run_at).total_seconds())}"
    if job.status == JobStatus.RUNNING and job.locked_until is not None:
        if job.locked_until < now:
            return f"claim expired {relative(job.locked_until)}: the next tick hands it back"
        return f"claimed by {job.locked_by}, deadline {relative(job.locked_until)}"
    if job.status == JobStatus.WAITING:
        return "waits for its dependencies (below); the ack of the last one releases it"
    if job.finished_at is not None:
        return f"finished {relative(job.finished_at)}"
    return ""
