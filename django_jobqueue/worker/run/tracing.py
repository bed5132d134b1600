"""OpenTelemetry in the worker: each run of a job's code is a CONSUMER span.

The span (``jobqueue.run <job name>``) is the child of the context the job
was enqueued in (``queue/tracing.py``), read back from its ``trace_context``,
and it is current while the job's code runs: the spans that code makes are
its children. It ends with the attempt's outcome as the code left it (the
``outcome`` the job's log line says may still differ: a lost claim or a
refused write is known only once the outcome is written).

Free when unused: without ``opentelemetry-api`` nothing here runs, and with it
but no tracer provider configured, a job enqueued outside any trace runs
without a span at all. A ``trace_context`` that is not what an enqueue stores
(edited by hand, written by other code) is ignored with a warning: the job runs
as the root of a trace of its own.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Awaitable, Callable
from contextlib import AbstractContextManager
from typing import Any

from ...exceptions import JobCancelled, JobTimeout
from ...models import Job
from ...queue.tracing import MESSAGING_SYSTEM, OPENTELEMETRY, Carrier, tracer
from .outcomes import Action, Attempt

logger = logging.getLogger(__name__)


def traced_run(job: Job, run: Callable[[], Attempt]) -> Attempt:
    """Return ``run()``, the attempt of ``job``, run inside its span where there is one to make."""
    span = run_span(job)
    if span is None:
        return run()
    with span as current:
        attempt = run()
        end_span(current, job, attempt)
    return attempt


async def traced_arun(job: Job, run: Callable[[], Awaitable[Attempt]]) -> Attempt:
    """``traced_run`` for a coroutine job's attempt: awaited inside its span, current in its task."""
    span = run_span(job)
    if span is None:
        return await run()
    with span as current:
        attempt = await run()
        end_span(current, job, attempt)
    return attempt


def run_span(job: Job) -> AbstractContextManager[Any] | None:
    """The span of ``job``'s run, made current when entered; None where there is none to make."""
    if OPENTELEMETRY is None:
        return None
    trace, _ = OPENTELEMETRY
    carrier = _carrier(job)
    if carrier is None and _no_provider(trace):
        return None  # no provider to record a span, no trace to carry on: nothing to do
    # The span is ended by its context manager, its outcome set by end_span first (the context
    # manager's own handling would record nothing of an attempt that returned normally).
    return tracer().start_as_current_span(
        f"jobqueue.run {job.name}",
        context=_parent_context(job, carrier),
        kind=trace.SpanKind.CONSUMER,
        attributes=_attributes(job),
        record_exception=False,
        set_status_on_exception=False,
    )


# The API's global provider, where this version of it keeps it; and whether an
# environment variable names one (which the API then loads on first use).
_UNKNOWN = object()
_PROVIDER_FROM_ENVIRONMENT = "OTEL_PYTHON_TRACER_PROVIDER" in os.environ


def _no_provider(trace: Any) -> bool:
    """True while no tracer provider is configured, so that no span would be recorded.

    ``trace.get_tracer_provider()`` looks the environment up on every call
    until a provider is set: a tenth of what the worker spends on a no-op job.
    The global it reads is read directly instead, and the API asked only where
    that global is not found or the environment names a provider.
    """
    provider = getattr(trace, "_TRACER_PROVIDER", _UNKNOWN)
    if provider is _UNKNOWN or (provider is None and _PROVIDER_FROM_ENVIRONMENT):
        provider = trace.get_tracer_provider()
    return provider is None or isinstance(provider, trace.ProxyTracerProvider)


# Milliseconds a retiring child process waits for its spans to be exported:
# below the pool's RETIRE_TIMEOUT, after which the child is killed.
CHILD_FLUSH_MILLIS = 3000


def flush_spans() -> None:
    """Export the spans this process's tracer provider still holds, waiting up to ``CHILD_FLUSH_MILLIS``.

    For a child process of ``--pool processes``: it exits as multiprocessing's
    children do, without the ``atexit`` hook through which the SDK's provider
    exports what a batching processor still holds.
    """
    if OPENTELEMETRY is None:
        return
    trace, _ = OPENTELEMETRY
    # The SDK's provider has force_flush; the API's default one (nothing configured) has not.
    force_flush = getattr(trace.get_tracer_provider(), "force_flush", None)
    if force_flush is not None:
        force_flush(CHILD_FLUSH_MILLIS)


def _carrier(job: Job) -> Carrier | None:
    """The propagation fields of ``job.trace_context``, or None if it holds none."""
    stored = job.trace_context
    if stored is None:
        return None
    if not isinstance(stored, dict):
        logger.warning(
            "job %s id=%s: trace_context is not an object (%s); run without its trace",
            job.name,
            job.pk,
            type(stored).__name__,
        )
        return None
    # The propagators read strings: anything else on the row is not theirs.
    carrier = {key: value for key, value in stored.items() if isinstance(value, str)}
    return carrier or None


def _parent_context(job: Job, carrier: Carrier | None) -> Any:
    """The context ``carrier`` propagates, or None (a root span) if there is none to read."""
    if carrier is None:
        return None
    assert OPENTELEMETRY is not None  # run_span checked
    _, propagate = OPENTELEMETRY
    try:
        return propagate.extract(carrier)
    except Exception:  # a configured propagator's own code: a bad row must not cost the job its run
        logger.warning("job %s id=%s: its trace_context could not be read; run without it", job.name, job.pk)
        return None


def _attributes(job: Job) -> dict[str, Any]:
    return {
        "messaging.system": MESSAGING_SYSTEM,
        "messaging.operation.type": "process",
        "messaging.destination.name": job.queue,
        "messaging.message.id": str(job.pk),
        "jobqueue.job.name": job.name,
        "jobqueue.job.attempt": job.attempts,
        "jobqueue.job.max_attempts": job.max_attempts,
    }


def end_span(span: Any, job: Job, attempt: Attempt) -> None:
    """Set the attempt's outcome on ``span``; a failure is an ERROR, with its exception if it raised one."""
    assert OPENTELEMETRY is not None
    trace, _ = OPENTELEMETRY
    outcome = outcome_of(job, attempt)
    span.set_attribute("jobqueue.outcome", outcome)
    if outcome == "done":
        return
    if attempt.raised is not None:
        span.record_exception(attempt.raised)
    span.set_status(trace.Status(trace.StatusCode.ERROR, attempt.verdict.error or outcome))


def outcome_of(job: Job, attempt: Attempt) -> str:
    """The outcome the attempt comes to as its code left it, in the log line's words."""
    if isinstance(attempt.raised, JobTimeout):
        return "timeout"
    if isinstance(attempt.raised, JobCancelled):
        return "cancelled"
    action = attempt.verdict.action
    if action is Action.ACK:
        return "done"
    if action is Action.NACK and job.attempts < job.max_attempts:
        return "retry"
    return "dead"
