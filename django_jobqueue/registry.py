"""The name -> function table that ``@job`` fills.

A worker runs only what is registered here: a name read from the database is
looked up in this table and never imported from a dotted path.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from functools import cached_property
from typing import Any

_KEYWORD_KINDS = (inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY)


@dataclass(frozen=True)
class JobSpec:
    """A registered job function and its defaults (``None`` = the setting's).

    ``fail_on`` holds the exception classes that send a run straight to the
    dead letters instead of retrying it.
    """

    name: str
    func: Callable[..., Any]
    queue: str | None = None
    priority: int | None = None
    max_attempts: int | None = None
    visibility_timeout: float | None = None
    # Seconds one attempt may run; None = the TIMEOUT setting's (itself None = no limit).
    timeout: float | None = None
    # The limit of a job enqueued with a concurrency_key and no limit of its
    # own; a job enqueued without a key has none (queue/preparation.py).
    concurrency_limit: int | None = None
    takes_context: bool = False
    fail_on: tuple[type[BaseException], ...] = ()
    # @job(atomic=True): the function runs in transaction.atomic() on the queue's database and
    # the ack commits in that transaction (worker/run/attempt.py).
    atomic: bool = False
    # @job(cron=...) / @job(every=...): {"cron": ...} or {"every": ...}, a
    # schedule named after the job with an empty payload (schedules.py).
    schedule: dict[str, Any] | None = None

    @cached_property
    def call_shape(self) -> CallShape | None:
        """Which payloads the function accepts; None if its signature cannot be read."""
        return CallShape.of(self.func, self.takes_context)

    def payload_problem(self, payload: Mapping[str, Any]) -> str | None:
        """Why the function cannot be called with ``payload`` as keyword arguments, or None."""
        shape = self.call_shape
        return None if shape is None else shape.problem(payload)


@dataclass(frozen=True)
class CallShape:
    """The keyword arguments a function accepts, read once from its signature.

    ``problem`` answers what ``inspect.signature(func).bind(**payload)`` (or
    ``bind(ctx, **payload)``) would, for a fraction of its cost: enqueueing
    checks every payload of a batch against it.
    """

    described: str  # the function and its signature, for error messages
    accepted: frozenset[str]  # names a payload may give
    required: frozenset[str]  # names a payload must give
    any_key: bool  # a **kwargs parameter takes other names
    taken: frozenset[str]  # names the context argument already fills
    never: str | None = None  # why no payload can fit

    @classmethod
    def of(cls, func: Callable[..., Any], takes_context: bool) -> CallShape | None:
        try:
            signature = inspect.signature(func)
        except (TypeError, ValueError):  # some builtins and C callables have no readable signature
            return None
        parameters = list(signature.parameters.values())
        described = f"{getattr(func, '__qualname__', repr(func))}{_unannotated(signature)}"
        taken: frozenset[str] = frozenset()
        never = None
        if takes_context:
            first = parameters[0] if parameters else None
            if first is None or first.kind not in _POSITIONAL_KINDS:
                never = "takes_context=True, but it has no positional parameter for the context"
            elif first.kind is not inspect.Parameter.VAR_POSITIONAL:
                parameters = parameters[1:]  # *args takes the context and stays
                if first.kind is inspect.Parameter.POSITIONAL_OR_KEYWORD:
                    taken = frozenset({first.name})
        keyword = [p for p in parameters if p.kind in _KEYWORD_KINDS]
        stuck = [p.name for p in parameters if p.kind is inspect.Parameter.POSITIONAL_ONLY and _required(p)]
        if stuck and never is None:
            never = f"parameter {stuck[0]!r} is positional-only, and a payload gives keyword arguments"
        return cls(
            described=described,
            accepted=frozenset(p.name for p in keyword),
            required=frozenset(p.name for p in keyword if _required(p)),
            any_key=any(p.kind is inspect.Parameter.VAR_KEYWORD for p in parameters),
            taken=taken,
            never=never,
        )

    def problem(self, payload: Mapping[str, Any]) -> str | None:
        """Why ``payload`` does not fit, naming the arguments; None if it does."""
        keys = payload.keys()
        if self.never is None and self.required <= keys and (keys <= self.accepted or self._open(keys)):
            return None
        if self.never is not None:
            return f"{self.described} cannot be called from a payload: {self.never}"
        missing = sorted(self.required - keys)
        unexpected = sorted(self.taken & keys if self.any_key else keys - self.accepted)
        reasons = []
        if missing:
            reasons.append(f"missing argument(s) {', '.join(map(repr, missing))}")
        if unexpected:
            reasons.append(f"unexpected argument(s) {', '.join(map(repr, unexpected))}")
        return f"payload does not fit {self.described}: {'; '.join(reasons)}"

    def _open(self, keys: Iterable[str]) -> bool:
        return self.any_key and self.taken.isdisjoint(keys)


_POSITIONAL_KINDS = (
    inspect.Parameter.POSITIONAL_ONLY,
    inspect.Parameter.POSITIONAL_OR_KEYWORD,
    inspect.Parameter.VAR_POSITIONAL,
)


def _required(parameter: inspect.Parameter) -> bool:
    return parameter.default is inspect.Parameter.empty


_specs: dict[str, JobSpec] = {}


def register(spec: JobSpec) -> None:
    """Add ``spec`` to the table.

    Raise ``ValueError`` if another function is registered under the same name.
    Registering the same function again (a module imported twice) is harmless.
    """
    existing = _specs.get(spec.name)
    if existing is not None and _origin(existing.func) != _origin(spec.func):
        raise ValueError(
            f"job name {spec.name!r} is already registered for {_origin(existing.func)}; "
            f"cannot register {_origin(spec.func)} under it too"
        )
    _specs[spec.name] = spec


def unregister(name: str) -> None:
    """Remove ``name`` from the table, if present (for tests)."""
    _specs.pop(name, None)


def lookup(name: str) -> JobSpec | None:
    """Return the spec registered under ``name``, or ``None``."""
    return _specs.get(name)


def registered_names() -> list[str]:
    return sorted(_specs)


def specs() -> list[JobSpec]:
    """Every registered spec, by name."""
    return [_specs[name] for name in sorted(_specs)]


def _origin(func: Callable[..., Any]) -> str:
    return f"{getattr(func, '__module__', '?')}.{getattr(func, '__qualname__', repr(func))}"


def _unannotated(signature: inspect.Signature) -> inspect.Signature:
    """``signature`` without annotations: the names are what a payload must match."""
    empty = inspect.Parameter.empty
    parameters = [p.replace(annotation=empty) for p in signature.parameters.values()]
    return signature.replace(parameters=parameters, return_annotation=empty)
