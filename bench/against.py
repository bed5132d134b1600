"""The worker of another commit, for drains of this tree against it on the same machine in one run.

``python -m bench --against REF`` exports REF's files (``git archive``) under
``var/bench-trees/`` and runs its ``manage.py runworker`` with this tree's
virtualenv and database: the process's own directory comes first on its
import path, so it imports REF's ``django_jobqueue``, settings and
``bench/jobs.py``. REF must read the job table of this tree's migrations
(columns added since REF are not among those it asks for).
"""

from __future__ import annotations

import io
import shutil
import subprocess
import tarfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
TREES = ROOT / "var" / "bench-trees"


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
