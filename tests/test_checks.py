"""System checks for the JOBQUEUE setting."""

from __future__ import annotations

import pytest
from django.test.utils import override_settings

from django_jobqueue.checks import check_jobqueue_settings, listen_database_errors, sqlite_version_errors
from django_jobqueue.conf import QUEUE_DATABASE, listen_alias


def ids(**jobqueue: object) -> list[str]:
    with override_settings(JOBQUEUE=jobqueue):
        return [message.id for message in check_jobqueue_settings()]


def test_defaults_pass():
    assert ids() == []


@pytest.mark.parametrize(
    ("setting", "check_id"),
    [
        ({"DATABASE": "missing"}, "django_jobqueue.E002"),
        ({"DEFAULT_QUEUE": "bad queue"}, "django_jobqueue.E003"),
        ({"MAX_ATTEMPTS": 0}, "django_jobqueue.E004"),
        ({"VISIBILITY_TIMEOUT": 0}, "django_jobqueue.E005"),
        ({"VISIBILITY_TIMEOUT": 10**12}, "django_jobqueue.E005"),
        ({"VISIBILITY_TIMEOUT": 0.05}, "django_jobqueue.E005"),
        ({"VISIBILITY_TIMEOUT": 1e-9}, "django_jobqueue.E005"),
        ({"POLL_INTERVAL": 1e-9}, "django_jobqueue.E005"),
        ({"POLL_INTERVAL": 1e10}, "django_jobqueue.E005"),
        ({"POLL_INTERVAL": float("nan")}, "django_jobqueue.E005"),
        ({"TASK_MODULES": "myapp.tasks"}, "django_jobqueue.E010"),
        ({"TASK_MODULES": [""]}, "django_jobqueue.E010"),
        ({"BACKOFF_BASE": -1}, "django_jobqueue.E005"),
        ({"POLL_INTERVAL": "1"}, "django_jobqueue.E005"),
        ({"KEEP_COMPLETED": -1}, "django_jobqueue.E006"),
        ({"MODULES": "myapp.jobs"}, "django_jobqueue.E007"),
        ({"PREPARED_STATEMENTS": "yes"}, "django_jobqueue.E009"),
        ({"WORKER_SYNCHRONOUS_COMMIT": "OFF"}, "django_jobqueue.E016"),
        ({"WORKER_SYNCHRONOUS_COMMIT": False}, "django_jobqueue.E016"),
        ({"VISIBILTY_TIMEOUT": 5}, "django_jobqueue.W001"),
        ({"QUEUES": ["emails"]}, "django_jobqueue.E014"),
        ({"QUEUES": {"emails": {"concurrency": 0}}}, "django_jobqueue.E014"),
        ({"QUEUES": {"emails": {"concurrency": True}}}, "django_jobqueue.E014"),
        ({"QUEUES": {"emails": {"rate_limit": "100/d"}}}, "django_jobqueue.E014"),
        ({"QUEUES": {"emails": {"rate_limit": 100}}}, "django_jobqueue.E014"),
        ({"QUEUES": {"emails": {"burst": 5}}}, "django_jobqueue.E014"),
        ({"QUEUES": {"emails": 10}}, "django_jobqueue.E014"),
        ({"QUEUES": {"no spaces": {"concurrency": 1}}}, "django_jobqueue.E014"),
    ],
)
def test_bad_settings_are_reported(setting, check_id):
    assert check_id in ids(**setting)


def test_local_naive_times_are_warned_about():
    with override_settings(USE_TZ=False, TIME_ZONE="America/New_York"):
        assert [m.id for m in check_jobqueue_settings()] == ["django_jobqueue.W002"]


def test_the_floors_and_bounds_themselves_pass():
    assert ids(VISIBILITY_TIMEOUT=1, POLL_INTERVAL=0.01, TASK_MODULES=["myapp.tasks"]) == []
    assert ids(POLL_INTERVAL=86400) == []


def test_a_visibility_timeout_below_the_floor_is_explained():
    with override_settings(JOBQUEUE={"VISIBILITY_TIMEOUT": 0.05}):
        [message] = check_jobqueue_settings()
    assert message.msg == (
        "JOBQUEUE['VISIBILITY_TIMEOUT']: VISIBILITY_TIMEOUT must be at least 1 second, got 0.05: "
        "a shorter claim expires before the heartbeat can extend it."
    )


def test_good_queue_limits_pass():
    queues = {"emails": {"concurrency": 10, "rate_limit": "100/m"}, "sms": {"rate_limit": "5/s"}, "x": {}}
    assert ids(QUEUES=queues) == []
    assert ids(QUEUES=None) == []


def test_each_bad_queue_is_one_error_naming_it_and_its_option():
    queues = {
        "emails": {"concurrency": 0},
        "ok": {"concurrency": 3},
        "sms": {"rate_limit": "5/d"},
        "bad name": {},
        "webhooks": {"burst": 2},
    }
    with override_settings(JOBQUEUE={"QUEUES": queues}):
        messages = check_jobqueue_settings()
    assert {m.id for m in messages} == {"django_jobqueue.E014"}
    assert {m.hint for m in messages} == {"See docs/flow-control.md."}
    assert [m.msg for m in messages] == [
        "JOBQUEUE['QUEUES']['emails']['concurrency'] must be a whole number from 1 to 100,000, not 0.",
        "JOBQUEUE['QUEUES']['sms']['rate_limit'] must be a string like '100/m' (N per s, m or h), not '5/d'.",
        "JOBQUEUE['QUEUES']['bad name']: queue name 'bad name' may hold only letters, digits, '_', '-', "
        "'.' and ':'.",
        "JOBQUEUE['QUEUES']['webhooks'] has unknown options ['burst']; it takes 'concurrency' and "
        "'rate_limit'.",
    ]


def test_queues_that_is_not_a_dict_is_one_error():
    with override_settings(JOBQUEUE={"QUEUES": ["emails"]}):
        [message] = check_jobqueue_settings()
    assert message.msg == "JOBQUEUE['QUEUES'] must be a dict of queue name -> options."


SQLITE_DATABASES = {"default": {"ENGINE": "django.db.backends.sqlite3", "NAME": ":memory:"}}
POSTGRES_DATABASES = {"default": {"ENGINE": "django.db.backends.postgresql", "NAME": "x"}}


@pytest.mark.parametrize(
    ("databases", "version", "check_ids"),
    [
        (SQLITE_DATABASES, (3, 34, 1), ["django_jobqueue.E017"]),
        (SQLITE_DATABASES, (3, 35, 0), []),
        (POSTGRES_DATABASES, (3, 34, 1), []),
    ],
)
def test_an_sqlite_without_returning_is_refused(databases, version, check_ids):
    assert [message.id for message in sqlite_version_errors(version, databases)] == check_ids


LISTEN_DATABASES = {
    "default": {"ENGINE": "django.db.backends.postgresql", "NAME": "shop"},
    "direct": {"ENGINE": "django.db.backends.postgresql", "NAME": "shop", "HOST": "db-primary"},
    "reports": {"ENGINE": "django.db.backends.postgresql", "NAME": "reports"},
    "lite": {"ENGINE": "django.db.backends.sqlite3", "NAME": ":memory:"},
}


@pytest.mark.parametrize(
    ("value", "check_ids"),
    [
        (None, []),
        ("direct", []),
        ("default", []),
        ({"default": "direct", "reports": None}, []),
        ("nowhere", ["django_jobqueue.E018"]),
        (["direct"], ["django_jobqueue.E018"]),
        ({"default": 3}, ["django_jobqueue.E018"]),
        ({"elsewhere": "direct"}, ["django_jobqueue.E018"]),
        ("lite", ["django_jobqueue.E018"]),
        ("reports", ["django_jobqueue.W003"]),
        ({"default": "direct", "reports": "direct"}, ["django_jobqueue.W003"]),
    ],
)
def test_listen_database_must_reach_the_queues_database(value, check_ids):
    with override_settings(JOBQUEUE={"LISTEN_DATABASE": value}):
        assert [message.id for message in listen_database_errors(LISTEN_DATABASES)] == check_ids


def test_listen_database_on_an_sqlite_queue_needs_only_an_alias():
    databases = {"default": LISTEN_DATABASES["lite"], "direct": LISTEN_DATABASES["direct"]}
    with override_settings(JOBQUEUE={"LISTEN_DATABASE": "direct"}):
        assert listen_database_errors(databases) == []
    with override_settings(JOBQUEUE={"LISTEN_DATABASE": "nowhere"}):
        [error] = listen_database_errors(databases)
    assert error.msg == "JOBQUEUE['LISTEN_DATABASE'] is 'nowhere', not a key of DATABASES nor None."


def test_a_listen_database_of_another_database_says_why_it_is_wrong():
    with override_settings(JOBQUEUE={"LISTEN_DATABASE": {"default": "reports"}}):
        [warning] = listen_database_errors(LISTEN_DATABASES)
    assert warning.msg.startswith(
        "JOBQUEUE['LISTEN_DATABASE']['default'] is 'reports', which connects to database 'reports', "
        "and the queue's 'default' to 'shop'"
    )


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        (QUEUE_DATABASE, {"default": "default", "reports": "reports"}),
        (None, {"default": None, "reports": None}),
        # A string is the queue database's: a worker of another alias LISTENs on its own.
        ("direct", {"default": "direct", "reports": "reports"}),
        ({"reports": "reports-direct"}, {"default": "default", "reports": "reports-direct"}),
        ({"default": None}, {"default": None, "reports": "reports"}),
    ],
)
def test_the_alias_a_worker_listens_on(value, expected):
    with override_settings(JOBQUEUE={"LISTEN_DATABASE": value}):
        assert {using: listen_alias(using) for using in expected} == expected
