"""The name -> function table that ``@job`` fills.

A worker runs only what is registered here: a name read from the database is
looked up in this table and never imported from a dotted path.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class JobSpec:
    """A registered job function and its defaults (``None`` = the setting's)."""

    name: str
    func: Callable[..., Any]
    queue: str | None = None
    priority: int | None = None
    max_attempts: int | None = None
    visibility_timeout: float | None = None
    takes_context: bool = False


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


def _origin(func: Callable[..., Any]) -> str:
    return f"{getattr(func, '__module__', '?')}.{getattr(func, '__qualname__', repr(func))}"
