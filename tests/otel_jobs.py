"""Jobs for the OpenTelemetry tests, and a tracer provider for the worker processes that run them.

Imported by the test process (whose provider the tests set up) and, through
``JOBQUEUE_MODULES``, by a ``runworker`` process. There, with
``OTEL_TEST_SPANS_FILE`` set, this module configures the process's tracer
provider as a project would in its own code: the spans it ends are written
to that file in batches, one JSON object a line, as the SDK's console
exporter writes them. Under ``--pool processes`` each child imports this
module too, and writes its own spans to the same file.
"""

from __future__ import annotations

import asyncio
import json
import os
from pathlib import Path
from typing import Any

from opentelemetry import trace

from django_jobqueue import job

SPANS_FILE = "OTEL_TEST_SPANS_FILE"


def _export_spans_to(path: str) -> None:
    """Export every span to ``path`` in batches, as production does: only at a flush or the process's end."""
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor, ConsoleSpanExporter

    # Line-buffered append: each span is one line, whole, whichever process wrote it.
    out = open(path, "a", buffering=1)  # open for the life of the process
    exporter = ConsoleSpanExporter(out=out, formatter=lambda span: span.to_json(indent=None) + "\n")
    provider = TracerProvider()
    # A delay longer than any test: spans reach the file only when the provider is flushed or shut down.
    provider.add_span_processor(BatchSpanProcessor(exporter, schedule_delay_millis=600_000))
    trace.set_tracer_provider(provider)


if os.environ.get(SPANS_FILE):
    _export_spans_to(os.environ[SPANS_FILE])


def exported_spans(path: str | Path) -> list[dict[str, Any]]:
    """The spans a worker process wrote to ``path`` (a missing file is none)."""
    try:
        text = Path(path).read_text()
    except FileNotFoundError:
        return []
    return [json.loads(line) for line in text.splitlines() if line]


@job(name="otel.inner_span")
def inner_span(label: str = "inside") -> str:
    """Make a span of the job's own: it must be the child of the worker's span of the job."""
    with trace.get_tracer("tests.otel_jobs").start_as_current_span(f"otel.{label}") as span:
        return format(span.get_span_context().span_id, "016x")


@job(name="otel.ainner_span")
async def ainner_span(label: str = "inside") -> str:
    """``inner_span`` as a coroutine, its span made after an await: the run's span is still current."""
    await asyncio.sleep(0.01)
    with trace.get_tracer("tests.otel_jobs").start_as_current_span(f"otel.{label}") as span:
        await asyncio.sleep(0)
        return format(span.get_span_context().span_id, "016x")


@job(name="otel.boom")
def boom(message: str = "boom") -> None:
    raise RuntimeError(message)
