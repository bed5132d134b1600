"""The docs' recipes, held to the product: KEDA's SQL runs as printed, and every PromQL names real series.

The SQL is taken from docs/autoscaling.md's ScaledObject and run against
PostgreSQL with known jobs. The PromQL of the Grafana dashboard, of the
autoscaling recipes and of the alert rules (docs/observability.md, § Queue metrics)
must name only series that the metrics view or the worker exports.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
import yaml
from django.db import connection
from django.utils import timezone

from django_jobqueue import QueueClient
from django_jobqueue.views import QUEUE_SERIES

DOCS = Path(__file__).resolve().parent.parent / "docs"
AUTOSCALING = DOCS / "autoscaling.md"
ALERTS = DOCS / "observability.md"
DASHBOARD = DOCS / "grafana" / "jobqueue-dashboard.json"


# The worker's series (runworker --metrics-port): read off a real worker's registry.
def _worker_families() -> dict[str, str]:
    """Every family a worker's registry exports, by name, with its type: read off a real one."""
    from django_jobqueue.worker.run.watchdog import Attempts
    from django_jobqueue.worker.services.metrics import WorkerMetrics

    registry = WorkerMetrics(Attempts(), 1).registry
    return {family.name: family.type for family in registry.collect()}


_FAMILIES = _worker_families()
WORKER_HISTOGRAMS = tuple(name for name, kind in _FAMILIES.items() if kind == "histogram")
# Counters are exposed with their _total suffix, an info with _info.
SUFFIXES = {"counter": "_total", "info": "_info"}
WORKER_SERIES = tuple(
    name + SUFFIXES.get(kind, "") for name, kind in _FAMILIES.items() if kind != "histogram"
)
EXPORTED = {
    *QUEUE_SERIES,
    *WORKER_SERIES,
    *(f"{name}{suffix}" for name in WORKER_HISTOGRAMS for suffix in ("_bucket", "_sum", "_count")),
}
# PromQL's words that are not series: keywords and grouping. Functions are told by their "(".
PROMQL_KEYWORDS = {"by", "without", "on", "ignoring", "group_left", "group_right", "and", "or", "unless"}
PROMQL_KEYWORDS |= {"offset", "bool", "inf", "nan"}


def series_names(expr: str) -> set[str]:
    """The series an expression reads: every name that is not a function, keyword or label."""
    expr = re.sub(r'"(?:[^"\\]|\\.)*"', '""', expr)  # strings: label values, $variables
    expr = re.sub(r"\{[^}]*\}", "", expr)  # label matchers
    expr = re.sub(r"\[[^\]]*\]", "", expr)  # ranges, [$__rate_interval]
    expr = re.sub(r"\b(by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)", "", expr)
    expr = re.sub(r"\b\d+(\.\d+)?([eE][-+]?\d+)?[smhdwy]?\b", "", expr)  # numbers, durations after offset
    names = set()
    for match in re.finditer(r"[A-Za-z_:][A-Za-z0-9_:]*", expr):
        followed_by = expr[match.end() :].lstrip()[:1]
        if followed_by != "(" and match.group() not in PROMQL_KEYWORDS:
            names.add(match.group())
    return names


def yaml_blocks(path: Path) -> list[Any]:
    """Every fenced ```yaml block of a Markdown page, parsed; a block that is not YAML fails here."""
    blocks = re.findall(r"^```yaml\n(.*?)^```", path.read_text(), flags=re.MULTILINE | re.DOTALL)
    assert blocks, f"no yaml block in {path.name}"
    return [yaml.safe_load(block) for block in blocks]


def triggers(kind: str) -> list[dict[str, Any]]:
    found = [
        trigger["metadata"]
        for block in yaml_blocks(AUTOSCALING)
        if block.get("kind") == "ScaledObject"
        for trigger in block["spec"]["triggers"]
        if trigger["type"] == kind
    ]
    assert found, f"no {kind} trigger in {AUTOSCALING.name}"
    return found


def dashboard_expressions() -> list[str]:
    dashboard = json.loads(DASHBOARD.read_text())
    return [target["expr"] for panel in dashboard["panels"] for target in panel["targets"]]


def recipe_expressions() -> list[str]:
    prometheus = [trigger["query"] for trigger in triggers("prometheus")]
    adapter = [
        rule[key]
        for block in yaml_blocks(AUTOSCALING)
        if "rules" in block and "external" in block["rules"]
        for rule in block["rules"]["external"]
        for key in ("seriesQuery", "metricsQuery")
    ]
    assert adapter, "no prometheus-adapter rule"
    return prometheus + [expr.replace("<<.LabelMatchers>>", "") for expr in adapter]


def alert_expressions() -> list[str]:
    blocks = [block for block in yaml_blocks(ALERTS) if "groups" in block]
    rules = [rule for block in blocks for group in block["groups"] for rule in group["rules"]]
    assert len(rules) >= 3
    return [rule["expr"] for rule in rules]


# -- the PromQL ---------------------------------------------------------------------


def test_the_series_reader_finds_series_and_nothing_else():
    expr = (
        "histogram_quantile(0.95, sum by (le, queue) "
        '(rate(jobqueue_job_duration_seconds_bucket{queue=~"$queue"}[$__rate_interval]))) '
        "> on() group_left max(jobqueue_workers_alive offset 15m) or vector(0)"
    )
    assert series_names(expr) == {"jobqueue_job_duration_seconds_bucket", "jobqueue_workers_alive"}
    assert series_names("rate(jobqueue_jobz_total[5m])") == {"jobqueue_jobz_total"}


@pytest.mark.parametrize(
    ("where", "expressions"),
    [("dashboard", dashboard_expressions), ("recipes", recipe_expressions), ("alerts", alert_expressions)],
)
def test_every_expression_names_only_exported_series(where: str, expressions: Any):
    for expr in expressions():
        names = series_names(expr)
        assert names, f"{where}: {expr!r} names no series"
        assert names <= EXPORTED, f"{where}: {expr!r} names {sorted(names - EXPORTED)}, which nothing exports"


def test_the_dashboard_shows_every_series_and_its_queue_variable_reads_one():
    shown = {name for expr in dashboard_expressions() for name in series_names(expr)}
    bases = {re.sub(r"_(bucket|sum|count)$", "", name) for name in shown}
    assert bases >= set(QUEUE_SERIES) | set(WORKER_SERIES) | set(WORKER_HISTOGRAMS)
    variable = json.loads(DASHBOARD.read_text())["templating"]["list"][0]
    match = re.fullmatch(r"label_values\((\w+), queue\)", variable["definition"])
    assert match and match.group(1) in EXPORTED


# -- KEDA's SQL, run as printed ---------------------------------------------------------


@pytest.fixture
def keda_query(postgresql_only: None) -> str:
    (metadata,) = triggers("postgresql")
    return str(metadata["query"])


def run(sql: str) -> Any:
    with connection.cursor() as cursor:
        cursor.execute(sql)
        rows = cursor.fetchall()
    return rows


@pytest.fixture
def emails_backlog(queue: QueueClient) -> Iterator[None]:
    """emails: 3 due (one keyed), 2 scheduled (one keyed), 1 running, 1 done, 1 dead. sms: 2 due."""
    for priority in (50, 50, 50):
        queue.push("recipes.work", {}, queue="emails", priority=priority)
    running = queue.pull("emails", worker_id="w")
    done, dead = queue.pull("emails", worker_id="w"), queue.pull("emails", worker_id="w")
    assert running and done and dead
    assert queue.ack(done, worker_id="w") and queue.fail(dead, worker_id="w", error="no")
    queue.push("recipes.work", {}, queue="emails", run_at=timezone.now() - timedelta(minutes=5))
    queue.push("recipes.work", {}, queue="emails")
    queue.push("recipes.work", {}, queue="emails", concurrency_key="tenant:1", concurrency_limit=1)
    queue.push("recipes.work", {}, queue="emails", delay=3600)
    queue.push(
        "recipes.work", {}, queue="emails", delay=3600, concurrency_key="tenant:1", concurrency_limit=1
    )
    queue.push("recipes.work", {}, queue="sms")
    queue.push("recipes.work", {}, queue="sms")
    yield


def test_keda_query_counts_the_due_and_running_jobs_of_its_queue(keda_query: str, emails_backlog: None):
    assert run(keda_query) == [(4,)]


def test_keda_query_answers_zero_for_a_paused_queue(
    keda_query: str, emails_backlog: None, queue: QueueClient
):
    queue.pause_queue("emails")
    assert run(keda_query) == [(0,)]
    queue.resume_queue("emails")
    assert run(keda_query) == [(4,)]


def test_keda_query_reads_the_jobs_indexes_only(keda_query: str, emails_backlog: None):
    # On a table this small the planner may prefer a scan; forbidding it shows that an index can serve
    # each count, which a single status = 'ready' condition (in neither partial index) could not.
    with connection.cursor() as cursor:
        cursor.execute("SET enable_seqscan = off")
        try:
            cursor.execute(f"EXPLAIN {keda_query}")
            plan = "\n".join(row[0] for row in cursor.fetchall())
        finally:
            cursor.execute("RESET enable_seqscan")
    # Which index the planner picks on a table of ten rows is its business; none may need a scan.
    # At a million jobs it picks the claim's partial indexes (docs/autoscaling.md).
    assert "Seq Scan on django_jobqueue_job" not in plan, plan
