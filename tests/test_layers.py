"""The package's layers, read from its source: what may import what, and where databases differ.

``queue/`` is the state machine: its statement modules (``queue/ops/``) and
engines (``queue/engines/``) are its inside. Everything else reaches them
through ``django_jobqueue.queue``, and asks an engine's flags rather than
the database's name.
"""

from __future__ import annotations

import re
from pathlib import Path

from tests.test_tasks_imports import PACKAGE, imported_by, module_name

INSIDE_QUEUE = ("django_jobqueue.queue.ops", "django_jobqueue.queue.engines")
# A test of the database's name: ``connection.vendor == "postgresql"`` and the like.
VENDOR_TEST = re.compile(r"\.vendor\s*(==|!=|\bin\b|\bnot in\b)")


def modules_outside(folder: str) -> list[Path]:
    return [path for path in PACKAGE.rglob("*.py") if folder not in path.relative_to(PACKAGE).parts[:1]]


def test_only_the_queue_imports_its_statements_and_engines():
    graph = {module_name(path): imported_by(path) for path in PACKAGE.rglob("*.py")}
    client_imports = graph["django_jobqueue.queue.client"]
    assert any(name.startswith(INSIDE_QUEUE) for name in client_imports), "the graph reads imports"

    for path in modules_outside("queue"):
        inside = sorted(name for name in graph[module_name(path)] if name.startswith(INSIDE_QUEUE))
        assert not inside, f"{path.relative_to(PACKAGE)} imports {inside}: import from django_jobqueue.queue"


def test_no_module_but_an_engine_asks_which_database_it_is_on():
    engines = PACKAGE / "queue" / "engines"
    # Migrations are frozen: they keep the tests they were written with.
    migrations = PACKAGE / "migrations"
    checked = 0
    for path in PACKAGE.rglob("*.py"):
        if path.is_relative_to(engines) or path.is_relative_to(migrations):
            continue
        checked += 1
        for number, line in enumerate(path.read_text().splitlines(), 1):
            where = f"{path.relative_to(PACKAGE)}:{number}"
            assert not VENDOR_TEST.search(line), f"{where} tests the database's name; ask its engine: {line}"
    assert checked > 40


def import_cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The groups of modules that import each other, around a circle (Tarjan's strongly connected parts)."""
    order: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    cycles: list[list[str]] = []

    def visit(module: str) -> None:
        order[module] = low[module] = len(order)
        stack.append(module)
        for imported in sorted(graph.get(module, ())):
            if imported not in graph:
                continue
            if imported not in order:
                visit(imported)
                low[module] = min(low[module], low[imported])
            elif imported in stack:
                low[module] = min(low[module], order[imported])
        if low[module] == order[module]:
            group = stack[stack.index(module) :]
            del stack[stack.index(module) :]
            if len(group) > 1:
                cycles.append(sorted(group))

    for module in sorted(graph):
        if module not in order:
            visit(module)
    return cycles


def test_no_modules_import_each_other():
    """Not even for type hints: a circle ties modules that must be read, moved and tested together."""
    graph = {module_name(path): imported_by(path) for path in PACKAGE.rglob("*.py")}
    assert import_cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert import_cycles(graph) == []
