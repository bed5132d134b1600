"""The worker's log lines on the console when the project's ``LOGGING`` says nothing about them.

Django's default logging gives the ``django_jobqueue`` loggers no handler: their
records propagate to a root logger that has none, so a worker on a fresh
``startproject`` site would print nothing but Python's last-resort warnings.
For the length of ``runworker``, ``console_logging`` attaches one handler to
the ``django_jobqueue`` logger, at the level ``-v`` asks for. A project that
gave any handler to these loggers or to one above them (the root logger
included) keeps its own configuration untouched, so no line prints twice.

``--log-format json`` gives that handler ``logformat.JsonFormatter``. A
project that logs these loggers itself keeps its formatters: the worker says
so once, and the project sets the JSON formatter in its ``LOGGING`` instead.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TextIO

from .logformat import JsonFormatter

LOGGER = "django_jobqueue"
# -v 0: failures only; -v 1 (Django's default): start, stop and one line per job; -v 2 and 3: debug too.
LEVELS = {0: logging.WARNING, 1: logging.INFO}
FORMAT = "%(asctime)s %(levelname)s %(message)s"
# From -v 2, the logger's name tells which of the worker's threads spoke.
VERBOSE_FORMAT = "%(asctime)s %(levelname)s %(name)s [%(threadName)s]: %(message)s"
LOG_FORMATS = ("text", "json")


def configured_by_project() -> bool:
    """Whether a handler already receives the ``django_jobqueue`` loggers' records."""
    if logging.getLogger(LOGGER).hasHandlers():
        return True
    # A handler on a child alone (say, the executor's) would print its lines a second time through ours.
    children = [
        logger
        for name, logger in logging.root.manager.loggerDict.items()
        if name.startswith(f"{LOGGER}.") and isinstance(logger, logging.Logger)
    ]
    return any(logger.handlers for logger in children)


@contextmanager
def console_logging(stream: TextIO, verbosity: int, log_format: str = "text") -> Iterator[None]:
    """Print the worker's log lines on ``stream`` while the block runs, unless the project logs them.

    ``verbosity`` is Django's ``-v``: 0 shows warnings and errors (a retry, a
    dead letter), 1 also the start and stop lines and each job's outcome, 2
    and 3 also debug lines. ``log_format`` is ``text`` or ``json``. On exit
    the logger is as it was.
    """
    logger = logging.getLogger(LOGGER)
    if configured_by_project():
        if log_format == "json":
            logger.warning(
                "--log-format json: the project's LOGGING handles the django_jobqueue loggers, and keeps "
                "its formatters; give their handlers django_jobqueue.worker.logformat.JsonFormatter"
            )
        yield
        return
    handler = logging.StreamHandler(stream)
    if log_format == "json":
        handler.setFormatter(JsonFormatter())
    else:
        handler.setFormatter(logging.Formatter(VERBOSE_FORMAT if verbosity > 1 else FORMAT))
    previous_level = logger.level
    logger.setLevel(LEVELS.get(verbosity, logging.DEBUG))
    logger.addHandler(handler)
    try:
        yield
    finally:
        logger.removeHandler(handler)
        logger.setLevel(previous_level)
