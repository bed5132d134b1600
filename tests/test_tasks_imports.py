"""The Tasks code imports one way, and ``django_jobqueue.tasks`` alone imports nothing.

Each module is imported first in an interpreter of its own: a cycle shows as
an import of a partly initialised module. The import graph is also read from
the source, function-level imports included, so a cycle cannot hide behind a
late import.
"""

from __future__ import annotations

import ast
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "django_jobqueue"

TASKS_MODULES = [
    "django_jobqueue.tasks",
    "django_jobqueue.tasks.compat",
    "django_jobqueue.tasks.rows",
    "django_jobqueue.tasks.options",
    "django_jobqueue.tasks.backend",
    "django_jobqueue.backends",
    "django_jobqueue.worker.run.tasks",
]

FIRST_IMPORT = """
import importlib, sys
import django
django.setup()
already = sorted(name for name in {modules!r} if name in sys.modules)
assert not already, f"imported by django.setup() already: {{already}}"
importlib.import_module({target!r})
"""

PACKAGE_ALONE = """
import sys
import django_jobqueue
before = set(sys.modules)
import django_jobqueue.tasks
print(sorted(set(sys.modules) - before))
"""


def run_python(code: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "DJANGO_SETTINGS_MODULE": "testproject.settings"}
    return subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True, timeout=60
    )


@pytest.mark.parametrize("target", TASKS_MODULES)
def test_each_module_imports_first_in_a_fresh_interpreter(target):
    done = run_python(FIRST_IMPORT.format(modules=TASKS_MODULES, target=target))

    assert done.returncode == 0, done.stderr


def test_importing_the_tasks_package_imports_nothing_else():
    # Celery's autodiscovery imports "<app>.tasks" of every installed app.
    done = run_python(PACKAGE_ALONE)

    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "['django_jobqueue.tasks']"


def module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def is_module(name: str) -> bool:
    relative = Path(*name.split("."))
    return (ROOT / relative).with_suffix(".py").is_file() or (ROOT / relative / "__init__.py").is_file()


def imported_by(path: Path) -> set[str]:
    """The package's modules that ``path`` imports anywhere in its code, late imports included."""
    name = module_name(path)
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = package.split(".")[: len(package.split(".")) - node.level + 1] if node.level else []
            source = ".".join([*base, *([node.module] if node.module else [])])
            for alias in node.names:
                submodule = f"{source}.{alias.name}"
                found.add(submodule if is_module(submodule) else source)
    return {module for module in found if module.startswith("django_jobqueue") and module != name}


def test_no_import_cycle_runs_through_the_tasks_modules():
    graph = {module_name(path): imported_by(path) for path in PACKAGE.rglob("*.py")}
    assert graph["django_jobqueue.backends"] >= {"django_jobqueue.tasks.backend"}, "the graph reads imports"

    for start in TASKS_MODULES:
        seen: set[str] = set()
        stack = [(start, (start,))]
        while stack:
            module, trail = stack.pop()
            for imported in graph.get(module, set()):
                assert imported != start, f"import cycle: {' -> '.join((*trail, imported))}"
                if imported not in seen:
                    seen.add(imported)
                    stack.append((imported, (*trail, imported)))


def test_the_tasks_modules_write_rows_only_through_the_queue_client():
    for path in (PACKAGE / "tasks").glob("*.py"):
        statements = {name for name in imported_by(path) if name.startswith("django_jobqueue.queue.ops")}
        assert not statements, f"{path.name} imports {statements}: enqueue through QueueClient"
