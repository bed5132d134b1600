"""Get a process of ``--pool processes`` ready to run jobs: Django set up, the job modules loaded.

The pool's children are forked by a fork server (``multiprocessing``'s
``forkserver``), a clean process started once, before any job runs, that
imports ``boot.py``, which runs ``prepare()`` there: every child forked
from it starts ready at once. Each child calls ``prepare()`` again, which
does nothing unless the fork server failed.

A failure here must not take the fork server down silently: it is kept, and
raised again in each child, which reports it to the worker.
"""

from __future__ import annotations

import os

_prepared = False
_failure: BaseException | None = None


def prepare() -> None:
    """Set Django up (from ``DJANGO_SETTINGS_MODULE``) and load the job modules, once per process.

    Raise what stopped it, or ``RuntimeError`` if no settings module is named.
    """
    global _prepared
    if _failure is not None:
        raise _failure
    if _prepared:
        return
    import django
    from django.apps import apps

    if not apps.ready:
        if not os.environ.get("DJANGO_SETTINGS_MODULE"):
            raise RuntimeError(
                "--pool processes needs DJANGO_SETTINGS_MODULE in the environment "
                "(settings.configure() does not reach the child processes)"
            )
        django.setup()
    from django.db import connections

    from ....loader import load_job_modules

    load_job_modules()
    # Nothing forked from here may share a connection a job module opened at import.
    connections.close_all()
    _prepared = True


def prepare_fork_server() -> None:
    """``prepare()`` in the fork server: a failure is kept for each child to report."""
    global _failure
    try:
        prepare()
    except BaseException as exc:  # noqa: B036 - kept for the children to report
        _failure = exc
