"""Schedule rows: what the fleet has fired of each declared schedule.

``advance`` is the guarantee of one job per fire time: it moves a schedule's
``handled_through`` forward only from the value the caller read, so of any
number of workers that read the same value, exactly one moves it, and that
one inserts the jobs for the fire times in between, in the same transaction.
A done job leaving the table changes nothing: the row remembers.

``next_fire_at`` is how a worker finds work without computing every
schedule's fire times: every statement here keeps it at or before the
schedule's first fire time not yet handled (the model says why), so a wake
reads the rows whose time came (``due_rows``) and sleeps until the earliest
of the others (``next_fire_after``), both through its index.

The table holds one short row per schedule; these statements go through the
ORM (none is on a job's hot path).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from datetime import UTC, datetime
from typing import Any, NamedTuple

from django.conf import settings
from django.db import connections
from django.db.models import Min, Q, QuerySet
from django.utils import timezone

from ...models import Schedule
from ..engines import engine_for
from ..rows import to_datetime


def database_now(using: str) -> datetime:
    """The database's clock, as an aware UTC datetime: fire times are judged by it, as claims are."""
    connection = connections[using]
    with connection.cursor() as cursor:
        cursor.execute(f"SELECT {engine_for(connection).now}", [])
        now = as_utc(to_datetime(cursor.fetchone()[0]))
    assert now is not None
    return now


def as_stored(moment: datetime) -> datetime:
    """``moment`` as a DateTimeField takes it: aware under ``USE_TZ``, naive UTC without."""
    return moment if settings.USE_TZ else timezone.make_naive(moment, UTC)


def as_utc(moment: datetime | None) -> datetime | None:
    """A stored datetime back as an aware UTC one."""
    if moment is None:
        return None
    return moment.replace(tzinfo=UTC) if timezone.is_naive(moment) else moment.astimezone(UTC)


class DueRow(NamedTuple):
    """A schedule row whose next fire time has come, as a wake reads it (times aware, UTC)."""

    name: str
    signature: str
    handled_through: datetime
    paused: bool
    next_fire_at: datetime | None


# Where a row of no known next fire time sorts among the due ones.
UNKNOWN = datetime.min.replace(tzinfo=UTC)


def schedule_rows(using: str, names: Iterable[str] | None = None) -> dict[str, Schedule]:
    """The rows of ``names`` (default: all), by name."""
    rows = Schedule.objects.using(using).all()
    if names is not None:
        rows = rows.filter(name__in=list(names))
    return {row.name: row for row in rows}


def schedule_names(using: str) -> set[str]:
    """The name of every row: a short read of one column, to see which declared schedules have none."""
    return set(Schedule.objects.using(using).values_list("name", flat=True))


def due_query(using: str, now: datetime) -> QuerySet[Schedule, tuple[Any, ...]]:
    """The rows whose next fire time is ``now`` or earlier, or not known: two ranges of its index.

    Unordered: an ORDER BY has SQLite walk the whole index in its order
    rather than search the two ranges and sort what they hold.
    """
    due = Q(next_fire_at__lte=as_stored(now)) | Q(next_fire_at__isnull=True)
    return (
        Schedule.objects.using(using)
        .filter(due)
        .order_by()
        .values_list("name", "signature", "handled_through", "paused", "next_fire_at")
    )


def due_rows(using: str, now: datetime) -> list[DueRow]:
    """The rows whose next fire time is ``now`` or earlier, or not known (paused ones too), oldest first.

    Unlocked: a row is locked when it is fired (``try_lock_schedule``).
    """
    rows = [
        DueRow(name, signature, as_utc(handled_through) or handled_through, paused, as_utc(next_fire_at))
        for name, signature, handled_through, paused, next_fire_at in due_query(using, now)
    ]
    # The longest owed first, those of no known next fire time before all.
    return sorted(rows, key=lambda row: (row.next_fire_at or UNKNOWN, row.name))


def next_fire_after(using: str, now: datetime) -> datetime | None:
    """The earliest next fire time of any row after ``now``; None if no row has one."""
    later = Schedule.objects.using(using).filter(next_fire_at__gt=as_stored(now))
    return as_utc(later.aggregate(Min("next_fire_at"))["next_fire_at__min"])


def add_schedules(using: str, entries: Sequence[dict[str, Any]], now: datetime) -> None:
    """Insert a row for each entry that has none; a new schedule starts from ``now``.

    Each entry gives its ``next_fire_at``, the first fire time after ``now``.
    Two workers starting together insert the same rows: the unique name keeps one.
    """
    stored = as_stored(now)
    rows = [
        Schedule(
            handled_through=stored,
            created_at=stored,
            updated_at=stored,
            paused=False,
            **{**entry, "next_fire_at": as_stored(entry["next_fire_at"])},
        )
        for entry in entries
    ]
    Schedule.objects.using(using).bulk_create(rows, ignore_conflicts=True)


def redefine_schedule(
    using: str, entry: dict[str, Any], now: datetime, *, restart: datetime | None = None
) -> bool:
    """Store a changed declaration; False if the row is gone or already holds it.

    With ``restart`` (new fire times: the first after ``now`` by the new
    declaration) the schedule starts again from ``now`` and fires next then.
    Without it the fire times are those the row had, and so is its next one.
    ``handled_through`` only ever moves forward: moving it back would fire a
    fire time twice.
    """
    stored = as_stored(now)
    changes: dict[str, Any] = {**entry, "updated_at": stored}
    if restart is not None:
        changes["next_fire_at"] = as_stored(restart)
    rows = Schedule.objects.using(using).filter(name=entry["name"]).exclude(signature=entry["signature"])
    changed = rows.update(**changes)
    if changed and restart is not None:
        Schedule.objects.using(using).filter(name=entry["name"], handled_through__lt=stored).update(
            handled_through=stored
        )
    return bool(changed)


def forget_schedules(using: str, keep: Iterable[str]) -> int:
    """Delete the rows of schedules no longer declared; return how many."""
    deleted, _ = Schedule.objects.using(using).exclude(name__in=list(keep)).delete()
    return deleted


def advance(
    using: str,
    name: str,
    signature: str,
    seen: datetime,
    through: datetime,
    last_fire_at: datetime | None,
    next_fire_at: datetime,
    now: datetime,
) -> bool:
    """Move ``handled_through`` from ``seen`` to ``through``; False if it was not ``seen`` any more.

    Also False when the schedule is paused or its row holds another
    declaration. Call inside the transaction that inserts the jobs: on
    PostgreSQL a second worker's ``advance`` waits for this row's lock, then
    finds ``seen`` gone and changes nothing; SQLite runs one writer at a time.
    """
    changes: dict[str, Any] = {
        "handled_through": as_stored(through),
        "next_fire_at": as_stored(next_fire_at),
        "updated_at": as_stored(now),
    }
    if last_fire_at is not None:
        changes["last_fire_at"] = as_stored(last_fire_at)
    return bool(
        Schedule.objects.using(using)
        .filter(name=name, signature=signature, paused=False, handled_through=as_stored(seen))
        .update(**changes)
    )


def note_fired_job(using: str, name: str, job_id: int) -> None:
    """Remember the job of a schedule's newest fire time (the admin links to it)."""
    Schedule.objects.using(using).filter(name=name).update(last_job_id=job_id)


def move_on(using: str, row: DueRow, next_fire_at: datetime) -> bool:
    """Store the next fire time of a due row that owes nothing (or is paused) now; False if it changed.

    The caller computed ``next_fire_at`` from ``row`` as ``due_rows`` read
    it: its declaration (``signature``), ``handled_through`` and ``paused``.
    Any of them changed since (a fire, a redefinition, a pause or a resume)
    leaves the row alone: its writer set its next fire time.
    """
    seen = as_stored(row.handled_through)
    rows = Schedule.objects.using(using).filter(
        name=row.name, signature=row.signature, handled_through=seen, paused=row.paused
    )
    return bool(rows.update(next_fire_at=as_stored(next_fire_at)))


def lock_schedule(using: str, name: str) -> bool:
    """Lock the schedule's row until the transaction ends; False if it has none.

    PostgreSQL: ``FOR UPDATE``. SQLite has no row locks: its writers take
    turns (the documented ``transaction_mode: IMMEDIATE`` starts the turn at BEGIN).
    """
    rows = Schedule.objects.using(using).select_for_update().filter(name=name)
    return bool(list(rows.values_list("pk", flat=True)))


def try_lock_schedule(using: str, name: str) -> bool:
    """Lock the schedule's row until the transaction ends, unless another holds it; False if so, or gone.

    The scheduler's: it passes over a row an operator's transaction holds
    (a pause, a run now) and comes back to it, instead of waiting and firing
    nothing else meanwhile. PostgreSQL: ``FOR UPDATE SKIP LOCKED``. SQLite
    has no row locks: the transaction's BEGIN waited for the write lock.
    """
    rows = Schedule.objects.using(using).filter(name=name)
    if engine_for(connections[using]).supports_skip_locked:
        rows = rows.select_for_update(skip_locked=True)
    return bool(list(rows.values_list("pk", flat=True)))


def pause(using: str, names: Iterable[str], now: datetime) -> list[str]:
    """Pause schedules; return the names that were running.

    A paused row keeps its place in the index of next fire times: the
    workers move it along its timetable without firing (``move_on``).
    """
    stored = as_stored(now)
    paused = []
    for name in names:
        running = Schedule.objects.using(using).filter(name=name, paused=False)
        if running.update(paused=True, updated_at=stored):
            paused.append(name)
    return paused


def resume(using: str, name: str, now: datetime, next_fire_at: datetime) -> bool:
    """Resume a paused schedule from ``now``; False if it was not paused.

    The fire times that came while it was paused are skipped, not caught up.
    ``next_fire_at`` is the first fire time after ``now`` by the row's
    declaration, or ``now`` itself where the caller cannot read it (then the
    workers' next wake computes it).
    """
    stored = as_stored(now)
    changes = {"paused": False, "updated_at": stored, "next_fire_at": as_stored(next_fire_at)}
    if not Schedule.objects.using(using).filter(name=name, paused=True).update(**changes):
        return False
    Schedule.objects.using(using).filter(name=name, handled_through__lt=stored).update(handled_through=stored)
    return True
