"""A database router for projects that keep the queue in a database other than ``default``, or in several.

With ``JOBQUEUE["DATABASE"] = "queue"``, add
``DATABASE_ROUTERS = ["django_jobqueue.routers.JobQueueRouter"]`` so that the
admin and ORM reads of the queue's tables use that database too, and its
migrations run there. Jobs enqueued there are transactional with rows written
to that same database only. With ``JOBQUEUE["DATABASES"]`` the queue's
migrations run on each of those too; a row read from one is written back to
it, and a query without ``.using()`` goes to ``DATABASE``.
"""

from __future__ import annotations

from typing import Any

from .conf import jobqueue_settings, queue_databases

APP_LABEL = "django_jobqueue"


class JobQueueRouter:
    def db_for_read(self, model: type[Any], **hints: Any) -> str | None:
        return _queue_database(model, hints)

    def db_for_write(self, model: type[Any], **hints: Any) -> str | None:
        return _queue_database(model, hints)

    def allow_migrate(self, db: str, app_label: str, **hints: Any) -> bool | None:
        if app_label == APP_LABEL:
            return db in queue_databases()
        return None


def _queue_database(model: type[Any], hints: dict[str, Any]) -> str | None:
    """The database of a row already loaded (a related row, a save), else the queue's ``DATABASE``."""
    if model._meta.app_label != APP_LABEL:
        return None
    instance = hints.get("instance")
    loaded_from = getattr(getattr(instance, "_state", None), "db", None)
    return loaded_from or jobqueue_settings.DATABASE
