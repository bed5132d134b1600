"""OpenTelemetry at enqueue: a job remembers the trace it was enqueued in.

Optional and free when unused. Without ``opentelemetry-api`` installed nothing
here runs; with it, an enqueue outside a valid span costs one look at the
current span and stores nothing. Inside one, the insert runs in a PRODUCER
span (``jobqueue.enqueue <name>``, or ``jobqueue.enqueue_many`` for a batch),
and the context of that span, as the configured propagators write it (W3C
``traceparent`` and ``tracestate`` by default), is stored in the new rows'
``trace_context``. The worker's span of each job (``worker/run/tracing.py``) is
then that span's child.
"""

from __future__ import annotations

import functools
import importlib.metadata
from collections.abc import Callable
from types import ModuleType
from typing import Any, TypeVar

from ..models import Job


def _import_opentelemetry() -> tuple[ModuleType, ModuleType] | None:
    """``opentelemetry.trace`` and ``opentelemetry.propagate``, or None if the API is not installed."""
    try:
        from opentelemetry import propagate, trace
    except ImportError:
        return None
    return trace, propagate


OPENTELEMETRY = _import_opentelemetry()
# The instrumentation scope every span of django-jobqueue names.
TRACER_NAME = "django_jobqueue"
# What messaging.system names on every span, as OpenTelemetry's messaging conventions ask.
MESSAGING_SYSTEM = "django-jobqueue"

Inserted = TypeVar("Inserted", Job, list[Job])
# The trace context stored on a row: the propagators' fields, each a string.
Carrier = dict[str, str]


@functools.cache
def tracer() -> Any:
    """django-jobqueue's tracer, from the global provider (a proxy until one is set, then that one's)."""
    assert OPENTELEMETRY is not None
    trace, _ = OPENTELEMETRY
    try:
        version = importlib.metadata.version("django-jobqueue")
    except importlib.metadata.PackageNotFoundError:
        version = ""
    return trace.get_tracer(TRACER_NAME, version)


def in_valid_span() -> bool:
    """True if opentelemetry is installed and the current span has a valid context."""
    if OPENTELEMETRY is None:
        return False
    trace, _ = OPENTELEMETRY
    return bool(trace.get_current_span().get_span_context().is_valid)


def traced_insert(
    insert: Callable[[Carrier | None], Inserted], span_name: str, attributes: dict[str, Any]
) -> Inserted:
    """Run ``insert`` with the trace context its rows store: None outside a valid span.

    Inside one, ``insert`` runs in a PRODUCER span named ``span_name`` whose
    context it is given; the span records what ``insert`` raises.
    """
    if not in_valid_span():
        return insert(None)
    assert OPENTELEMETRY is not None
    trace, propagate = OPENTELEMETRY
    attributes = {"messaging.system": MESSAGING_SYSTEM, "messaging.operation.type": "send", **attributes}
    with tracer().start_as_current_span(
        span_name, kind=trace.SpanKind.PRODUCER, attributes=attributes
    ) as span:
        carrier: Carrier = {}
        propagate.inject(carrier)
        inserted = insert(carrier or None)
        if isinstance(inserted, Job):
            span.set_attribute("messaging.message.id", str(inserted.pk))
        return inserted
