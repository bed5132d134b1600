"""The PgBouncer the pooler measurements run behind: a private one, started by ``scripts/pgbouncer run``."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys

from .worker import ROOT

NOT_INSTALLED = "PgBouncer is not installed (apt-get install pgbouncer, or set PGBOUNCER to its binary)"
# Starts PgBouncer in transaction mode in front of PG_URL's server, runs a command with
# PGBOUNCER_URL set, and stops it after (PGBOUNCER_HOME: where it keeps its files).
SCRIPT = ROOT / "scripts" / "pgbouncer"


def _candidates() -> list[str]:
    # scripts/pgbouncer's own search: PGBOUNCER if set, else the one on PATH, else Debian's.
    if "PGBOUNCER" in os.environ:
        return os.environ["PGBOUNCER"].split()
    return [shutil.which("pgbouncer") or "", "/usr/sbin/pgbouncer"]


def binary() -> str | None:
    """The PgBouncer scripts/pgbouncer would start, None if it finds none."""
    return next((c for c in _candidates() if c and os.access(c, os.X_OK)), None)


def version() -> str:
    """The version PgBouncer gives, e.g. "1.18.0"; "" if it gives none."""
    found = binary()
    if found is None:
        return ""
    said = subprocess.run([found, "--version"], capture_output=True, text=True, check=False).stdout
    first = said.splitlines()[0].split() if said else []
    return first[-1] if first else ""


def under(command: list[str], direct_url: str, env: dict[str, str]) -> tuple[list[str], dict[str, str]]:
    """``command`` and ``env`` to run it behind a private PgBouncer in front of ``direct_url``'s server."""
    return [str(SCRIPT), "run", *command], {**env, "PG_URL": direct_url, "PYTHON": sys.executable}
