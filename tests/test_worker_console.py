"""``runworker`` prints its lines out of the box: a fresh ``startproject`` site without ``LOGGING``."""

from __future__ import annotations

import io
import logging
import os
import subprocess
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from django.conf import settings as django_settings
from django.db import connection

from django_jobqueue import QueueClient
from django_jobqueue.worker.console import console_logging

JOBS = """
from django_jobqueue import Fail, job


@job(name="shop.hello")
def hello():
    return "hi"


@job(name="shop.refuse")
def refuse():
    raise Fail("no such customer")
"""

PROJECT_LOGGING = """
LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "handlers": {"console": {"class": "logging.StreamHandler"}},
    "loggers": {"django_jobqueue": {"handlers": ["console"], "level": "INFO"}},
}
"""

START = "worker shop-worker started"
HELLO = "job shop.hello id="
STOP = "worker shop-worker stopped (burst: no job due)"


def the_test_database() -> dict[str, object]:
    """The test database's settings, for a site that knows nothing of DATABASE_URL."""
    keys = ("ENGINE", "NAME", "USER", "PASSWORD", "HOST", "PORT", "OPTIONS", "DISABLE_SERVER_SIDE_CURSORS")
    return {key: connection.settings_dict[key] for key in keys if key in connection.settings_dict}


@pytest.fixture
def new_site(tmp_path: Path) -> Callable[[str], Path]:
    """``django-admin startproject`` in a temporary directory, with an app of jobs, on the test database."""

    def make(extra_settings: str = "") -> Path:
        site = tmp_path / "site"
        site.mkdir()
        subprocess.run(
            [sys.executable, "-m", "django", "startproject", "mysite", str(site)], check=True, timeout=60
        )
        (site / "shop").mkdir()
        (site / "shop" / "__init__.py").write_text("")
        (site / "shop" / "jobs.py").write_text(JOBS)
        with (site / "mysite" / "settings.py").open("a") as settings:
            settings.write('\nINSTALLED_APPS += ["django_jobqueue", "shop"]\n')
            settings.write(f"DATABASES = {{'default': {the_test_database()!r}}}\n")
            settings.write(extra_settings)
            if django_settings.POOLER_DATABASE:
                # As docs/settings.md tells a site behind a pooler in transaction mode.
                settings.write(
                    '\nJOBQUEUE = {**globals().get("JOBQUEUE", {}), "PREPARED_STATEMENTS": False}\n'
                )
        return site

    return make


def run_burst(site: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {key: value for key, value in os.environ.items() if not key.startswith(("DJANGO_", "DATABASE"))}
    done = subprocess.run(
        [sys.executable, "manage.py", "runworker", "--burst", "--worker-id", "shop-worker", *args],
        cwd=site,
        env={**env, "PYTHONUNBUFFERED": "1"},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    return done


def test_a_fresh_site_prints_the_start_line_each_job_and_the_stop_line(queue: QueueClient, new_site):
    site = new_site()
    job = queue.push("shop.hello", {})
    done = run_burst(site)
    assert done.stdout == ""
    lines = done.stderr.splitlines()
    for expected in (START, f"{HELLO}{job.pk} attempt=1/5", STOP):
        assert sum(expected in line for line in lines) == 1, done.stderr
    assert [line for line in lines if START in line][0].split()[2] == "INFO"
    assert queue.pull(worker_id="w") is None, "the job ran"


def test_verbosity_0_keeps_only_warnings_and_errors(queue: QueueClient, new_site):
    site = new_site()
    queue.push("shop.hello", {})
    refused = queue.push("shop.refuse", {})
    done = run_burst(site, "-v", "0")
    assert START not in done.stderr and STOP not in done.stderr
    assert HELLO not in done.stderr, "a job that went well is not a warning"
    assert f"job shop.refuse id={refused.pk} attempt=1/5" in done.stderr
    assert "outcome=dead moved_to=dead_letters error='Fail: no such customer'" in done.stderr


def test_a_project_that_logs_the_worker_sees_each_line_once(queue: QueueClient, new_site):
    site = new_site(PROJECT_LOGGING)
    job = queue.push("shop.hello", {})
    done = run_burst(site, "-v", "0")  # the project's LOGGING decides, not -v
    output = done.stdout + done.stderr
    for expected in (START, f"{HELLO}{job.pk} ", STOP):
        assert output.count(expected) == 1, output
    # Its own format (the message alone), not ours.
    assert any(line.startswith(START) for line in output.splitlines()), output


@contextmanager
def unconfigured() -> Iterator[None]:
    """In this process, the ``django_jobqueue`` logger as Django's default LOGGING leaves it.

    The test project gives it a handler and pytest gives the root logger one:
    this takes the first away, and stops propagation short of the second.
    Entered inside the test, since pytest also hands its own to a logger that
    does not propagate when a test phase begins.
    """
    logger = logging.getLogger("django_jobqueue")
    handlers, propagate = logger.handlers[:], logger.propagate
    for handler in handlers:
        logger.removeHandler(handler)
    logger.propagate = False
    try:
        yield
    finally:
        logger.propagate = propagate
        for handler in handlers:
            logger.addHandler(handler)


@pytest.mark.parametrize(
    ("verbosity", "shown"),
    [
        (0, {"WARNING"}),
        (1, {"INFO", "WARNING"}),
        (2, {"DEBUG", "INFO", "WARNING"}),
        (3, {"DEBUG", "INFO", "WARNING"}),
    ],
)
def test_verbosity_sets_the_level(verbosity, shown):
    stream = io.StringIO()
    logger = logging.getLogger("django_jobqueue.worker.supervisor")
    with unconfigured(), console_logging(stream, verbosity):
        for level in (logging.DEBUG, logging.INFO, logging.WARNING):
            logger.log(level, "at %s", logging.getLevelName(level))
    printed = {line.rsplit(" ", 1)[-1] for line in stream.getvalue().splitlines()}
    assert printed == shown
    with unconfigured():
        assert not logging.getLogger("django_jobqueue").handlers, "the handler goes when the command ends"


def test_a_handler_on_a_child_logger_counts_as_configured():
    stream = io.StringIO()
    child = logging.getLogger("django_jobqueue.worker.executor")
    own = logging.StreamHandler(io.StringIO())
    child.addHandler(own)
    try:
        with unconfigured(), console_logging(stream, 1):
            child.warning("once")
    finally:
        child.removeHandler(own)
    assert stream.getvalue() == "", "the project's handler prints it; ours would print it twice"
