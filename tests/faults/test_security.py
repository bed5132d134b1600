"""What the queue never does with what it reads back: unpickle it, import it, or show secrets."""

from __future__ import annotations

import ast
import subprocess
from pathlib import Path

import pytest

from django_jobqueue.models import DeadLetter
from tests.worker_support import ROOT

PACKAGE = ROOT / "django_jobqueue"
RUFF = ROOT / ".venv" / "bin" / "ruff"

PLANTED = """\
import marshal
import pickle

import yaml


def load(blob: bytes, text: str) -> object:
    return pickle.loads(blob), marshal.loads(blob), yaml.load(text)
"""


def ruff(*args: str) -> subprocess.CompletedProcess[str]:
    if not RUFF.exists():
        pytest.skip(f"ruff is not installed in {RUFF.parent}")
    return subprocess.run(
        [str(RUFF), "check", "--no-cache", "--config", str(ROOT / "pyproject.toml"), *args],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=60,
    )


def test_the_lint_rules_flag_pickle_marshal_and_yaml_loading(tmp_path: Path):
    planted = tmp_path / "planted.py"
    planted.write_text(PLANTED)

    flagged = ruff("--output-format", "concise", str(planted))

    assert flagged.returncode == 1
    for rule in ("S301", "S302", "S506"):
        assert rule in flagged.stdout, flagged.stdout


def test_the_package_passes_those_rules():
    result = ruff("--select", "S301,S302,S506,S307", str(PACKAGE))
    assert result.returncode == 0, result.stdout


def imported_modules(path: Path) -> set[str]:
    tree = ast.parse(path.read_text())
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module.split(".")[0])
    return names


def test_no_module_of_the_package_imports_a_deserializer_of_code():
    for path in PACKAGE.rglob("*.py"):
        assert not imported_modules(path) & {"pickle", "marshal", "yaml", "shelve", "dill"}, path


# Each place that imports a module by a name held in a variable, and why that name is safe.
DYNAMIC_IMPORTS = {
    "loader.py": "the jobs modules of installed apps and JOBQUEUE['MODULES']: settings, never the database",
    "__init__.py": "the package's lazy public names, from a constant table",
    "testing/__init__.py": "the testing kit's lazy public names, from a constant table",
    "tasks/rows.py": "Django Tasks only: a row the backend marked; what is found must be a Task",
    "tasks/backend.py": "Django Tasks only: a task's own module path, checked to hold that Task",
}


def test_only_known_places_import_modules_by_name():
    found = set()
    for path in PACKAGE.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            called = node.func if isinstance(node, ast.Call) else None
            name = getattr(called, "id", None) or getattr(called, "attr", None)
            if name in {"import_module", "__import__", "import_string", "locate"}:
                found.add(path.relative_to(PACKAGE).as_posix())
    assert found <= set(DYNAMIC_IMPORTS), f"review the new import by name in {found - set(DYNAMIC_IMPORTS)}"


def test_stored_tracebacks_keep_no_local_variables(queue, fault_worker):
    job = queue.push("faults.secret_local", {"secret_from_payload": "sesame"})

    assert fault_worker("--burst").wait(30) == 0

    dead = DeadLetter.objects.get(job_id=job.pk)
    assert "RuntimeError: provider refused the call" in dead.error
    assert 'raise RuntimeError(f"provider refused the call' in dead.traceback, "the traceback is kept"
    for stored in (dead.error, dead.traceback):
        assert "hunter2" not in stored and "api_token" not in stored
    assert dead.payload == {"secret_from_payload": "sesame"}, "the payload itself is kept, for a replay"
