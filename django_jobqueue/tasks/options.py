"""The Tasks backend's ``OPTIONS``: the keys it knows, and their system checks."""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.core import checks

from ..queue.validation import check_max_attempts, check_visibility_timeout

OPTION_KEYS = frozenset({"DATABASE", "MAX_ATTEMPTS", "VISIBILITY_TIMEOUT", "TASK_OPTIONS"})
TASK_OPTION_KEYS = frozenset({"max_attempts", "visibility_timeout"})


def check_options(alias: str, options: Any) -> list[checks.CheckMessage]:
    """System checks of a backend's ``OPTIONS`` (ids ``django_jobqueue.E1xx``)."""
    where = f"TASKS[{alias!r}]['OPTIONS']"
    if not isinstance(options, dict):
        return [checks.Error(f"{where} must be a dict.", id="django_jobqueue.E101")]
    errors = _unknown_keys(where, options, OPTION_KEYS)
    database = options.get("DATABASE")
    if database is not None and database not in settings.DATABASES:
        errors.append(
            checks.Error(
                f"{where}['DATABASE'] is {database!r}, not a key of DATABASES.", id="django_jobqueue.E102"
            )
        )
    errors += _check_values(where, options.get("MAX_ATTEMPTS"), options.get("VISIBILITY_TIMEOUT"))
    per_task = options.get("TASK_OPTIONS") or {}
    if not isinstance(per_task, dict) or not all(isinstance(value, dict) for value in per_task.values()):
        message = f"{where}['TASK_OPTIONS'] must map task paths to dicts of options."
        return [*errors, checks.Error(message, id="django_jobqueue.E103")]
    for path, task_options in per_task.items():
        task_where = f"{where}['TASK_OPTIONS'][{path!r}]"
        errors += _unknown_keys(task_where, task_options, TASK_OPTION_KEYS)
        errors += _check_values(
            task_where, task_options.get("max_attempts"), task_options.get("visibility_timeout")
        )
    return errors


def _unknown_keys(where: str, given: dict[str, Any], known: frozenset[str]) -> list[checks.CheckMessage]:
    return [
        checks.Error(
            f"{where} has an unknown key {key!r}.",
            hint=f"Known keys: {', '.join(sorted(known))}.",
            id="django_jobqueue.E104",
        )
        for key in sorted(set(given) - known, key=str)
    ]


def _check_values(where: str, max_attempts: Any, visibility_timeout: Any) -> list[checks.CheckMessage]:
    errors: list[checks.CheckMessage] = []
    try:
        if max_attempts is not None:
            check_max_attempts(max_attempts)
        if visibility_timeout is not None:
            check_visibility_timeout(visibility_timeout)
    except ValueError as exc:
        errors.append(checks.Error(f"{where}: {exc}.", id="django_jobqueue.E105"))
    return errors
