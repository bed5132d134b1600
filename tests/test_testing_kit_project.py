"""The testing kit from a project that is not this repository: its own settings, jobs and tests.

A fresh project in a temporary folder, as ``startproject`` leaves it plus the
app, runs its own pytest in a process of its own. The ``jobqueue`` fixture
comes from the installed package's pytest plugin (its entry point), not from
anything of this repository's test configuration.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

SETTINGS = """
SECRET_KEY = "not secret"
USE_TZ = True
INSTALLED_APPS = [
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django_jobqueue",
    "shop",
]
DATABASES = {{"default": {database}}}
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"
JOBQUEUE = {{"MODULES": ["shop.jobs"]}}
"""

JOBS = """
from django.contrib.auth.models import User

from django_jobqueue import job

SENT = []


@job(queue="mail")
def send_welcome(user_id: int) -> str:
    user = User.objects.get(pk=user_id)
    SENT.append(user.username)
    return f"welcome {user.username}"


@job(max_attempts=2)
def flaky() -> None:
    raise ConnectionError("partner API down")
"""

TESTS = """
import pytest
from django.contrib.auth.models import User
from django.test import TestCase

from django_jobqueue.models import Job
from shop.jobs import SENT, flaky, send_welcome


def test_the_fixture_runs_the_jobs_of_the_test(jobqueue):
    user = User.objects.create(username="ada")
    send_welcome.enqueue(user_id=user.pk)

    jobqueue.assert_enqueued(send_welcome, args={"user_id": user.pk}, queue="mail")
    report = jobqueue.run_jobs()

    assert list(report.results.values()) == ["welcome ada"] and SENT[-1] == "ada"


def test_a_failing_job_raises_then_dead_letters(jobqueue):
    flaky.enqueue()
    with pytest.raises(ConnectionError, match="partner API down"):
        jobqueue.run_jobs()
    report = jobqueue.run_jobs(scheduled=True, raise_errors=False)
    assert len(report.dead) == 1


def test_the_rolled_back_tests_left_no_row(db):
    assert not Job.objects.exists() and not User.objects.exists()


class InATestCase(TestCase):
    def test_run_jobs_in_a_test_case(self):
        from django_jobqueue.testing import run_jobs

        send_welcome.enqueue(user_id=User.objects.create(username="grace").pk)
        self.assertEqual(len(run_jobs().done), 1)
"""


def project_database(tmp_path: Path) -> str:
    """The project's database: this suite's PostgreSQL server when it runs on one, else SQLite."""
    url = os.environ.get("DATABASE_URL", "")
    if url.startswith(("postgres://", "postgresql://")):
        import environ

        config = environ.Env.db_url_config(url)
        config["NAME"] = f"{config['NAME']}_kit_project"
        config["TEST"] = {"NAME": f"test_{config['NAME']}"}
        return repr(config)
    return repr({"ENGINE": "django.db.backends.sqlite3", "NAME": str(tmp_path / "db.sqlite3")})


def test_a_project_of_its_own_gets_the_fixture_from_the_installed_plugin(tmp_path):
    shop = tmp_path / "shop"
    shop.mkdir()
    (shop / "__init__.py").write_text("")
    (shop / "jobs.py").write_text(JOBS)
    (tmp_path / "project_settings.py").write_text(SETTINGS.format(database=project_database(tmp_path)))
    (tmp_path / "test_shop.py").write_text(TESTS)
    # The project's own pytest configuration, as pytest-django asks for it; nothing of ours.
    (tmp_path / "pytest.ini").write_text("[pytest]\nDJANGO_SETTINGS_MODULE = project_settings\n")
    env = {key: value for key, value in os.environ.items() if not key.startswith(("DJANGO_", "DATABASE_URL"))}
    # The package as installed (editable here), and the project: nothing else of this repository.
    env["PYTHONPATH"] = str(tmp_path)

    run = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-q",
            "-p",
            "no:cacheprovider",
            "--rootdir",
            str(tmp_path),
            str(tmp_path),
        ],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )

    assert run.returncode == 0, run.stdout[-4000:] + run.stderr[-2000:]
    assert "4 passed" in run.stdout, run.stdout[-2000:]
