"""Assertions on what is enqueued: ``assert_enqueued``, ``assert_not_enqueued``, ``enqueued``.

They read the queue's rows on the caller's connection, so they see what the
test enqueued inside its own transaction. A job is *enqueued* while it is
ready or waiting (for its dependencies): a running, done or cancelled job,
or one in the dead letters, is not.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from ..conf import jobqueue_settings
from ..decorators import BoundJob, JobFunction
from ..models import Job, JobStatus

ENQUEUED_STATUSES = (JobStatus.READY, JobStatus.WAITING)
# A failure lists at most this many jobs, then says how many more there are.
SHOWN_JOBS = 20
# A payload longer than this (as its repr) is cut in a failure's listing.
SHOWN_PAYLOAD_CHARS = 200

# What a test names a job by: its name, its @job function, or that function with options.
JobName = str | JobFunction | BoundJob


def enqueued(name: JobName | None = None, queue: str | None = None, *, using: str | None = None) -> list[Job]:
    """Return the enqueued (ready or waiting) jobs, oldest first; of ``name`` and ``queue`` if given.

    ``name`` is a job's name or its ``@job`` function; ``using`` the queue's
    database alias (``JOBQUEUE["DATABASE"]`` by default).
    """
    jobs = Job.objects.using(using or jobqueue_settings.DATABASE).filter(status__in=ENQUEUED_STATUSES)
    if name is not None:
        jobs = jobs.filter(name=job_name(name))
    if queue is not None:
        jobs = jobs.filter(queue=queue)
    return list(jobs.order_by("id"))


def assert_enqueued(
    name: JobName | None = None,
    *,
    args: Mapping[str, Any] | None = None,
    queue: str | None = None,
    count: int | None = None,
    using: str | None = None,
) -> list[Job]:
    """Assert that an enqueued job matches; return the jobs that match, oldest first.

    A job matches when its name is ``name`` (a job's name or its ``@job``
    function) and its queue is ``queue``, each if given, and its payload
    contains ``args``: every key of ``args`` is in the payload with an equal
    value. Only the top level is a subset: a nested dict or list must equal
    the payload's value as a whole. ``args`` is compared as the payload is stored, through
    JSON (a tuple matches a list). With ``count``, exactly that many jobs must
    match; without it, at least one. ``using`` is the queue's database alias,
    as ``enqueue``'s (``JOBQUEUE["DATABASE"]`` by default).

    Raise ``AssertionError`` listing what is enqueued (name, queue, payload),
    the closest jobs first, otherwise; ``TypeError`` for ``args`` that JSON
    cannot carry or a ``count`` that is not an int, ``ValueError`` for a
    negative ``count``.
    """
    if count is not None:
        if isinstance(count, bool) or not isinstance(count, int):
            raise TypeError(f"count must be an int, not {type(count).__name__}")
        if count < 0:
            raise ValueError(f"count must be 0 or more, got {count}")
    wanted = _Wanted(name, queue, args)
    matches = [job for job in enqueued(wanted.name, queue, using=using) if wanted.matches(job)]
    if count is None and not matches:
        problem = f"no enqueued job matches {wanted}"
    elif count is not None and len(matches) != count:
        problem = f"expected {_jobs(count)} matching {wanted}, found {len(matches)}"
    else:
        return matches
    raise AssertionError(_report(problem, wanted, enqueued(using=using)) + _not_counted(wanted, using))


def assert_not_enqueued(
    name: JobName | None = None,
    *,
    args: Mapping[str, Any] | None = None,
    queue: str | None = None,
    using: str | None = None,
) -> None:
    """Assert that no enqueued job matches (as ``assert_enqueued`` matches).

    Raise ``AssertionError`` listing the jobs that match, and the others
    enqueued, otherwise.
    """
    wanted = _Wanted(name, queue, args)
    found = sum(1 for job in enqueued(wanted.name, queue, using=using) if wanted.matches(job))
    if found:
        problem = f"expected no enqueued job matching {wanted}, found {found}"
        raise AssertionError(_report(problem, wanted, enqueued(using=using)))


class _Wanted:
    """The filters of one assertion, and how far a job is from them."""

    def __init__(self, name: JobName | None, queue: str | None, args: Mapping[str, Any] | None) -> None:
        self.name = None if name is None else job_name(name)
        self.queue = queue
        self.args = None if args is None else _as_stored(args)

    def matches(self, job: Job) -> bool:
        return not self.differences(job)

    def differences(self, job: Job) -> list[str]:
        """What keeps ``job`` from matching, in words; empty if it matches."""
        found = []
        if self.name is not None and job.name != self.name:
            found.append("name")
        if self.queue is not None and job.queue != self.queue:
            found.append("queue")
        payload = job.payload if isinstance(job.payload, dict) else {}
        for key, value in (self.args or {}).items():
            if key not in payload:
                found.append(f"no {key!r} in payload")
            elif payload[key] != value:
                found.append(f"payload[{key!r}] is {_cut(repr(payload[key]))}")
        return found

    def __str__(self) -> str:
        given = [(what, value) for what, value in self._filters() if value is not None]
        if not given:
            return "(any job)"
        return ", ".join(f"{what}={value!r}" for what, value in given)

    def _filters(self) -> list[tuple[str, Any]]:
        return [("name", self.name), ("queue", self.queue), ("args", self.args)]


def _report(problem: str, wanted: _Wanted, live: list[Job]) -> str:
    """The failure's text: the problem, then the enqueued jobs, the closest first."""
    if not live:
        lines = [f"{problem}.", "Nothing is enqueued (no job is ready or waiting)."]
    else:
        # Closest first: the fewest differences, then the oldest.
        ranked = sorted(live, key=lambda job: (len(wanted.differences(job)), job.pk))
        lines = [f"{problem}.", f"Enqueued ({_jobs(len(live))}, ready or waiting), closest first:"]
        for job in ranked[:SHOWN_JOBS]:
            differences = wanted.differences(job)
            verdict = "matches" if not differences else "differs: " + "; ".join(differences)
            lines.append(
                f"  {job.name} queue={job.queue!r} payload={_cut(repr(job.payload))} "
                f"[#{job.pk} {job.status}] {verdict}"
            )
        if len(ranked) > SHOWN_JOBS:
            lines.append(f"  … and {len(ranked) - SHOWN_JOBS} more")
    return "\n".join(lines)


def _not_counted(wanted: _Wanted, using: str | None) -> str:
    """A line saying how many matching jobs are running, done or cancelled; empty if none.

    A test that asserts after running its jobs meets them there.
    """
    jobs = Job.objects.using(using or jobqueue_settings.DATABASE).exclude(status__in=ENQUEUED_STATUSES)
    if wanted.name is not None:
        jobs = jobs.filter(name=wanted.name)
    if wanted.queue is not None:
        jobs = jobs.filter(queue=wanted.queue)
    counts: dict[str, int] = {}
    for job in jobs.only("id", "name", "queue", "payload", "status").order_by("id")[:1000]:
        if wanted.matches(job):
            counts[job.status] = counts.get(job.status, 0) + 1
    if not counts:
        return ""
    found = ", ".join(f"{number} {status}" for status, number in sorted(counts.items()))
    return f"\nNot counted, as not ready or waiting: {found}."


def job_name(name: object) -> str:
    """A job's name, from the name, its ``@job`` function or ``fn.using(...)``; ``TypeError`` otherwise."""
    if isinstance(name, str):
        return name
    if isinstance(name, JobFunction | BoundJob):
        return name.name
    raise TypeError(f"name must be a job's name or its @job function, not {type(name).__name__}")


def _as_stored(args: object) -> dict[str, Any]:
    """``args`` as a payload holding it reads back from the database: through JSON."""
    if not isinstance(args, Mapping):
        raise TypeError(f"args must be a dict, not {type(args).__name__}")
    try:
        stored: dict[str, Any] = json.loads(json.dumps(dict(args), allow_nan=False))
    except (TypeError, ValueError) as exc:
        raise TypeError(f"args must be JSON, as a payload is: {exc}") from None
    return stored


def _jobs(number: int) -> str:
    return f"{number} job" if number == 1 else f"{number} jobs"


def _cut(text: str) -> str:
    if len(text) <= SHOWN_PAYLOAD_CHARS:
        return text
    return text[: SHOWN_PAYLOAD_CHARS - 1] + "…"
