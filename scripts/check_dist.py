"""Check what the built wheel and sdist hold, against the repository.

    python scripts/check_dist.py dist/

The wheel must hold every file of ``django_jobqueue/`` that git tracks (the
modules, every migration, template and static file, ``py.typed``) and nothing
else but its metadata: no tests, bench or test project. Its version must be
``django_jobqueue.__version__``. The sdist must hold what the wheel is built
from, plus the tests, the test project and the docs, and none of the local
state (``var/``, virtualenvs, databases). ``twine check`` is run beside this
(Makefile: ``make dist``).
"""

from __future__ import annotations

import ast
import subprocess
import sys
import tarfile
import zipfile
from pathlib import Path

REPOSITORY = Path(__file__).resolve().parent.parent
PACKAGE = "django_jobqueue"
SDIST_MUST_HOLD = ("pyproject.toml", "README.md", "LICENSE", "CHANGELOG.md", "manage.py", "MANIFEST.in")
SDIST_FOLDERS = (PACKAGE, "tests", "testproject", "docs")
NEVER_SHIPPED = (".venv", "var/", ".git/", "__pycache__", ".sqlite3", "bench/", "site/", "/build/")


def main() -> int:
    dist = Path(sys.argv[1] if len(sys.argv) > 1 else "dist")
    version = source_version()
    wheels = sorted(dist.glob(f"django_jobqueue-{version}-*.whl"))
    sdists = sorted(dist.glob(f"django_jobqueue-{version}.tar.gz"))
    problems = []
    if len(wheels) != 1 or len(sdists) != 1:
        problems.append(f"expected one wheel and one sdist of {version} in {dist}, found {wheels + sdists}")
    else:
        problems += wheel_problems(wheels[0], version) + sdist_problems(sdists[0], version)
    for problem in problems:
        print(f"check_dist: {problem}", file=sys.stderr)
    if not problems:
        print(f"check_dist: {wheels[0].name} and {sdists[0].name} hold what they should")
    return 1 if problems else 0


def source_version() -> str:
    """``__version__`` as written in the package, read without importing it."""
    tree = ast.parse((REPOSITORY / PACKAGE / "__init__.py").read_text())
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(
            isinstance(target, ast.Name) and target.id == "__version__" for target in node.targets
        ):
            return str(ast.literal_eval(node.value))
    raise SystemExit(f"check_dist: no __version__ in {PACKAGE}/__init__.py")


def tracked_package_files() -> set[str]:
    listing = subprocess.run(
        ["git", "ls-files", PACKAGE], cwd=REPOSITORY, capture_output=True, text=True, check=True
    )
    return set(listing.stdout.split())


def wheel_problems(wheel: Path, version: str) -> list[str]:
    names = set(zipfile.ZipFile(wheel).namelist())
    metadata = f"django_jobqueue-{version}.dist-info/"
    problems = [f"the wheel lacks {name}" for name in sorted(tracked_package_files() - names)]
    problems += [
        f"the wheel holds {name}, which is not part of the package"
        for name in sorted(names)
        if not (name.startswith(f"{PACKAGE}/") or name.startswith(metadata)) or shipped_by_mistake(name)
    ]
    if f"{metadata}licenses/LICENSE" not in names:
        problems.append("the wheel lacks its LICENSE")
    return problems


def sdist_problems(sdist: Path, version: str) -> list[str]:
    root = f"django_jobqueue-{version}/"
    with tarfile.open(sdist) as archive:
        names = {member.name.removeprefix(root) for member in archive.getmembers() if member.isfile()}
    problems = [f"the sdist lacks {name}" for name in SDIST_MUST_HOLD if name not in names]
    problems += [
        f"the sdist lacks {folder}/"
        for folder in SDIST_FOLDERS
        if not any(name.startswith(f"{folder}/") for name in names)
    ]
    problems += [f"the sdist lacks {name}" for name in sorted(tracked_package_files() - names)]
    problems += [f"the sdist holds {name}" for name in sorted(names) if shipped_by_mistake(name)]
    return problems


def shipped_by_mistake(name: str) -> bool:
    return any(part in f"/{name}" for part in NEVER_SHIPPED)


if __name__ == "__main__":
    sys.exit(main())
