"""What the Schedules page shows of a row: its declaration here, whether the row holds it, its times.

A row holds the declaration of the workers that last synced it; this process
(the web server) has its own, which may differ during a deploy. Each row shown
is given a ``RowState`` once per page, read with one query for the last jobs
that still exist.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime

from django.utils.html import format_html
from django.utils.safestring import SafeString

from ..models import Job, Schedule
from ..queue.schedules import ScheduleBook, stored_declaration
from ..queue.timetable import Schedule as Declared
from ..schedules import ScheduleError, declared_schedules
from .display import pill

# Where a row's state is kept on the row for the page being shown.
STATE_ATTRIBUTE = "_jobqueue_state"


@dataclass(frozen=True)
class Declarations:
    """The schedules this process declares, by name, read once for a request."""

    by_name: dict[str, Declared]
    problem: str | None  # why they cannot be read (a bad declaration); then by_name is empty

    @classmethod
    def read(cls) -> Declarations:
        try:
            return cls({schedule.name: schedule for schedule in declared_schedules()}, None)
        except ScheduleError as exc:
            return cls({}, str(exc))

    def add_missing(self, book: ScheduleBook) -> None:
        """Give each declared schedule a row, so that the page lists it before any worker ran."""
        if self.by_name:
            book.add_missing(list(self.by_name.values()))


@dataclass(frozen=True)
class RowState:
    declared: Declared | None  # this process's declaration of the row's schedule
    stored: Declared | None  # the declaration the row holds (None if it cannot be read)
    current: bool  # the row holds this process's declaration (its signature)
    next_fire_at: datetime | None
    last_job_exists: bool
    link_jobs: bool  # the user may open a job's page

    @property
    def shown(self) -> Declared | None:
        return self.declared or self.stored


def annotate(rows: Sequence[Schedule], declarations: Declarations, now: datetime, *, link_jobs: bool) -> None:
    """Give each row its ``RowState``; one query for all their last jobs."""
    job_ids = {row.last_job_id for row in rows if row.last_job_id is not None}
    using = rows[0]._state.db if rows else None
    existing = (
        set(Job.objects.using(using).filter(pk__in=job_ids).values_list("pk", flat=True))
        if job_ids
        else set()
    )
    for row in rows:
        stored = stored_declaration(row)
        declared = declarations.by_name.get(row.name)
        # The row's own declaration sets its fire times: it is what the workers that fire it hold.
        timing = stored or declared
        setattr(
            row,
            STATE_ATTRIBUTE,
            RowState(
                declared=declared,
                stored=stored,
                current=declared is not None and declared.signature == row.signature,
                next_fire_at=None if row.paused or timing is None else timing.next_after(now),
                last_job_exists=row.last_job_id in existing,
                link_jobs=link_jobs,
            ),
        )


def state_of(row: Schedule) -> RowState:
    state = getattr(row, STATE_ATTRIBUTE, None)
    if state is None:  # a row the page did not annotate: read what it needs now
        annotate([row], Declarations.read(), ScheduleBook(row._state.db).now(), link_jobs=False)
        state = getattr(row, STATE_ATTRIBUTE)
    assert isinstance(state, RowState)
    return state


def state_pills(row: Schedule) -> SafeString:
    """*paused* or *active*, and what the row holds if not this process's declaration."""
    state = state_of(row)
    pills = [pill("paused", "paused") if row.paused else pill("active", "active")]
    if state.declared is None:
        pills.append(
            pill(
                "not declared",
                "stale",
                title="this process declares no schedule by this name: it cannot run it now; "
                "the workers forget the row when they restart with the same settings",
            )
        )
    elif not state.current:
        pills.append(
            pill(
                "other declaration",
                "stale",
                title="the row holds a declaration other than this process's (workers that run other "
                "code synced it); a worker fires the schedule only while its own copy matches",
            )
        )
    return format_html(" ".join(["{}"] * len(pills)), *pills)
