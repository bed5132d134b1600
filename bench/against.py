"""The worker of another commit, for drains of this tree against it on the same machine in one run.

``python -m bench --against REF`` exports REF's files (``git archive``) under
``var/bench-trees/`` and runs its ``manage.py`` with this tree's virtualenv:
the process's own directory comes first on its import path, so it imports
REF's ``django_jobqueue``, settings and ``bench/jobs.py``.

Each tree has a database of its own, ``<name>_against_here`` and
``<name>_against_<REF's short id>`` beside ``DATABASE_URL``'s, made afresh and
migrated by that tree's own migrations, and each fills its queue with its
own ``enqueue_many``: a tree drains the schema and indexes it was written
for, whatever migrations lie between the two. Both databases start empty in
the same run and meet the same fills and drains, so neither carries more
dead rows than the other.
"""

from __future__ import annotations

import io
import os
import shutil
import subprocess
import sys
import tarfile
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

from .databases import create_database

ROOT = Path(__file__).resolve().parent.parent
TREES = ROOT / "var" / "bench-trees"

# Run by a tree's interpreter in its own directory: its models, its enqueue_many, its bench.jobs.
_FILL = """
import os
import sys

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "testproject.settings")
import django

django.setup()
from django.db import connection

import bench.jobs  # noqa: F401 - enqueue_many checks each payload against the registered job
from django_jobqueue import enqueue_many
from django_jobqueue.models import DeadLetter, Job, Worker

count, chunk = int(sys.argv[1]), 10_000
with connection.cursor() as cursor:
    tables = ", ".join(model._meta.db_table for model in (Job, DeadLetter, Worker))
    cursor.execute(f"TRUNCATE {tables} RESTART IDENTITY")
for start in range(0, count, chunk):
    enqueue_many([("bench.noop", {"i": i}) for i in range(start, min(count, start + chunk))])
with connection.cursor() as cursor:
    # As autovacuum would after a bulk load, and as bench/ours.py's fill does.
    cursor.execute(f"VACUUM ANALYZE {Job._meta.db_table}")
"""


def resolve(ref: str) -> str:
    """REF's full commit id; raise ``SystemExit`` if git does not know it."""
    done = subprocess.run(
        ["git", "rev-parse", "--verify", f"{ref}^{{commit}}"], cwd=ROOT, capture_output=True, text=True
    )
    if done.returncode != 0:
        raise SystemExit(f"--against {ref}: {done.stderr.strip() or 'not a commit'}")
    return done.stdout.strip()


def export(commit: str) -> Path:
    """A directory holding ``commit``'s files, exported once and reused."""
    tree = TREES / commit
    if (tree / "manage.py").exists():
        return tree
    archive = subprocess.run(
        ["git", "archive", "--format=tar", commit], cwd=ROOT, capture_output=True, check=True
    )
    partial = TREES / f"{commit}.partial"
    shutil.rmtree(partial, ignore_errors=True)  # left by an export cut short
    partial.mkdir(parents=True)
    with tarfile.open(fileobj=io.BytesIO(archive.stdout)) as tar:
        tar.extractall(partial, filter="data")
    partial.rename(tree)
    return tree


def database_url(url: str, label: str) -> str:
    """``url`` with its database renamed ``<name>_against_<label>``."""
    parts = urlsplit(url)
    return urlunsplit(parts._replace(path=f"{parts.path.rstrip('/')}_against_{label}"))


def databases(url: str, commit: str, tree: Path) -> dict[str, str]:
    """A fresh database per tree, each migrated by its own tree: ``{"here": url, "there": url}``."""
    made = {"here": database_url(url, "here"), "there": database_url(url, commit[:7])}
    for side, root in (("here", ROOT), ("there", tree)):
        create_database(made[side], fresh=True)
        env = _env(made[side])
        subprocess.run(
            [sys.executable, "manage.py", "migrate", "--noinput", "-v", "0"], cwd=root, env=env, check=True
        )
    return made


def fill(root: Path, url: str, count: int) -> None:
    """Make ``count`` ready no-op jobs in the database ``url`` with the tree ``root``'s own code."""
    subprocess.run([sys.executable, "-c", _FILL, str(count)], cwd=root, env=_env(url), check=True)


def _env(url: str) -> dict[str, str]:
    return {**os.environ, "DATABASE_URL": url, "DEBUG": "false"}
