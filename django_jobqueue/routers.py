"""A database router for projects that keep the queue in a database other than ``default``.

With ``JOBQUEUE["DATABASE"] = "queue"``, add
``DATABASE_ROUTERS = ["django_jobqueue.routers.JobQueueRouter"]`` so that the
admin and ORM reads of the queue's tables use that database too, and its
migrations run there. Jobs enqueued there are transactional with rows written
to that same database only.
"""

from __future__ import annotations

from typing import Any

from .conf import jobqueue_settings

APP_LABEL = "django_jobqueue"


class JobQueueRouter:
    def db_for_read(self, model: type[Any], **hints: Any) -> str | None:
        return jobqueue_settings.DATABASE if model._meta.app_label == APP_LABEL else None

    def db_for_write(self, model: type[Any], **hints: Any) -> str | None:
        return jobqueue_settings.DATABASE if model._meta.app_label == APP_LABEL else None

    def allow_migrate(self, db: str, app_label: str, **hints: Any) -> bool | None:
        if app_label == APP_LABEL:
            return db == jobqueue_settings.DATABASE
        return None
