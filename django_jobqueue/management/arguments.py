"""Argument types shared by the ``runworker`` and ``jobqueue`` commands."""

from __future__ import annotations

from argparse import ArgumentTypeError

from django.conf import settings


def database_alias(text: str) -> str:
    """Return ``text`` if it names a database in ``DATABASES``.

    Checked while the arguments are parsed, so an unknown alias is a bad
    argument (exit status 2, with the usage) like any other.
    """
    if text not in settings.DATABASES:
        known = ", ".join(repr(alias) for alias in settings.DATABASES)
        raise ArgumentTypeError(f"{text!r} is not a key of DATABASES (known: {known})")
    return text
