"""Settings of the example project: the demo, the test suite and the benchmark.

Configured from the environment with django-environ. ``DATABASE_URL`` picks the
database: a SQLite file by default, or PostgreSQL, for example
``postgres://postgres@127.0.0.1:5432/jobqueue``. ``DATABASE_POOLER_URL`` says
that the same database is reached through a pooler in transaction mode
(``scripts/pgbouncer``): the queue then runs as docs/settings.md advises there.
"""

from importlib.util import find_spec
from pathlib import Path

import environ

BASE_DIR = Path(__file__).resolve().parent.parent
VAR_DIR = BASE_DIR / "var"
VAR_DIR.mkdir(exist_ok=True)

env = environ.Env()
environ.Env.read_env(BASE_DIR / ".env")  # optional; the environment wins

SECRET_KEY = env.str("SECRET_KEY", default="insecure-key-for-the-example-project-only")
DEBUG = env.bool("DEBUG", default=True)
ALLOWED_HOSTS = env.list("ALLOWED_HOSTS", default=["localhost", "127.0.0.1"])

INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "django_jobqueue",
    "testproject.demo",
]

MIDDLEWARE = [
    "django.middleware.security.SecurityMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
]

ROOT_URLCONF = "testproject.urls"

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
            ],
        },
    },
]

WSGI_APPLICATION = "testproject.wsgi.application"

DATABASES = {"default": env.db("DATABASE_URL", default=f"sqlite:///{VAR_DIR / 'db.sqlite3'}")}
if DATABASES["default"]["ENGINE"] == "django.db.backends.sqlite3":
    DATABASES["default"].setdefault("OPTIONS", {}).update(
        {
            # BEGIN IMMEDIATE: a transaction takes the write lock up front, so two
            # writers queue up behind each other instead of failing.
            "transaction_mode": "IMMEDIATE",
            "timeout": 30,
            "init_command": "PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL;",
        }
    )
    # A file, not memory, so that worker processes started by tests share it.
    DATABASES["default"]["TEST"] = {
        "NAME": env.str("SQLITE_TEST_FILE", default=str(VAR_DIR / "test.sqlite3"))
    }

# A second queue database (docs/scaling.md), for the tests of several databases:
# default's server, a database of its own; its jobs are served by
# `runworker --database second` once JOBQUEUE_DATABASES=second lists it.
DATABASES["second"] = {
    **DATABASES["default"],
    "NAME": f"{DATABASES['default']['NAME']}_second",
    "TEST": {"NAME": None},
}
if DATABASES["default"]["ENGINE"] == "django.db.backends.sqlite3":
    test_file = Path(DATABASES["default"]["TEST"]["NAME"])
    DATABASES["second"]["NAME"] = str(VAR_DIR / "second.sqlite3")
    DATABASES["second"]["TEST"] = {
        "NAME": str(test_file.with_name(f"{test_file.stem}-second{test_file.suffix}"))
    }
if second_url := env.str("JOBQUEUE_SECOND_DATABASE_URL", default=""):
    DATABASES["second"] = {**env.db_url_config(second_url), "TEST": DATABASES["second"]["TEST"]}

if DATABASES["default"]["ENGINE"] == "django.db.backends.postgresql":
    # A second connection, used only for a worker's LISTEN when JOBQUEUE_LISTEN_DATABASE=listen:
    # the queue's own database by default (the tests' direct connection beside a pooled one),
    # or JOBQUEUE_LISTEN_DATABASE_URL's, which the tests point at another database to make a
    # LISTEN deaf, as a pooler in transaction mode does.
    DATABASES["listen"] = env.db("JOBQUEUE_LISTEN_DATABASE_URL", default=env.str("DATABASE_URL"))
    DATABASES["listen"]["TEST"] = {"MIRROR": "default"}

# Behind a pooler in transaction mode (PgBouncer's pool_mode = transaction) a
# session's prepared statements and cursors do not outlive its transaction.
# The test suite creates its database on DATABASE_URL and then runs through
# the pooler (tests/conftest.py); the processes it starts get the pooled
# address as DATABASE_URL and DATABASE_POOLER_URL as it was.
POOLER_DATABASE = env.db("DATABASE_POOLER_URL") if env.str("DATABASE_POOLER_URL", default="") else None
if POOLER_DATABASE:
    DATABASES["default"]["DISABLE_SERVER_SIDE_CURSORS"] = True

DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"
USE_TZ = True
TIME_ZONE = "UTC"
LANGUAGE_CODE = "en-us"
USE_I18N = True
STATIC_URL = "static/"

JOBQUEUE = {
    "VISIBILITY_TIMEOUT": env.float("JOBQUEUE_VISIBILITY_TIMEOUT", default=30.0),
    "KEEP_COMPLETED": env.float("JOBQUEUE_KEEP_COMPLETED", default=86400.0),
    # Extra modules of @job functions for runworker; the tests add theirs here.
    "MODULES": env.list("JOBQUEUE_MODULES", default=[]),
    # Django Tasks outside the installed apps that workers may import: the test suite's.
    "TASK_MODULES": env.list("JOBQUEUE_TASK_MODULES", default=["tests.tasks_for_workers"]),
    # The demo shortens the backoff so that retries happen within seconds.
    "MAX_ATTEMPTS": env.int("JOBQUEUE_MAX_ATTEMPTS", default=5),
    "BACKOFF_BASE": env.float("JOBQUEUE_BACKOFF_BASE", default=1.0),
    "BACKOFF_MAX": env.float("JOBQUEUE_BACKOFF_MAX", default=3600.0),
    # Periodic jobs (docs/schedules.md), as JSON; the tests' workers get theirs here.
    "SCHEDULES": env.json("JOBQUEUE_SCHEDULES", default={}),
    "SCHEDULE_GRACE": env.float("JOBQUEUE_SCHEDULE_GRACE", default=60.0),
    # Flow control's queue caps and rate limits (docs/flow-control.md), as JSON.
    "QUEUES": env.json("JOBQUEUE_QUEUES", default={}),
    # The worker rounds' synchronous_commit on PostgreSQL (docs/guarantees.md).
    "WORKER_SYNCHRONOUS_COMMIT": env.str("JOBQUEUE_WORKER_SYNCHRONOUS_COMMIT", default="off"),
    "PREPARED_STATEMENTS": not POOLER_DATABASE,
    # Queue databases besides default (docs/scaling.md): the tests of several set "second".
    "DATABASES": env.list("JOBQUEUE_DATABASES", default=[]),
}

# The alias of a worker's LISTEN (docs/settings.md): unset, the queue's own; "none", poll only.
if listen := env.str("JOBQUEUE_LISTEN_DATABASE", default=""):
    JOBQUEUE["LISTEN_DATABASE"] = None if listen.lower() == "none" else listen

# Django's Tasks framework runs on the queue: django.tasks on Django 6, the
# django-tasks backport (an app of its own, for its checks) on Django 5.2.
if find_spec("django.tasks") is None and find_spec("django_tasks") is not None:
    INSTALLED_APPS.append("django_tasks")
TASKS = {
    "default": {
        "BACKEND": "django_jobqueue.backends.JobQueueBackend",
        "QUEUES": ["default", "tasks", "tasks-urgent"],
    }
}

# JOBQUEUE_PROJECT_LOGGING=0 leaves LOGGING unset, as on a fresh startproject site: runworker then
# prints through its own console handler (the tests of --log-format json).
LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "formatters": {"plain": {"format": "%(asctime)s %(levelname)s %(name)s: %(message)s"}},
    "handlers": {"console": {"class": "logging.StreamHandler", "formatter": "plain"}},
    "loggers": {
        "django_jobqueue": {
            "handlers": ["console"],
            "level": env.str("JOBQUEUE_LOG_LEVEL", default="INFO"),
        }
    },
}
if not env.bool("JOBQUEUE_PROJECT_LOGGING", default=True):
    del LOGGING
