"""``perform``: one job function called as a worker calls it, with no row; and the ``jobqueue`` fixture."""

from __future__ import annotations

import math
import os
import subprocess
import sys
import textwrap
import tomllib
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from asgiref.sync import async_to_sync, sync_to_async
from django.contrib.auth.models import Group
from django.test import TestCase

from django_jobqueue import JobPayloadError, Retry, UnknownJobError, enqueue
from django_jobqueue.models import Job
from django_jobqueue.testing import perform
from django_jobqueue.testing.plugin import jobqueue  # noqa: F401 - the fixture, for the tests below
from tests import jobs_for_testing_kit
from tests.jobs_for_testing_kit import atomic_group, coroutine, kinds, pair, send_receipt, when, with_context

pytestmark = pytest.mark.django_db

ROOT = Path(__file__).resolve().parent.parent


def test_it_calls_the_job_and_returns_what_it_returned():
    assert perform(send_receipt, order_id=7, lines=[1]) == {"order_id": 7, "lines": [1], "copy": False}
    assert perform("kit.send_receipt", order_id=7, copy=True)["copy"] is True
    assert not Job.objects.exists(), "nothing is enqueued"


def test_the_result_comes_back_as_stored_through_json():
    assert perform(pair, a=1, b=2) == [1, 2], "a tuple is stored as a JSON list"
    assert perform("kit.report") is None


def test_a_result_json_cannot_carry_raises_what_the_ack_would():
    with pytest.raises(JobPayloadError, match="result is a datetime, which JSON cannot carry"):
        perform(when)


def test_the_arguments_reach_the_job_through_json():
    assert perform(kinds, items=(1, 2), number=1.0, flag=True, nothing=None) == {
        "items": "list",
        "number": "float",
        "flag": "bool",
        "nothing": "NoneType",
    }


def refusal(call: Callable[[], Any]) -> tuple[type[BaseException], str]:
    with pytest.raises(Exception) as raised:
        call()
    return type(raised.value), str(raised.value)


@pytest.mark.parametrize(
    "payload",
    [
        pytest.param({}, id="missing"),
        pytest.param({"order_id": 1, "nope": 2}, id="unexpected"),
        pytest.param({"order_id": datetime(2026, 1, 1, tzinfo=UTC)}, id="a datetime"),
        pytest.param({"order_id": math.nan}, id="NaN"),
        pytest.param({"order_id": "a\x00b"}, id="a NUL"),
        pytest.param({"order_id": 1, "lines": [{1: "a"}]}, id="a key that is not a string"),
    ],
)
def test_it_refuses_what_enqueue_refuses_with_the_same_exception(payload):
    by_enqueue = refusal(lambda: enqueue("kit.send_receipt", payload))
    by_perform = refusal(lambda: perform(send_receipt, **payload))

    assert by_perform == by_enqueue
    assert by_perform[0] is JobPayloadError
    assert not Job.objects.exists()


def test_a_bad_name_is_refused_as_enqueue_refuses_it():
    assert refusal(lambda: perform("")) == refusal(lambda: enqueue("", {}))
    assert refusal(lambda: perform("kit.\x00")) == refusal(lambda: enqueue("kit.\x00", {}))


def test_a_name_nobody_registered_or_a_plain_function_is_refused():
    with pytest.raises(UnknownJobError, match="no job registered as 'kit.nobody'"):
        perform("kit.nobody")
    with pytest.raises(TypeError, match="perform takes a @job function or a job name, not function"):
        perform(send_receipt.__wrapped__, order_id=1)


def test_a_job_that_takes_a_context_gets_a_real_one_for_its_first_attempt():
    result = perform(with_context, steps=4)

    assert result == {
        "attempt": 1,
        "worker_id": "perform",
        "cancelled": False,
        "extended": True,
        "id": None,
        "queue": "default",
        "max_attempts": 3,
        "timeout": 60.0,
        "payload": {"steps": 4},
    }
    ctx = jobs_for_testing_kit.contexts[-1]
    assert type(ctx).__name__ == "JobContext"
    assert ctx.job.progress == {"current": 4, "total": 4, "message": "step 4"}, "the latest report is kept"
    assert ctx.job.pk is None and not Job.objects.exists()


def test_the_context_checks_what_a_worker_checks():
    perform(with_context, steps=0)
    ctx = jobs_for_testing_kit.contexts[-1]

    with pytest.raises(ValueError, match="current"):
        ctx.progress(-1)
    with pytest.raises(ValueError, match="extension must be more than 0 seconds"):
        ctx.extend_visibility(0)


def test_what_the_job_raises_reaches_the_caller():
    with pytest.raises(Retry, match="the provider is down"):
        perform("kit.retrying")


def test_an_atomic_job_runs_in_a_transaction_its_failure_rolls_back():
    assert perform(atomic_group, name="kept") == Group.objects.get(name="kept").pk

    with pytest.raises(ValueError, match="gone failed after its write"):
        perform(atomic_group, name="gone", fail=True)
    assert not Group.objects.filter(name="gone").exists()


def test_an_async_job_is_awaited_as_on_a_worker():
    # Its acreate runs on this test's connection: the row it wrote is seen here, in the test's
    # transaction, and rolled back with it.
    assert perform(coroutine, value=1) == 2
    assert Group.objects.filter(name="coroutine-1").exists()


def test_perform_from_async_code_goes_through_sync_to_async():
    async def from_async_code() -> Any:
        return await sync_to_async(perform)(coroutine, value=5)

    assert async_to_sync(from_async_code)() == 6


def test_the_fixture_has_the_kit_as_methods(jobqueue):  # noqa: F811 - the fixture imported above
    send_receipt.enqueue(order_id=7)

    jobqueue.assert_enqueued(send_receipt, args={"order_id": 7})
    jobqueue.assert_not_enqueued("kit.report")
    assert [job.payload for job in jobqueue.enqueued(send_receipt)] == [{"order_id": 7}]
    assert jobqueue.perform(pair, a=1, b=2) == [1, 2]


class InsideATestCase(TestCase):
    def test_perform_and_its_refusals(self) -> None:
        self.assertEqual(perform(pair, a=3, b=4), [3, 4])
        self.assertEqual(perform(with_context, steps=1)["attempt"], 1)
        with self.assertRaisesMessage(JobPayloadError, "missing argument(s) 'order_id'"):
            perform(send_receipt)
        self.assertEqual(perform(atomic_group, name="in a TestCase"), Group.objects.get().pk)
        self.assertFalse(Job.objects.exists())


# -- the pytest plugin, loaded as pytest loads it: in a project of its own -----------------------


def entry_points() -> dict[str, str]:
    """The ``pytest11`` entry points that pyproject.toml declares."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    return project["entry-points"]["pytest11"]


def test_the_entry_point_names_the_plugin():
    assert entry_points() == {"django_jobqueue": "django_jobqueue.testing.plugin"}


def run_pytest(where: Path, *args: str, autoload: bool = False) -> subprocess.CompletedProcess[str]:
    """pytest in ``where``: with only the plugins named in ``args``, or also those of entry points."""
    environment = {
        key: value
        for key, value in os.environ.items()
        if not key.startswith(("DJANGO_", "PYTEST_", "DATABASE_URL", "SQLITE_TEST_FILE"))
    }
    environment["PYTHONPATH"] = f"{where}{os.pathsep}{ROOT}"
    if not autoload:
        environment["PYTEST_DISABLE_PLUGIN_AUTOLOAD"] = "1"
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-q", *args],
        cwd=where,
        env=environment,
        capture_output=True,
        text=True,
        timeout=120,
    )


ANOTHER_PROJECT_SETTINGS = """
SECRET_KEY = "another project"
INSTALLED_APPS = ["django.contrib.contenttypes", "django.contrib.auth", "django_jobqueue"]
DATABASES = {"default": {"ENGINE": "django.db.backends.sqlite3", "NAME": "db.sqlite3"}}
USE_TZ = True
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"
"""

ANOTHER_PROJECTS_TESTS = """
import pytest
from django.db import connection

from django_jobqueue import job


@job(name="shop.send_receipt", queue="mail")
def send_receipt(order_id):
    return (order_id, "sent")


def test_the_fixture_in_the_tests_transaction(jobqueue):
    assert connection.in_atomic_block
    send_receipt.enqueue(order_id=7)
    jobqueue.assert_enqueued("shop.send_receipt", args={"order_id": 7}, queue="mail")
    assert [job.payload for job in jobqueue.enqueued()] == [{"order_id": 7}]
    assert jobqueue.perform(send_receipt, order_id=7) == [7, "sent"]


def test_a_rolled_back_test_left_no_row(jobqueue):
    jobqueue.assert_not_enqueued()


@pytest.mark.django_db(transaction=True)
def test_the_fixture_in_a_transactional_test(jobqueue):
    assert not connection.in_atomic_block
    send_receipt.enqueue(order_id=8)
    jobqueue.assert_enqueued(send_receipt, count=1)


def test_the_fixture_beside_transactional_db(jobqueue, transactional_db):
    assert not connection.in_atomic_block
    jobqueue.assert_not_enqueued()
"""


def test_the_fixture_works_in_another_project(tmp_path):
    (tmp_path / "another_settings.py").write_text(ANOTHER_PROJECT_SETTINGS)
    (tmp_path / "test_shop.py").write_text(textwrap.dedent(ANOTHER_PROJECTS_TESTS))

    run = run_pytest(
        tmp_path,
        "-p",
        "pytest_django.plugin",
        "-p",
        "django_jobqueue.testing.plugin",
        "--ds",
        "another_settings",
        "test_shop.py",
    )

    assert run.returncode == 0, run.stdout + run.stderr
    assert "4 passed" in run.stdout


def test_the_entry_point_loads_the_fixture(tmp_path):
    # An installed distribution declaring pyproject.toml's entry points, as pip would write it: pytest
    # loads the plugin with nothing named on its command line. (Named there as well, with "-p
    # django_jobqueue.testing.plugin", pytest would refuse to register the module twice.)
    declared = "".join(f"{name} = {target}\n" for name, target in entry_points().items())
    info = tmp_path / "django_jobqueue_kit-0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: django-jobqueue-kit\nVersion: 0\n")
    (info / "entry_points.txt").write_text(f"[pytest11]\n{declared}")
    (tmp_path / "another_settings.py").write_text(ANOTHER_PROJECT_SETTINGS)
    (tmp_path / "test_shop.py").write_text(textwrap.dedent(ANOTHER_PROJECTS_TESTS))

    run = run_pytest(tmp_path, "--ds", "another_settings", "test_shop.py", autoload=True)

    assert run.returncode == 0, run.stdout + run.stderr
    assert "4 passed" in run.stdout


def test_the_plugin_is_harmless_without_django(tmp_path):
    (tmp_path / "test_plain.py").write_text(
        textwrap.dedent(
            """
            import sys

            def test_nothing_of_django_was_imported():
                assert "django_jobqueue.testing.plugin" in sys.modules
                assert not [name for name in sys.modules if name.startswith("django.")]
                assert "django_jobqueue.models" not in sys.modules
            """
        )
    )

    run = run_pytest(tmp_path, "-p", "django_jobqueue.testing.plugin", "test_plain.py")

    assert run.returncode == 0, run.stdout + run.stderr
    assert "1 passed" in run.stdout
