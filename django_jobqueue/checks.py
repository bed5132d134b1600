"""System checks for the ``JOBQUEUE`` setting (ids ``django_jobqueue.E0xx``)."""

from __future__ import annotations

import math
import sqlite3
from collections.abc import Mapping
from typing import Any

from django.conf import settings
from django.core.checks import CheckMessage, Error, Tags, Warning, register
from django.core.exceptions import ImproperlyConfigured
from django.db import connections
from django.db.utils import load_backend

from .conf import DEFAULTS, QUEUE_DATABASE, jobqueue_settings, queue_databases
from .queue.flow import parse_queues
from .queue.validation import (
    check_max_attempts,
    check_poll_interval,
    check_queue,
    check_timeout,
    check_visibility_timeout,
)
from .schedules import schedule_problems


def _number(value: Any, minimum: float, *, strict: bool) -> bool:
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        return False
    return value > minimum if strict else value >= minimum


@register()
def check_jobqueue_settings(app_configs: Any = None, **kwargs: Any) -> list[CheckMessage]:
    errors: list[CheckMessage] = []
    user = jobqueue_settings.user_settings()
    if not isinstance(user, dict):
        return [Error("JOBQUEUE must be a dict.", id="django_jobqueue.E001")]
    for key in sorted(set(user) - set(DEFAULTS)):
        errors.append(
            Warning(
                f"JOBQUEUE has an unknown key {key!r}.",
                hint=f"Known keys: {', '.join(sorted(DEFAULTS))}.",
                id="django_jobqueue.W001",
            )
        )
    if jobqueue_settings.DATABASE not in settings.DATABASES:
        errors.append(
            Error(
                f"JOBQUEUE['DATABASE'] is {jobqueue_settings.DATABASE!r}, not a key of DATABASES.",
                id="django_jobqueue.E002",
            )
        )
    errors.extend(_queue_databases_problems())
    try:
        check_queue(jobqueue_settings.DEFAULT_QUEUE)
    except ValueError as exc:
        errors.append(Error(f"JOBQUEUE['DEFAULT_QUEUE']: {exc}.", id="django_jobqueue.E003"))
    try:
        check_max_attempts(jobqueue_settings.MAX_ATTEMPTS)
    except ValueError as exc:
        errors.append(Error(f"JOBQUEUE['MAX_ATTEMPTS']: {exc}.", id="django_jobqueue.E004"))
    try:
        check_visibility_timeout(jobqueue_settings.VISIBILITY_TIMEOUT, "VISIBILITY_TIMEOUT")
    except ValueError as exc:
        errors.append(Error(f"JOBQUEUE['VISIBILITY_TIMEOUT']: {exc}.", id="django_jobqueue.E005"))
    if jobqueue_settings.TIMEOUT is not None:
        try:
            check_timeout(jobqueue_settings.TIMEOUT, "TIMEOUT")
        except ValueError as exc:
            errors.append(
                Error(
                    f"JOBQUEUE['TIMEOUT']: {exc}.",
                    hint="Seconds (or a timedelta) up to 7 days, or None for no limit.",
                    id="django_jobqueue.E013",
                )
            )
    positive = (
        "BACKOFF_BASE",
        "BACKOFF_MAX",
        "MAX_PAYLOAD_BYTES",
    )
    for key in positive:
        if not _number(getattr(jobqueue_settings, key), 0, strict=True):
            errors.append(Error(f"JOBQUEUE[{key!r}] must be a number above 0.", id="django_jobqueue.E005"))
    try:
        check_poll_interval(jobqueue_settings.POLL_INTERVAL, "POLL_INTERVAL")
    except ValueError as exc:
        errors.append(Error(f"JOBQUEUE['POLL_INTERVAL']: {exc}.", id="django_jobqueue.E005"))
    if not _number(jobqueue_settings.KEEP_COMPLETED, 0, strict=False):
        errors.append(
            Error("JOBQUEUE['KEEP_COMPLETED'] must be 0 or more seconds.", id="django_jobqueue.E006")
        )
    if not settings.USE_TZ and settings.TIME_ZONE not in ("UTC", "Etc/UTC", None):
        errors.append(
            Warning(
                "USE_TZ is False and TIME_ZONE is not UTC: run_at values you pass are local "
                "times, but the queue compares them with the database's UTC clock.",
                hint="Set USE_TZ = True (Django's default), or TIME_ZONE = 'UTC'.",
                id="django_jobqueue.W002",
            )
        )
    modules = jobqueue_settings.MODULES
    if not isinstance(modules, list | tuple) or not all(isinstance(m, str) for m in modules):
        errors.append(Error("JOBQUEUE['MODULES'] must be a list of module paths.", id="django_jobqueue.E007"))
    task_modules = jobqueue_settings.TASK_MODULES
    if not isinstance(task_modules, list | tuple) or not all(isinstance(m, str) and m for m in task_modules):
        errors.append(
            Error("JOBQUEUE['TASK_MODULES'] must be a list of module paths.", id="django_jobqueue.E010")
        )
    redacted = jobqueue_settings.REDACT_PAYLOAD_KEYS
    if not isinstance(redacted, list | tuple) or not all(isinstance(k, str) and k for k in redacted):
        errors.append(
            Error(
                "JOBQUEUE['REDACT_PAYLOAD_KEYS'] must be a list of payload key names.",
                hint='For example ["password", "token"].',
                id="django_jobqueue.E008",
            )
        )
    errors.extend(_schedule_errors())
    errors.extend(queues_errors())
    errors.extend(metrics_token_errors())
    errors.extend(synchronous_commit_errors())
    errors.extend(sqlite_version_errors())
    errors.extend(mysql_settings_errors())
    errors.extend(listen_database_errors())
    if not isinstance(jobqueue_settings.PREPARED_STATEMENTS, bool):
        errors.append(
            Error("JOBQUEUE['PREPARED_STATEMENTS'] must be True or False.", id="django_jobqueue.E009")
        )
    return errors


def _schedule_errors() -> list[CheckMessage]:
    """One error per bad schedule, naming it; ``runworker`` refuses to start on any."""
    # The job modules (and their @job(cron=/every=) shorthands) were loaded when the app became ready.
    errors: list[CheckMessage] = [
        Error(problem, hint="See docs/schedules.md.", id="django_jobqueue.E011")
        for problem in schedule_problems()
    ]
    if not _number(jobqueue_settings.SCHEDULE_GRACE, 0, strict=False):
        errors.append(
            Error("JOBQUEUE['SCHEDULE_GRACE'] must be 0 or more seconds.", id="django_jobqueue.E012")
        )
    return errors


QUEUES_HINT = "See docs/flow-control.md."


def queues_errors() -> list[CheckMessage]:
    """One error per bad entry of ``JOBQUEUE["QUEUES"]``, naming its queue and option.

    Each entry is parsed on its own, so that every bad queue is reported at
    once rather than the first only; ``runworker`` refuses to start on any.
    """
    raw = jobqueue_settings.QUEUES
    entries = list(raw.items()) if isinstance(raw, Mapping) else [(None, raw)]
    errors: list[CheckMessage] = []
    for queue, options in entries:
        try:
            parse_queues(raw if queue is None else {queue: options})
        except ValueError as exc:
            errors.append(Error(_naming_queue(str(exc), queue), hint=QUEUES_HINT, id="django_jobqueue.E014"))
    return errors


def _naming_queue(problem: str, queue: object) -> str:
    # A bad queue name is refused by check_queue, whose message names no setting.
    if not problem.startswith("JOBQUEUE['QUEUES']"):
        problem = f"JOBQUEUE['QUEUES'][{queue!r}]: {problem}"
    return f"{problem}."


# A token a person can neither guess nor brute-force over HTTP: secrets.token_urlsafe(32) gives 43.
MIN_METRICS_TOKEN_LENGTH = 32


# The queue's statements read back what they write with RETURNING, which SQLite has from 3.35.
MIN_SQLITE_VERSION = (3, 35)


def sqlite_version_errors(
    version: tuple[int, ...] = sqlite3.sqlite_version_info, databases: Mapping[str, Any] | None = None
) -> list[CheckMessage]:
    """An error when the queue's database is SQLite and Python's library of it is too old."""
    database = (settings.DATABASES if databases is None else databases).get(jobqueue_settings.DATABASE, {})
    if not str(database.get("ENGINE", "")).endswith("sqlite3") or version >= MIN_SQLITE_VERSION:
        return []
    found, needed = ".".join(map(str, version)), ".".join(map(str, MIN_SQLITE_VERSION))
    return [
        Error(
            f"The queue's database is SQLite {found}; django-jobqueue needs {needed} or later.",
            hint="Python's sqlite3 module uses the SQLite library it was built with: "
            "a newer Python, or PostgreSQL.",
            id="django_jobqueue.E017",
        )
    ]


MYSQL_HINT = "See docs/databases.md#mysql-and-mariadb."


def _mysql_queue_databases(databases: Mapping[str, Any]) -> list[str]:
    return [
        alias for alias in queue_databases() if alias in databases and _vendor(databases[alias]) == "mysql"
    ]


def mysql_settings_errors(databases: Mapping[str, Any] | None = None) -> list[CheckMessage]:
    """Errors when a MySQL or MariaDB queue database is set to another isolation level or charset.

    Under REPEATABLE READ, InnoDB's gap locks make concurrent claims and
    inserts wait on and deadlock with each other; Django's default, READ
    COMMITTED, is the level the queue's statements are written for. Text is
    utf8mb4, Django's default: utf8 (utf8mb3) cannot hold an emoji in a payload.
    """
    databases = settings.DATABASES if databases is None else databases
    errors: list[CheckMessage] = []
    for alias in _mysql_queue_databases(databases):
        options = databases[alias].get("OPTIONS", {})
        level = str(options.get("isolation_level", "read committed") or "").lower()
        if level != "read committed":
            errors.append(
                Error(
                    f"DATABASES[{alias!r}]['OPTIONS']['isolation_level'] is {level or None!r}; "
                    "the queue needs 'read committed', Django's default on MySQL and MariaDB.",
                    hint=MYSQL_HINT,
                    id="django_jobqueue.E020",
                )
            )
        charset = str(options.get("charset", "utf8mb4")).lower()
        if charset != "utf8mb4":
            errors.append(
                Error(
                    f"DATABASES[{alias!r}]['OPTIONS']['charset'] is {charset!r}; the queue needs 'utf8mb4'.",
                    hint=MYSQL_HINT,
                    id="django_jobqueue.E022",
                )
            )
    return errors


# SKIP LOCKED came in MariaDB 10.6 and MySQL 8.0.1; Django 5.2 itself needs MySQL 8.0.11.
MIN_MARIADB_VERSION = (10, 6)
MIN_MYSQL_VERSION = (8, 0, 11)


@register(Tags.database)
def check_mysql_version(app_configs: Any = None, databases: Any = None, **kwargs: Any) -> list[CheckMessage]:
    """An error when a MySQL or MariaDB queue database is older than the queue needs (it connects)."""
    errors: list[CheckMessage] = []
    for alias in _mysql_queue_databases(settings.DATABASES):
        if alias not in (databases or ()):
            continue
        connection: Any = connections[alias]
        mariadb = connection.mysql_is_mariadb
        needed = MIN_MARIADB_VERSION if mariadb else MIN_MYSQL_VERSION
        found = tuple(connection.mysql_version)
        errors.extend(mysql_version_errors(alias, "MariaDB" if mariadb else "MySQL", found, needed))
    return errors


def mysql_version_errors(
    alias: str, server: str, found: tuple[int, ...], needed: tuple[int, ...]
) -> list[CheckMessage]:
    if found >= needed:
        return []
    return [
        Error(
            f"The queue's database {alias!r} is {server} {'.'.join(map(str, found))}; django-jobqueue "
            f"needs {server} {'.'.join(map(str, needed))} or later (SELECT … FOR UPDATE SKIP LOCKED).",
            hint=MYSQL_HINT,
            id="django_jobqueue.E021",
        )
    ]


LISTEN_HINT = "See docs/settings.md#listen_database."


def _vendor(database: Mapping[str, Any]) -> str | None:
    """The vendor of a ``DATABASES`` entry, read off its backend without connecting; None if it won't load."""
    if not database.get("ENGINE"):
        return None
    try:
        return str(load_backend(database["ENGINE"]).DatabaseWrapper.vendor)
    except (ImportError, ImproperlyConfigured):
        return None


def listen_database_errors(databases: Mapping[str, Any] | None = None) -> list[CheckMessage]:
    """An error when ``LISTEN_DATABASE`` names no alias, or one that cannot hear the queue's NOTIFYs.

    A NOTIFY reaches only the LISTENs of the database it is sent in: on a
    PostgreSQL queue the LISTEN alias must be PostgreSQL too (an error), and
    the same database (a warning if its NAME differs: a different host may be
    the same server reached without a pooler, a different name never is).
    """
    databases = settings.DATABASES if databases is None else databases
    value = jobqueue_settings.LISTEN_DATABASE
    if value is None or value is QUEUE_DATABASE:
        return []
    pairs: list[tuple[str, Any]]
    if isinstance(value, str):
        pairs = [(jobqueue_settings.DATABASE, value)]
    elif isinstance(value, dict) and all(isinstance(key, str) for key in value):
        pairs = list(value.items())
    else:
        return [
            Error(
                "JOBQUEUE['LISTEN_DATABASE'] must be an alias of DATABASES, None, or a dict of "
                f"queue database aliases to such values, not {value!r}.",
                hint=LISTEN_HINT,
                id="django_jobqueue.E018",
            )
        ]
    errors: list[CheckMessage] = []
    name = "JOBQUEUE['LISTEN_DATABASE']" + ("" if isinstance(value, str) else "[{!r}]")
    for queue_alias, alias in pairs:
        setting = name.format(queue_alias)
        problem = None
        if queue_alias not in databases:
            problem = f"{setting}: {queue_alias!r} is not a key of DATABASES"
        elif alias is None:
            continue
        elif not isinstance(alias, str) or alias not in databases:
            problem = f"{setting} is {alias!r}, not a key of DATABASES nor None"
        if problem is None and _vendor(databases[queue_alias]) == "postgresql":
            listen, queue = databases[alias], databases[queue_alias]
            if _vendor(listen) != "postgresql":
                problem = (
                    f"{setting} is {alias!r}, which is not PostgreSQL: it cannot hear the NOTIFYs "
                    f"of the queue's database {queue_alias!r}"
                )
            elif listen.get("NAME") != queue.get("NAME"):
                errors.append(
                    Warning(
                        f"{setting} is {alias!r}, which connects to database {listen.get('NAME')!r}, "
                        f"and the queue's {queue_alias!r} to {queue.get('NAME')!r}: a LISTEN hears only "
                        "the NOTIFYs of its own database, so the workers would poll.",
                        hint=LISTEN_HINT,
                        id="django_jobqueue.W003",
                    )
                )
        if problem is not None:
            errors.append(Error(f"{problem}.", hint=LISTEN_HINT, id="django_jobqueue.E018"))
    return errors


def _queue_databases_problems() -> list[CheckMessage]:
    """``JOBQUEUE["DATABASES"]``: a list of aliases of ``DATABASES``."""
    value = jobqueue_settings.DATABASES
    if not isinstance(value, list | tuple) or not all(isinstance(alias, str) for alias in value):
        problem = f"must be a list of aliases of DATABASES, not {value!r}"
    else:
        unknown = [alias for alias in value if alias not in settings.DATABASES]
        if not unknown:
            return []
        problem = f"names {', '.join(map(repr, unknown))}, not a key of DATABASES"
    return [Error(f"JOBQUEUE['DATABASES'] {problem}.", id="django_jobqueue.E019")]


# PostgreSQL's values of synchronous_commit.
SYNCHRONOUS_COMMIT_VALUES = ("off", "local", "remote_write", "on", "remote_apply")


def synchronous_commit_errors() -> list[CheckMessage]:
    value = jobqueue_settings.WORKER_SYNCHRONOUS_COMMIT
    if value is None or (isinstance(value, str) and value in SYNCHRONOUS_COMMIT_VALUES):
        return []
    return [
        Error(
            f"JOBQUEUE['WORKER_SYNCHRONOUS_COMMIT'] must be None or one of "
            f"{', '.join(map(repr, SYNCHRONOUS_COMMIT_VALUES))}, not {value!r}.",
            hint="See docs/settings.md#worker_synchronous_commit.",
            id="django_jobqueue.E016",
        )
    ]


def metrics_token_errors() -> list[CheckMessage]:
    """An error when ``JOBQUEUE["METRICS_TOKEN"]`` is neither None nor a long, header-safe string."""
    token = jobqueue_settings.METRICS_TOKEN
    if token is None:
        return []
    hint = 'For example python -c "import secrets; print(secrets.token_urlsafe(32))"; None turns it off.'
    if not isinstance(token, str):
        problem = f"must be a string or None, not {type(token).__name__}"
    elif len(token) < MIN_METRICS_TOKEN_LENGTH:
        problem = f"is {len(token)} characters long; it needs at least {MIN_METRICS_TOKEN_LENGTH}"
    elif not (token.isascii() and token.isprintable()) or " " in token:
        # It travels in an HTTP header, "Authorization: Bearer <token>".
        problem = "may hold only printable ASCII characters without spaces"
    else:
        return []
    return [Error(f"JOBQUEUE['METRICS_TOKEN'] {problem}.", hint=hint, id="django_jobqueue.E015")]
