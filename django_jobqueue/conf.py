"""Read-through access to the ``JOBQUEUE`` setting.

Each attribute is read from ``settings.JOBQUEUE`` on every access, so
``override_settings`` and settings changed at start-up are always seen. The
values are checked by the system checks in ``checks.py``.
"""

from __future__ import annotations

from typing import Any

from django.conf import settings as django_settings


class QueueDatabase:
    """The default of ``LISTEN_DATABASE``: each queue database LISTENs on its own connection."""

    def __repr__(self) -> str:
        return "<the queue's own database>"


QUEUE_DATABASE = QueueDatabase()

DEFAULTS: dict[str, Any] = {
    "DATABASE": "default",
    # Every other database that holds a queue of its own (docs/scaling.md): the admin shows each,
    # the metrics view labels each, runworker --database serves each, the router migrates each.
    "DATABASES": [],
    "DEFAULT_QUEUE": "default",
    "VISIBILITY_TIMEOUT": 30.0,
    # Seconds one attempt of a job may run, for jobs whose @job and enqueue give none; None = no limit.
    "TIMEOUT": None,
    "MAX_ATTEMPTS": 5,
    "BACKOFF_BASE": 1.0,
    "BACKOFF_MAX": 3600.0,
    "KEEP_COMPLETED": 86400,
    "MAX_PAYLOAD_BYTES": 1_000_000,
    "POLL_INTERVAL": 1.0,
    "MODULES": [],
    # Modules (or packages) outside the installed apps whose Django Tasks a worker may import.
    "TASK_MODULES": [],
    # Payload keys (at any depth, any case) whose values the admin shows as "[redacted]".
    "REDACT_PAYLOAD_KEYS": [],
    # PostgreSQL: the per-job statements (enqueue, claim, ack) prepared, planned once per connection.
    "PREPARED_STATEMENTS": True,
    # PostgreSQL: synchronous_commit of a worker's rounds (its claims and acks); None = the
    # database's own. Every write of a round is redone if a database crash undoes it.
    "WORKER_SYNCHRONOUS_COMMIT": "off",
    # PostgreSQL: the alias a worker LISTENs on for wake-ups (a direct connection, when the queue's
    # goes through a pooler in transaction mode); None = poll only. A dict maps each queue
    # database's alias to its own; one it leaves out LISTENs on itself.
    "LISTEN_DATABASE": QUEUE_DATABASE,
    # Periodic jobs: name -> {"job", "cron" | "every", ...} (schedules.py, docs/schedules.md).
    "SCHEDULES": {},
    # Seconds a fire time may be late and still count as on time rather than
    # missed during downtime (which catch_up then decides).
    "SCHEDULE_GRACE": 60.0,
    # Flow control, fleet-wide: queue -> {"concurrency": N, "rate_limit": "N/s"} (docs/flow-control.md).
    "QUEUES": {},
    # The bearer token that lets a scraper read django_jobqueue.views.metrics; None = staff sessions only.
    "METRICS_TOKEN": None,
}


class JobQueueSettings:
    """The ``JOBQUEUE`` dictionary, with defaults filled in."""

    DATABASE: str
    DATABASES: list[str]
    DEFAULT_QUEUE: str
    VISIBILITY_TIMEOUT: float
    TIMEOUT: float | None
    MAX_ATTEMPTS: int
    BACKOFF_BASE: float
    BACKOFF_MAX: float
    KEEP_COMPLETED: float
    MAX_PAYLOAD_BYTES: int
    POLL_INTERVAL: float
    MODULES: list[str]
    TASK_MODULES: list[str]
    REDACT_PAYLOAD_KEYS: list[str]
    PREPARED_STATEMENTS: bool
    WORKER_SYNCHRONOUS_COMMIT: str | None
    LISTEN_DATABASE: str | None | dict[str, str | None] | QueueDatabase
    SCHEDULES: dict[str, Any]
    SCHEDULE_GRACE: float
    QUEUES: dict[str, Any]
    METRICS_TOKEN: str | None

    def user_settings(self) -> dict[str, Any]:
        return getattr(django_settings, "JOBQUEUE", None) or {}

    def merged(self) -> dict[str, Any]:
        """Every setting at once, defaults filled in: one read of Django's settings for many values."""
        return {**DEFAULTS, **self.user_settings()}

    def __getattr__(self, name: str) -> Any:
        if name not in DEFAULTS:
            raise AttributeError(f"JOBQUEUE has no setting {name!r}")
        return self.user_settings().get(name, DEFAULTS[name])


jobqueue_settings = JobQueueSettings()


def queue_databases() -> list[str]:
    """Every alias that holds a queue: ``DATABASE`` first, then ``DATABASES`` in their order."""
    main = jobqueue_settings.DATABASE
    others = jobqueue_settings.DATABASES
    if not isinstance(others, list | tuple):
        return [main]  # the system check says what is wrong with it
    return [main, *(alias for alias in dict.fromkeys(others) if alias != main)]


def listen_alias(using: str) -> str | None:
    """The alias a worker of queue database ``using`` LISTENs on; None: it polls only.

    ``LISTEN_DATABASE`` as a string is the queue database's (``DATABASE``)
    alone: a worker of another alias (``runworker --database``) LISTENs on its
    own, unless a dict names one for it. None turns LISTEN off everywhere.
    """
    value = jobqueue_settings.LISTEN_DATABASE
    if value is None:
        return None
    if isinstance(value, dict):
        return value.get(using, using)
    if isinstance(value, str) and using == jobqueue_settings.DATABASE:
        return value
    return using
