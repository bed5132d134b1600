"""``runworker --log-format json``: each log record as one JSON object on one line.

A job's outcome line carries its fields on the record (``job_fields``, set by
the executor): the object holds them all, with ``timestamp``, ``level`` and
``message`` (the text line, for a reader that greps). Any other record becomes
``{"timestamp", "level", "logger", "message"}``, plus ``exception`` when it
carries a traceback. Timestamps are UTC, ISO 8601 with milliseconds.

A project may use the formatter in its own ``LOGGING``::

    "formatters": {"json": {"()": "django_jobqueue.worker.logformat.JsonFormatter"}}
"""

from __future__ import annotations

import datetime
import json
import logging
from typing import Any


class JsonFormatter(logging.Formatter):
    """Formats a record as one line of JSON."""

    def format(self, record: logging.LogRecord) -> str:
        entry: dict[str, Any] = {
            "timestamp": _timestamp(record.created),
            "level": record.levelname,
        }
        job_fields = getattr(record, "job_fields", None)
        if isinstance(job_fields, dict):
            entry.update(job_fields)
        else:
            entry["logger"] = record.name
        entry["message"] = record.getMessage()
        if record.exc_info:
            entry["exception"] = self.formatException(record.exc_info)
        elif record.exc_text:
            entry["exception"] = record.exc_text
        # default=str: an extra of the project's may hold anything; a log line must never raise.
        return json.dumps(entry, ensure_ascii=False, default=str)


def _timestamp(created: float) -> str:
    moment = datetime.datetime.fromtimestamp(created, tz=datetime.UTC)
    return moment.isoformat(timespec="milliseconds").replace("+00:00", "Z")
