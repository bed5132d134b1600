"""An idle worker's pickup behind PgBouncer in transaction mode, against the same pickup without it.

Run by ``python -m bench`` in a part process started under ``scripts/pgbouncer
run``, which gives it ``PGBOUNCER_URL``: a private PgBouncer in transaction mode
in front of ``DATABASE_URL``'s server. Each run measures four setups, one idle
``runworker`` (at its defaults) each, in an order that turns run by run:

- *direct*: the worker and the producer (this process's ``enqueue()``) on
  PostgreSQL directly, the worker ``LISTEN``ing on the queue's own connection;
- *direct, pooler's settings*: the same, with the settings a site behind the
  pooler runs with (``PREPARED_STATEMENTS`` off, no server-side cursors): what
  of the pooled pickup's cost is theirs, and what is the pooler's hop;
- *pooled, LISTEN direct*: the worker's and the producer's connections through
  PgBouncer, ``PREPARED_STATEMENTS`` off, and the worker's ``LISTEN`` on a
  direct alias, ``JOBQUEUE["LISTEN_DATABASE"] = "listen"``, as
  docs/deployment.md tells a site behind a pooler to set it;
- *pooled, deaf*: the same without the direct alias: the worker's ``LISTEN``
  through PgBouncer hears nothing, and it finds new jobs by polling, every
  ``--poll-interval`` (1 s at its default). For contrast.

The pickup is ``ours.pickup``'s: seconds from an ``enqueue()``'s commit to the
job starting, ``pickup_jobs`` jobs ``pickup_gap`` apart, measured once the
worker's listener has heard its probe (or, deaf, given up on it).
"""

from __future__ import annotations

import os
import sys
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from django.conf import settings
from django.db import connection
from django.test import override_settings

from . import ours
from .raw import percentile
from .worker import worker_env

Samples = dict[str, list[float]]

SETUPS = ("direct", "direct_unprepared", "pooled_listen", "pooled_deaf")
# What each setup's listener logs once it knows whether it hears (django_jobqueue/worker/services/wakeup.py).
HEARD = r"LISTEN on alias '\w+' heard its probe"
DEAF = r"LISTEN on alias '\w+' heard nothing within"
PERCENTILES = (("p50", 0.5), ("p95", 0.95))


def say(text: str) -> None:
    print(text, file=sys.stderr, flush=True)


def pooled_url() -> str:
    """The queue's database through PgBouncer, from ``scripts/pgbouncer run``."""
    url = os.environ.get("PGBOUNCER_URL", "")
    if not url:
        raise SystemExit("the pooler part runs under scripts/pgbouncer run, which sets PGBOUNCER_URL")
    return url


def worker_env_for(setup: str, url: str, pooled: str) -> dict[str, str]:
    """The environment of the setup's worker: which address it queries, which it LISTENs on."""
    if setup == "direct":
        return worker_env(url)
    # DATABASE_POOLER_URL: testproject/settings.py runs the queue as docs/settings.md advises
    # behind a pooler (no prepared statements, no server-side cursors).
    if setup == "direct_unprepared":
        return worker_env(url, DATABASE_POOLER_URL=url)
    env = worker_env(pooled, DATABASE_POOLER_URL=pooled)
    if setup == "pooled_listen":
        env.update(JOBQUEUE_LISTEN_DATABASE="listen", JOBQUEUE_LISTEN_DATABASE_URL=url)
    else:
        # The LISTEN on the queue's own alias, through the pooler, as a site that set nothing has it.
        for name in ("JOBQUEUE_LISTEN_DATABASE", "JOBQUEUE_LISTEN_DATABASE_URL"):
            env.pop(name, None)
    return env


@contextmanager
def producer_through(url: str, pooled: bool) -> Iterator[None]:
    """This process's ``enqueue()`` on ``url``'s host and port; ``pooled``: with the pooler's settings."""
    parts = urlsplit(url)
    address = {"HOST": parts.hostname or "", "PORT": str(parts.port or "")}
    before = {key: connection.settings_dict[key] for key in address}
    connection.close()
    connection.settings_dict.update(address)
    jobqueue: dict[str, Any] = {**settings.JOBQUEUE, "PREPARED_STATEMENTS": not pooled}
    try:
        with override_settings(JOBQUEUE=jobqueue):
            yield
    finally:
        connection.close()
        connection.settings_dict.update(before)


def measure(cfg: dict[str, Any], url: str, samples: Samples) -> None:
    """Each setup's pickup p50 and p95 (ms), run by run, into ``pooler_{setup}_{p50|p95}``."""
    pooled = pooled_url()
    with tempfile.TemporaryDirectory(prefix="jq-bench-") as tmp:
        for run in range(cfg["runs"]):
            say(f"pooler run {run + 1}/{cfg['runs']}")
            turn = run % len(SETUPS)
            for setup in SETUPS[turn:] + SETUPS[:turn]:
                ready = DEAF if setup == "pooled_deaf" else HEARD
                address = url if setup.startswith("direct") else pooled
                with producer_through(address, pooled=setup != "direct"):
                    latencies = ours.pickup(
                        worker_env_for(setup, url, pooled),
                        cfg["pickup_jobs"],
                        cfg["pickup_gap"],
                        Path(tmp),
                        ready=ready,
                    )
                for label, fraction in PERCENTILES:
                    samples[f"pooler_{setup}_{label}"].append(percentile(latencies, fraction) * 1000)
                say(
                    f"  {setup}: p50 {samples[f'pooler_{setup}_p50'][-1]:.2f} ms, "
                    f"p95 {samples[f'pooler_{setup}_p95'][-1]:.2f} ms"
                )
