"""Job preparation: each job validated and its defaults filled in before anything is written.

A job's options come from the call, else its ``@job``, else the settings; its
payload must be JSON that fits the registered function. A batch is prepared as
it streams (``prepared``) and goes by COPY only if every job can
(``copyable``).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping
from datetime import datetime
from typing import Any

from .. import registry
from ..conf import jobqueue_settings
from ..exceptions import JobPayloadError
from .flow import check_concurrency_key, check_concurrency_limit
from .ops import NewJob
from .validation import (
    check_depends_on,
    check_max_attempts,
    check_name,
    check_priority,
    check_queue,
    check_run_at,
    check_timeout,
    check_unique_key,
    check_visibility_timeout,
    encode_payload_and_copy,
    to_seconds,
)

ENQUEUE_OPTIONS = frozenset(
    {
        "queue",
        "priority",
        "run_at",
        "delay",
        "unique_key",
        "max_attempts",
        "visibility_timeout",
        "timeout",
        "concurrency_key",
        "concurrency_limit",
        "depends_on",
    }
)

# A batch item: a job's name, its payload and its enqueue options.
Item = tuple[str, Mapping[str, Any] | None, Mapping[str, Any]]


def prepare_job(
    name: str, payload: Mapping[str, Any] | None, options: Mapping[str, Any], using: str | None = None
) -> NewJob:
    """Validate one job and fill in its defaults: the call's, then ``@job``'s, then settings'.

    ``using`` is the database the job goes to, where the jobs of its
    ``depends_on`` must be. Raise ``ValueError`` or ``JobPayloadError`` before
    anything is written.
    """
    return JobPreparer(using).prepare(name, payload, options)


# The options that have a default (``@job``'s, else the setting's) and the check each value passes.
_DEFAULTED: dict[str, Callable[[Any], Any]] = {
    "queue": check_queue,
    "priority": check_priority,
    "max_attempts": check_max_attempts,
    "visibility_timeout": check_visibility_timeout,
    # The one option whose default may be None: no time limit.
    "timeout": lambda value: None if value is None else check_timeout(value),
}


class JobPreparer:
    """``prepare_job`` for the jobs of one call, reading settings once and each job name's defaults once.

    A batch of thousands of jobs of a few names then pays once per name for
    checking it, looking it up in the registry and checking its defaults; each
    job's own payload and options are checked every time, as ``prepare_job``
    checks them, in the same order and with the same errors.
    """

    def __init__(self, using: str | None = None) -> None:
        self._using = using
        # Read once: each read of jobqueue_settings goes through Django's lazy settings.
        configured = jobqueue_settings.merged()
        self._settings = {
            "queue": configured["DEFAULT_QUEUE"],
            "priority": 0,
            "max_attempts": configured["MAX_ATTEMPTS"],
            "visibility_timeout": configured["VISIBILITY_TIMEOUT"],
            "timeout": configured["TIMEOUT"],
        }
        self._max_payload_bytes = configured["MAX_PAYLOAD_BYTES"]
        self._specs: dict[str, registry.JobSpec | None] = {}
        self._defaults: dict[tuple[str, str], Any] = {}
        # Per name, the checked queue, priority, max_attempts, visibility_timeout
        # and timeout of a job given no options, once one such job of that name was prepared,
        # the registered function's call shape (None if not registered here) and
        # the payload keys (in their order) found to fit it.
        self._plain: dict[
            str, tuple[str, int, int, float, float | None, registry.CallShape | None, set[tuple[str, ...]]]
        ] = {}

    def prepare(self, name: str, payload: Mapping[str, Any] | None, options: Mapping[str, Any]) -> NewJob:
        """Validate one job and fill in its defaults (see ``prepare_job``)."""
        if not options and type(name) is str and name in self._plain:
            # The name and its defaults passed their checks before: the payload is all there is to check.
            queue, priority, max_attempts, visibility_timeout, timeout, shape, fitting = self._plain[name]
            payload = {} if payload is None else payload
            text, copy = encode_payload_and_copy(payload, self._max_payload_bytes)
            # A batch's payloads mostly share their keys: each set of keys is checked once.
            if shape is not None and tuple(payload) not in fitting:
                _check_fits(name, shape, payload)
                fitting.add(tuple(payload))
            # Positional, in NewJob's field order: the one path every job of a big batch takes.
            return NewJob(
                name,
                queue,
                text,
                priority,
                max_attempts,
                visibility_timeout,
                timeout,
                None,
                0.0,
                None,
                "",
                copy,
            )
        new = self._resolve(name, payload, options)
        if not options:
            spec = self._specs[name]
            shape = spec.call_shape if spec is not None else None
            no_keys_yet: set[tuple[str, ...]] = set()
            self._plain[name] = (
                new.queue,
                new.priority,
                new.max_attempts,
                new.visibility_timeout,
                new.timeout,
                shape,
                no_keys_yet,
            )
        return new

    def _resolve(self, name: str, payload: Mapping[str, Any] | None, options: Mapping[str, Any]) -> NewJob:
        """Check every option and fill in the defaults, as ``prepare_job`` does."""
        if not isinstance(options, Mapping):
            raise TypeError(f"enqueue options must be a dict, not {type(options).__name__}")
        if options and not ENQUEUE_OPTIONS.issuperset(options):
            unknown = set(options) - ENQUEUE_OPTIONS
            raise TypeError(f"unknown enqueue option(s): {', '.join(sorted(unknown))}")
        spec = self._spec(name)
        run_at, delay = options.get("run_at"), options.get("delay")
        if run_at is not None and delay is not None:
            raise ValueError("give run_at or delay, not both")
        unique_key = options.get("unique_key")
        queue = self._option(name, spec, options, "queue")  # checked before the payload, as prepare_job does
        payload = {} if payload is None else payload
        text, copy = encode_payload_and_copy(payload, self._max_payload_bytes)
        if spec is not None and spec.call_shape is not None:
            _check_fits(name, spec.call_shape, payload)
        concurrency_key, concurrency_limit = concurrency_of(name, spec, options)
        depends_on = options.get("depends_on")
        depends_on = check_depends_on(depends_on, self._using) if depends_on is not None else ()
        if depends_on and unique_key is not None:
            # A waiting job holds no key (the unique index covers ready and running
            # jobs), and which job a taken key hands back would skip the wait.
            raise ValueError("give depends_on or unique_key, not both")
        return NewJob(
            name=name,
            queue=queue,
            payload_json=text,
            priority=self._option(name, spec, options, "priority"),
            max_attempts=self._option(name, spec, options, "max_attempts"),
            visibility_timeout=self._option(name, spec, options, "visibility_timeout"),
            timeout=self._option(name, spec, options, "timeout"),
            run_at=check_run_at(run_at) if run_at is not None else None,
            delay=to_seconds(delay, "delay") if delay is not None else 0.0,
            unique_key=check_unique_key(unique_key) if unique_key is not None else None,
            payload=copy,
            concurrency_key=concurrency_key,
            concurrency_limit=concurrency_limit,
            depends_on=depends_on,
        )

    def _spec(self, name: object) -> registry.JobSpec | None:
        """``name``'s registered job, checking the name the first time it is met."""
        if type(name) is str and name in self._specs:  # an unhashable name must reach check_name
            return self._specs[name]
        checked = check_name(name)
        spec = self._specs[checked] = registry.lookup(checked)
        return spec

    def _option(self, name: str, spec: registry.JobSpec | None, options: Mapping[str, Any], key: str) -> Any:
        """The call's value of ``key`` if it gives one, else ``@job``'s, else the setting's; checked."""
        value = options.get(key)
        if value is not None:
            return _DEFAULTED[key](value)
        cache_key = (name, key)
        if cache_key not in self._defaults:
            # Checked only once used: a default that every job overrides is never checked.
            default = getattr(spec, key) if spec is not None else None
            self._defaults[cache_key] = _DEFAULTED[key](self._settings[key] if default is None else default)
        return self._defaults[cache_key]


def concurrency_of(
    name: str, spec: registry.JobSpec | None, options: Mapping[str, Any]
) -> tuple[str | None, int | None]:
    """A job's concurrency key and its limit (the call's, else ``@job``'s); both None without a key.

    ``@job(concurrency_limit=)`` is only a default for keyed enqueues: a job
    enqueued without a key has no key limit. Raise ``ValueError`` for a bad key
    or limit, a limit given without a key, and a key no limit comes with. A
    schedule's declaration passes the same checks (``schedules.py``).
    """
    key, limit = options.get("concurrency_key"), options.get("concurrency_limit")
    if limit is not None:
        limit = check_concurrency_limit(limit)
    if key is None:
        if limit is not None:
            raise ValueError(
                "concurrency_limit needs a concurrency_key: it limits how many jobs with that key run at once"
            )
        return None, None
    key = check_concurrency_key(key)
    if limit is None and spec is not None:
        limit = spec.concurrency_limit
    if limit is None:
        raise ValueError(
            f"concurrency_key needs a concurrency_limit: give concurrency_limit with the key, "
            f"or declare one for job {name!r} with @job(concurrency_limit=...)"
        )
    return key, limit


def prepared(items: Iterable[Item], using: str | None = None) -> Iterator[NewJob]:
    """Each item validated and filled in as it is asked for; an error names the item's index."""
    preparer = JobPreparer(using)
    for index, (name, payload, options) in enumerate(items):
        try:
            yield preparer.prepare(name, payload, options)
        except (ValueError, TypeError) as exc:
            raise type(exc)(f"item {index}: {exc}") from None


def _check_fits(name: str, shape: registry.CallShape, payload: Mapping[str, Any]) -> None:
    """Raise ``JobPayloadError`` if the registered function cannot take ``payload``: no worker could."""
    problem = shape.problem(payload)
    if problem is not None:
        raise JobPayloadError(f"job {name!r}: {problem}")


def copyable(items: Iterable[Item]) -> bool:
    """True if ``ops.copy_jobs`` can write every item: no unique_key, naive run_at or depends_on."""
    return all(_copyable(options) for _, _, options in items)


def _copyable(options: Mapping[str, Any]) -> bool:
    """False for the options of a job that ``ops.copy_jobs`` cannot write: a unique_key, a naive run_at."""
    if not options:
        return True
    if not isinstance(options, Mapping):
        return False  # the INSERT path's up-front check says what is wrong with it
    run_at = options.get("run_at")
    naive = isinstance(run_at, datetime) and run_at.utcoffset() is None
    return options.get("unique_key") is None and not naive and not options.get("depends_on")
