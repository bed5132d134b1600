"""OpenTelemetry: a job carries the trace it was enqueued in, and its run is a span of that trace.

With the real SDK (a TracerProvider, spans kept in memory or, for a
``runworker`` process, written to a file by ``tests/otel_jobs.py``), on SQLite
and PostgreSQL. Without the API installed, simulated in a subprocess,
nothing changes.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from importlib.util import find_spec
from typing import Any

import pytest
from opentelemetry import propagate, trace
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind, StatusCode

import tests.otel_jobs  # noqa: F401 - registers the otel.* jobs
from django_jobqueue import enqueue_many
from django_jobqueue.models import DeadLetter, Job
from django_jobqueue.worker.run.executor import Executor
from django_jobqueue.worker.run.outcomes import Outcome
from tests.otel_jobs import SPANS_FILE, exported_spans
from tests.worker_support import ROOT, database_url

EXPORTER = InMemorySpanExporter()


def _provider() -> TracerProvider:
    """The process's SDK provider, set once (OpenTelemetry refuses to replace one), exporting to EXPORTER."""
    provider = trace.get_tracer_provider()
    if not isinstance(provider, TracerProvider):
        provider = TracerProvider()
        provider.add_span_processor(SimpleSpanProcessor(EXPORTER))
        trace.set_tracer_provider(provider)
    return provider


@pytest.fixture
def spans() -> Iterator[InMemorySpanExporter]:
    """The spans ended during the test."""
    _provider()
    EXPORTER.clear()
    yield EXPORTER
    EXPORTER.clear()


def request_span() -> Any:
    """A span as a traced Django view would be in when it enqueues."""
    return trace.get_tracer("tests").start_as_current_span("GET /signup")


def hex_id(value: int, width: int) -> str:
    return format(value, f"0{width}x")


def traceparent_of(span: Any) -> tuple[str, str]:
    """The trace id and span id of ``span``, as a traceparent writes them."""
    context = span.get_span_context() if hasattr(span, "get_span_context") else span.context
    return hex_id(context.trace_id, 32), hex_id(context.span_id, 16)


def stored_ids(job: Job) -> tuple[str, str]:
    """The trace id and parent span id the row's traceparent names."""
    version, trace_id, span_id, flags = job.trace_context["traceparent"].split("-")
    assert version == "00" and int(flags, 16) & 1, "version 00, sampled"
    return trace_id, span_id


def named(spans: InMemorySpanExporter, name: str) -> list[ReadableSpan]:
    return [span for span in spans.get_finished_spans() if span.name == name]


def run_in_process(queue: Any, job: Job) -> Outcome:
    claimed = queue.pull(job.queue, worker_id="w")
    assert claimed is not None and claimed.pk == job.pk
    return Executor(queue, "w").run(claimed)


# -- enqueue ------------------------------------------------------------------


def test_enqueue_in_a_span_stores_its_producer_spans_context(queue, spans):
    with request_span() as request:
        job = tests.otel_jobs.inner_span.enqueue()

    row = Job.objects.get(pk=job.pk)
    (producer,) = named(spans, "jobqueue.enqueue otel.inner_span")
    assert producer.kind is SpanKind.PRODUCER
    assert producer.parent is not None and producer.parent.span_id == request.get_span_context().span_id
    assert stored_ids(row) == traceparent_of(producer)
    assert job.trace_context == row.trace_context, "the Job returned says what the row holds"
    assert producer.attributes["messaging.system"] == "django-jobqueue"
    assert producer.attributes["messaging.message.id"] == str(job.pk)
    assert producer.attributes["messaging.destination.name"] == "default"


def test_enqueue_outside_any_span_stores_nothing_and_makes_no_span(queue, spans):
    job = tests.otel_jobs.inner_span.enqueue()

    assert Job.objects.get(pk=job.pk).trace_context is None
    assert job.trace_context is None
    assert spans.get_finished_spans() == ()


@pytest.mark.parametrize("count", [2, 40], ids=["insert", "copy-on-postgresql"])
def test_enqueue_many_stores_the_batch_span_on_every_row(queue, spans, count):
    items: list[Any] = [("otel.inner_span", {"label": str(i)}) for i in range(count)]
    with request_span():
        jobs = enqueue_many(items)

    (producer,) = named(spans, "jobqueue.enqueue_many")
    assert producer.kind is SpanKind.PRODUCER
    assert producer.attributes["messaging.batch.message_count"] == count
    rows = Job.objects.filter(pk__in=[job.pk for job in jobs])
    assert {stored_ids(row) for row in rows} == {traceparent_of(producer)}
    assert all(job.trace_context == rows[0].trace_context for job in jobs)
    jobs[0].trace_context["traceparent"] = "changed"
    assert jobs[1].trace_context["traceparent"] != "changed", "each Job holds its own copy"


def test_a_batch_with_unique_keys_stores_it_too(queue, spans):
    with request_span():
        jobs = enqueue_many(
            [("otel.inner_span", {}, {"unique_key": f"k{i}"}) for i in range(3)] + [("otel.inner_span", {})]
        )
        again = queue.push("otel.inner_span", {}, unique_key="k0")

    assert again.pk == jobs[0].pk, "the live job of the key stands in"
    rows = Job.objects.filter(pk__in=[job.pk for job in jobs])
    assert len(rows) == 4 and all(row.trace_context for row in rows)


@pytest.mark.skipif(
    find_spec("django.tasks") is None and find_spec("django_tasks") is None,
    reason="needs Django's Tasks framework (Django 6, or django-tasks on 5.2)",
)
def test_a_django_task_enqueued_in_a_span_stores_it(queue, spans):
    from tests import tasks_for_workers as tasks

    with request_span():
        result = tasks.add.enqueue(1, 2)

    row = Job.objects.get(pk=int(result.id))
    (producer,) = named(spans, "jobqueue.enqueue tests.tasks_for_workers.add")
    assert stored_ids(row) == traceparent_of(producer)


def test_a_dead_letter_keeps_the_trace_context_and_its_retry_restores_it(queue, spans):
    with request_span():
        first = queue.push("otel.boom", {}, max_attempts=1)
        second = queue.push("otel.boom", {}, max_attempts=1)
    for _ in (first, second):
        claimed = queue.pull(worker_id="w")
        assert claimed is not None
        assert queue.fail(claimed, worker_id="w", error="gave up")

    dead = {letter.job_id: letter for letter in DeadLetter.objects.all()}
    assert dead[first.pk].trace_context == first.trace_context
    retried = queue.retry_dead_letter(dead[first.pk])
    assert retried.trace_context == first.trace_context
    assert Job.objects.get(pk=retried.pk).trace_context == first.trace_context
    batches: list[Any] = []
    assert queue.retry_dead_letters([dead[second.pk]], on_batch=batches.append) == 1
    ((batch_retried,),) = batches
    assert Job.objects.get(pk=batch_retried.job_id).trace_context == second.trace_context


# -- the worker's span ----------------------------------------------------------


def test_the_run_is_a_consumer_span_child_of_the_enqueue_and_parent_of_the_jobs_spans(queue, spans):
    with request_span() as request:
        job = tests.otel_jobs.inner_span.enqueue()

    assert run_in_process(queue, job) is Outcome.DONE

    (run,) = named(spans, "jobqueue.run otel.inner_span")
    (inner,) = named(spans, "otel.inside")
    trace_id, parent_id = stored_ids(job)
    assert run.kind is SpanKind.CONSUMER
    assert hex_id(run.context.trace_id, 32) == trace_id == traceparent_of(request)[0]
    assert run.parent is not None and hex_id(run.parent.span_id, 16) == parent_id
    assert inner.parent is not None and inner.parent.span_id == run.context.span_id
    assert Job.objects.get(pk=job.pk).result == hex_id(inner.context.span_id, 16)
    assert run.status.status_code is StatusCode.UNSET
    assert dict(run.attributes) == {
        "messaging.system": "django-jobqueue",
        "messaging.operation.type": "process",
        "messaging.destination.name": "default",
        "messaging.message.id": str(job.pk),
        "jobqueue.job.name": "otel.inner_span",
        "jobqueue.job.attempt": 1,
        "jobqueue.job.max_attempts": 5,
        "jobqueue.outcome": "done",
    }


@pytest.mark.parametrize(("max_attempts", "outcome"), [(3, "retry"), (1, "dead")])
def test_a_failed_run_is_an_error_span_with_the_exception(queue, spans, max_attempts, outcome):
    job = queue.push("otel.boom", {"message": "provider down"}, max_attempts=max_attempts)

    assert str(run_in_process(queue, job)) == outcome

    (run,) = named(spans, "jobqueue.run otel.boom")
    assert run.parent is None, "enqueued outside any trace: the run is a root span"
    assert run.attributes["jobqueue.outcome"] == outcome
    assert run.status.status_code is StatusCode.ERROR
    assert run.status.description == "RuntimeError: provider down"
    (event,) = run.events
    assert event.name == "exception"
    assert event.attributes["exception.type"] == "RuntimeError"
    assert event.attributes["exception.message"] == "provider down"


@pytest.mark.parametrize(
    "stored",
    [
        "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01",
        [1, 2, 3],
        42,
        {"traceparent": 5, "tracestate": ["x"]},
        {"traceparent": "zz-not-a-traceparent"},
        {"traceparent": "00-00000000000000000000000000000000-0000000000000000-01"},
        {"traceparent": "00-" + "f" * 10_000},
    ],
    ids=["string", "list", "number", "not-strings", "garbage", "all-zero-ids", "huge"],
)
def test_a_garbage_trace_context_does_not_stop_the_job(queue, spans, stored):
    job = queue.push("otel.inner_span", {})
    Job.objects.filter(pk=job.pk).update(trace_context=stored)

    assert run_in_process(queue, job) is Outcome.DONE

    (run,) = named(spans, "jobqueue.run otel.inner_span")
    assert run.parent is None, "nothing valid to continue: the run is a root span"
    assert run.attributes["jobqueue.outcome"] == "done"


def test_a_field_that_is_not_a_string_is_dropped_and_the_rest_still_read(queue, spans, caplog):
    job = queue.push("otel.inner_span", {})
    parent = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
    Job.objects.filter(pk=job.pk).update(trace_context={"traceparent": parent, "tracestate": 5})

    assert run_in_process(queue, job) is Outcome.DONE

    (run,) = named(spans, "jobqueue.run otel.inner_span")
    assert run.parent is not None and hex_id(run.parent.span_id, 16) == "b7ad6b7169203331"
    assert hex_id(run.context.trace_id, 32) == "0af7651916cd43dd8448eb211c80319c"
    assert "could not be read" not in caplog.text


class _BrokenPropagator:
    """A propagator whose own code fails, as a project's custom one might."""

    fields = {"traceparent"}

    def extract(self, carrier: Any, context: Any = None, getter: Any = None) -> Any:
        raise RuntimeError("propagator bug")

    def inject(self, carrier: Any, context: Any = None, setter: Any = None) -> None:
        carrier["traceparent"] = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"


def test_a_propagator_that_raises_on_a_row_does_not_stop_the_job(queue, spans, caplog):
    configured = propagate.get_global_textmap()
    propagate.set_global_textmap(_BrokenPropagator())  # type: ignore[arg-type]
    try:
        with request_span():
            job = tests.otel_jobs.inner_span.enqueue()
        outcome = run_in_process(queue, job)
    finally:
        propagate.set_global_textmap(configured)

    assert outcome is Outcome.DONE
    (run,) = named(spans, "jobqueue.run otel.inner_span")
    assert run.parent is None
    assert f"job otel.inner_span id={job.pk}: its trace_context could not be read" in caplog.text


# -- real processes ---------------------------------------------------------------


@pytest.mark.parametrize(
    ("pool", "function"),
    [
        ("threads", tests.otel_jobs.inner_span),
        ("processes", tests.otel_jobs.inner_span),
        ("asyncio", tests.otel_jobs.ainner_span),
        ("threads", tests.otel_jobs.ainner_span),
    ],
)
def test_a_runworker_process_continues_the_trace(queue, spans, start_worker, tmp_path, pool, function):
    with request_span() as request:
        job = function.enqueue(label="in-worker")
    spans_file = tmp_path / "spans.jsonl"

    worker = start_worker(
        "--burst",
        "--pool",
        pool,
        env={"JOBQUEUE_MODULES": "tests.jobs_for_workers,tests.otel_jobs", SPANS_FILE: str(spans_file)},
    )
    assert worker.wait(60) == 0, worker.log()

    assert Job.objects.get(pk=job.pk).status == "done"
    exported = {span["name"]: span for span in exported_spans(spans_file)}
    run, inner = exported[f"jobqueue.run {function.name}"], exported["otel.in-worker"]
    trace_id, parent_id = stored_ids(job)
    assert run["kind"] == "SpanKind.CONSUMER"
    assert run["context"]["trace_id"] == f"0x{trace_id}" == f"0x{traceparent_of(request)[0]}"
    assert run["parent_id"] == f"0x{parent_id}"
    assert inner["parent_id"] == run["context"]["span_id"]
    assert run["attributes"]["jobqueue.outcome"] == "done"


WITHOUT_OPENTELEMETRY = textwrap.dedent(
    """
    import json, os, sys
    sys.modules["opentelemetry"] = None  # as if the API were not installed
    import django
    django.setup()
    from django_jobqueue import enqueue_many, QueueClient
    from django_jobqueue.queue import tracing
    from django_jobqueue.worker.run.executor import Executor
    import tests.jobs_for_workers

    queue = QueueClient()
    jobs = [queue.push("workers.record", {"path": sys.argv[1]})]
    jobs += enqueue_many([("workers.record", {"path": sys.argv[1]}) for _ in range(20)])
    outcomes = [str(Executor(queue, "w").run(queue.pull(worker_id="w"))) for _ in jobs]
    print(json.dumps({"api": tracing.OPENTELEMETRY is not None, "ids": [job.pk for job in jobs],
                      "outcomes": outcomes}))
    """
)


def test_without_opentelemetry_enqueue_and_run_work_and_store_nothing(queue, tmp_path):
    completed = subprocess.run(
        [sys.executable, "-c", WITHOUT_OPENTELEMETRY, str(tmp_path / "events.jsonl")],
        cwd=ROOT,
        env={**os.environ, "DATABASE_URL": database_url(), "DJANGO_SETTINGS_MODULE": "testproject.settings"},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert completed.returncode == 0, completed.stderr

    reported = json.loads(completed.stdout.splitlines()[-1])
    assert reported["api"] is False
    assert reported["outcomes"] == ["done"] * 21
    rows = Job.objects.filter(pk__in=reported["ids"])
    assert [row.trace_context for row in rows] == [None] * 21
    assert {row.status for row in rows} == {"done"}


def test_the_worker_sees_a_provider_exactly_when_the_api_gives_one():
    """The worker's shortcut past ``get_tracer_provider()`` gives its answer, before and after one is set."""
    script = (
        "from opentelemetry import trace\n"
        "from opentelemetry.sdk.trace import TracerProvider\n"
        "from django_jobqueue.worker.run.tracing import _no_provider\n"
        "before = (_no_provider(trace), isinstance(trace.get_tracer_provider(), trace.ProxyTracerProvider))\n"
        "trace.set_tracer_provider(TracerProvider())\n"
        "after = (_no_provider(trace), isinstance(trace.get_tracer_provider(), trace.ProxyTracerProvider))\n"
        "print(before, after)\n"
    )
    env = {**os.environ, "DJANGO_SETTINGS_MODULE": "testproject.settings"}
    setup = "import django; django.setup()\n"
    done = subprocess.run(
        [sys.executable, "-c", setup + script], cwd=ROOT, env=env, capture_output=True, text=True, timeout=60
    )
    assert done.stdout.split() == ["(True,", "True)", "(False,", "False)"], done.stderr
    named = {**env, "OTEL_PYTHON_TRACER_PROVIDER": "sdk_tracer_provider"}
    done = subprocess.run(
        [sys.executable, "-c", setup + script.replace("trace.set_tracer_provider(TracerProvider())\n", "")],
        cwd=ROOT,
        env=named,
        capture_output=True,
        text=True,
        timeout=60,
    )
    # A provider named in the environment is the API's to load: the worker asks it, and records spans.
    assert done.stdout.split() == ["(False,", "False)", "(False,", "False)"], done.stderr
