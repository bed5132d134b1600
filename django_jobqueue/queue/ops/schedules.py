"""Schedule rows: what the fleet has fired of each declared schedule.

``advance`` is the guarantee of one job per fire time: it moves a schedule's
``handled_through`` forward only from the value the caller read, so of any
number of workers that read the same value, exactly one moves it, and that
one inserts the jobs for the fire times in between, in the same transaction.
A done job leaving the table changes nothing: the row remembers.

The table holds one short row per schedule; these statements go through the
ORM (none is on a job's hot path).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from datetime import UTC, datetime
from typing import Any

from django.conf import settings
from django.db import connections
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


def schedule_rows(using: str, names: Iterable[str] | None = None) -> dict[str, Schedule]:
    """The rows of ``names`` (default: all), by name."""
    rows = Schedule.objects.using(using).all()
    if names is not None:
        rows = rows.filter(name__in=list(names))
    return {row.name: row for row in rows}


def add_schedules(using: str, entries: Sequence[dict[str, Any]], now: datetime) -> None:
    """Insert a row for each entry that has none; a new schedule starts from ``now``.

    Two workers starting together insert the same rows: the unique name keeps one.
    """
    stored = as_stored(now)
    rows = [
        Schedule(handled_through=stored, created_at=stored, updated_at=stored, paused=False, **entry)
        for entry in entries
    ]
    Schedule.objects.using(using).bulk_create(rows, ignore_conflicts=True)


def redefine_schedule(using: str, entry: dict[str, Any], now: datetime, *, restart: bool) -> bool:
    """Store a changed declaration; with ``restart`` (new fire times), start again from ``now``.

    ``handled_through`` only ever moves forward: moving it back would fire a
    fire time twice.
    """
    stored = as_stored(now)
    rows = Schedule.objects.using(using).filter(name=entry["name"]).exclude(signature=entry["signature"])
    changed = rows.update(updated_at=stored, next_fire_at=None, **entry)
    if changed and restart:
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


def note_next_fire(using: str, name: str, signature: str, next_fire_at: datetime) -> None:
    """Store when the schedule fires next, for pages that show it."""
    Schedule.objects.using(using).filter(name=name, signature=signature).exclude(
        next_fire_at=as_stored(next_fire_at)
    ).update(next_fire_at=as_stored(next_fire_at))


def lock_schedule(using: str, name: str) -> bool:
    """Lock the schedule's row until the transaction ends; False if it has none.

    PostgreSQL: ``FOR UPDATE``. SQLite has no row locks: its writers take
    turns (the documented ``transaction_mode: IMMEDIATE`` starts the turn at BEGIN).
    """
    rows = Schedule.objects.using(using).select_for_update().filter(name=name)
    return bool(list(rows.values_list("pk", flat=True)))


def set_paused(using: str, names: Iterable[str], paused: bool, now: datetime) -> list[str]:
    """Pause or resume schedules; return the names whose state changed.

    Resuming starts the schedule again from ``now``: the fire times that came
    while it was paused are skipped, not caught up.
    """
    stored = as_stored(now)
    changed = []
    for name in names:
        rows = Schedule.objects.using(using).filter(name=name, paused=not paused)
        updates: dict[str, Any] = {"paused": paused, "updated_at": stored}
        if rows.update(**updates):
            changed.append(name)
            if not paused:
                Schedule.objects.using(using).filter(name=name, handled_through__lt=stored).update(
                    handled_through=stored
                )
    return changed
