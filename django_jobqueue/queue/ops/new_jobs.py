"""Each new job of an insert as its ``Job``, built from what the insert wrote and returned.

Shared by ``enqueue.py`` (an insert's returned rows) and ``copy.py`` (a COPY's),
so that a new job is the same object whichever way it was written.
"""

from __future__ import annotations

import json
import operator
from collections.abc import Iterable, Iterator, Mapping
from datetime import datetime
from typing import Any

from ...models import Job
from ..internals import init_signals_listened, instance_from_attrs
from ..rows import NEW_JOB_DEFAULTS, NEW_JOB_FRESH_BY_NAME, jobs_from_values
from .tables import NewJob


def inserted_values(new: NewJob, job_id: int, run_at: datetime) -> dict[str, Any]:
    """The values of the Job returned for ``new``, inserted as ``job_id``, beyond those its batch shares."""
    return {
        "id": job_id,
        "name": new.name,
        "queue": new.queue,
        # The payload as the database gives it back: a flat one's copy, or its JSON decoded.
        "payload": new.payload if new.payload is not None else json.loads(new.payload_json),
        "priority": new.priority,
        "max_attempts": new.max_attempts,
        "visibility_timeout": new.visibility_timeout,
        "timeout": new.timeout,
        "concurrency_key": new.concurrency_key,
        "concurrency_limit": new.concurrency_limit,
        "run_at": run_at,
        "task_backend": new.task_backend,
    }


# A new job's values that its batch's jobs mostly share: a ``NewJobBuilder`` template's key.
_SHARED_FIELDS = (
    "name",
    "queue",
    "priority",
    "max_attempts",
    "visibility_timeout",
    "timeout",
    "task_backend",
    "concurrency_key",
    "concurrency_limit",
)
_shape_of = operator.itemgetter(*(NewJob._fields.index(field) for field in _SHARED_FIELDS))


class NewJobBuilder:
    """Each new job of a batch as its ``Job``, from what its insert wrote (as ``jobs_from_values`` does).

    The jobs of a batch mostly share every value but their id, payload and
    ``run_at``: each set of the values they share (``_SHARED_FIELDS``) makes
    a template once, and a job is a copy of its template given its own three
    values and fresh lists, with no dict of its values built in between.
    """

    def __init__(self, using: str, shared: dict[str, Any], trace_context: Mapping[str, str] | None) -> None:
        self.using = using
        self.shared = shared
        self.trace_context = trace_context
        self._templates: dict[tuple[Any, ...], dict[str, Any]] = {}
        # The mutable defaults (lists), each job its own; the payload is each job's anyway.
        own = {"payload", *shared}
        self._fresh = [(name, make) for name, make in NEW_JOB_FRESH_BY_NAME if name not in own]
        # Where an init signal has a receiver, each job is built the ORM's way, so that it is sent.
        self._as_orm = init_signals_listened(Job)

    def build(self, new: NewJob, job_id: int, run_at: datetime) -> Job:
        if self._as_orm:
            values = {**self.shared, **inserted_values(new, job_id, run_at)}
            return jobs_from_values(self.using, with_trace_context([values], self.trace_context))[0]
        shape = _shape_of(new)
        template = self._templates.get(shape)
        if template is None:
            shared = {field: getattr(new, field) for field in _SHARED_FIELDS}
            template = self._templates[shape] = {**NEW_JOB_DEFAULTS, **self.shared, **shared}
        attrs = template.copy()
        attrs["id"] = job_id
        # The payload as the database gives it back: a flat one's copy, or its JSON decoded.
        attrs["payload"] = new.payload if new.payload is not None else json.loads(new.payload_json)
        attrs["run_at"] = run_at
        for name, make in self._fresh:
            attrs[name] = make()
        if self.trace_context is not None:
            attrs["trace_context"] = dict(self.trace_context)
        return instance_from_attrs(Job, self.using, attrs)


def with_trace_context(
    values: Iterable[dict[str, Any]], trace_context: Mapping[str, str] | None
) -> Iterable[dict[str, Any]]:
    """``values`` of new jobs, each with its own copy of ``trace_context`` if there is one."""
    if trace_context is None:
        return values  # the field's default, None, is what the row holds
    return _each_with(values, trace_context)


def _each_with(
    values: Iterable[dict[str, Any]], trace_context: Mapping[str, str]
) -> Iterator[dict[str, Any]]:
    for job_values in values:
        job_values["trace_context"] = dict(trace_context)
        yield job_values
