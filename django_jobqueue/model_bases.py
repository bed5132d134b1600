"""What the queue's models share beyond Django's ``Model``."""

from __future__ import annotations

from typing import Any

from django.core.checks import CheckMessage
from django.db import models

# Django's warnings that MySQL and MariaDB make no index or unique constraint with a
# condition: migration 0018 puts the queue's own in their place there.
_MADE_BY_0018 = ("models.W036", "models.W037")


class ConditionalIndexes(models.Model):
    """A model whose partial indexes MySQL gets from migration 0018, not from Django."""

    class Meta:
        abstract = True

    @classmethod
    def check(cls, **kwargs: Any) -> list[CheckMessage]:
        return [found for found in super().check(**kwargs) if found.id not in _MADE_BY_0018]
