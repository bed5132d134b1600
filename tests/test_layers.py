"""The package's layers, read from its source: what may import what, and where databases differ.

``queue/`` is the state machine: its statement modules (``queue/ops/``) and
engines (``queue/engines/``) are its inside. Everything else reaches them
through ``django_jobqueue.queue``, and asks an engine's flags rather than
the database's name. The statements reach psycopg and the insides of
Django's database wrapper through ``queue/internals.py`` alone.
"""

from __future__ import annotations

import ast
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


# What a statement module leaves to queue/internals.py on a database connection
# or cursor (a name that holds "connection" or "cursor"): its private
# attributes, the driver's connection and cursor that Django's wrap
# (``.connection``, ``cursor.cursor``), the wrapper's own helpers, and
# psycopg's API under them.
WRAPPER_HELPERS = {"wrap_database_errors", "debug_sql"}
PSYCOPG_API = {"copy", "pipeline", "pgconn", "prepare_threshold", "adapters"}


def reaches_inside(source: str) -> list[int]:
    """The lines of ``source`` that import psycopg or reach inside a database connection or cursor."""
    lines = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import | ast.ImportFrom):
            modules = [alias.name for alias in node.names] if isinstance(node, ast.Import) else [node.module]
            if any((module or "").partition(".")[0] == "psycopg" for module in modules):
                lines.append(node.lineno)
        elif isinstance(node, ast.Attribute):
            owner = ast.unparse(node.value).rpartition(".")[2].lower()
            on_connection, on_cursor = "connection" in owner, "cursor" in owner
            private = node.attr.startswith("_") and not node.attr.startswith("__")
            if (
                (on_connection or on_cursor)
                and (private or node.attr in WRAPPER_HELPERS | PSYCOPG_API or node.attr == "connection")
            ) or (on_cursor and node.attr == "cursor"):
                lines.append(node.lineno)
    return sorted(lines)


def test_the_statements_leave_the_drivers_internals_to_internals_py():
    reaching = (
        "import psycopg\nfrom psycopg import pq\nconnection.connection\ncursor.cursor\n"
        "connection._cursor()\nwith connection.wrap_database_errors, cursor.copy(sql): pass\n"
    )
    assert reaches_inside(reaching) == [1, 2, 3, 4, 5, 6, 6]
    allowed = "connections[using].cursor()\nconnection.timezone\nself._connection\ncursor.rowcount\n"
    assert reaches_inside(allowed) == []
    ops = sorted((PACKAGE / "queue" / "ops").glob("*.py"))
    assert len(ops) > 10
    for path in ops:
        lines = reaches_inside(path.read_text())
        where = ", ".join(f"{path.relative_to(PACKAGE)}:{line}" for line in lines)
        assert not lines, (
            f"{where} reach into psycopg or Django's database wrapper: go through queue/internals.py"
        )


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


DEVELOPMENT_DOCS = PACKAGE.parent / "docs" / "development.md"
MAP_ROW = re.compile(r"^\| `([\w/.]+)` \| (.+?) \| (.*) \|$")


def package_map() -> dict[str, set[str]]:
    """docs/development.md's package map: each folder, and the folders it never imports."""
    text = DEVELOPMENT_DOCS.read_text()
    section = text[text.index("## The package map") :]
    rows = {}
    for line in section.splitlines():
        if match := MAP_ROW.match(line):
            rows[match[1]] = set(re.findall(r"`([\w/.]+)`", match[3]))
    return rows


def folder_of(path: Path) -> str:
    return "/".join(path.relative_to(PACKAGE).parts[:-1]) or "."


def test_the_package_map_in_the_docs_is_true():
    rows = package_map()
    folders = {folder_of(path) for path in PACKAGE.rglob("*.py")}
    assert sorted(folders - rows.keys()) == [], "folders missing from docs/development.md's package map"
    assert sorted(rows.keys() - folders) == [], "the package map names folders that are gone"
    for folder, forbidden in rows.items():
        assert forbidden <= folders, f"{folder}'s row forbids folders that are gone: {forbidden - folders}"

    folder_by_module = {module_name(path): folder_of(path) for path in PACKAGE.rglob("*.py")}
    broken = []
    for path in PACKAGE.rglob("*.py"):
        forbidden = rows[folder_of(path)]
        for imported in sorted(imported_by(path)):
            if folder_by_module.get(imported) in forbidden:
                broken.append(f"{path.relative_to(PACKAGE)} imports {imported}")
    assert broken == [], "imports the package map forbids:\n" + "\n".join(broken)
    assert rows["queue/engines"] >= {"worker", "queue"}, "the map was read"
