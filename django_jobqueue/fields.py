"""A model field of the queue's own: JSON read whatever it holds."""

from __future__ import annotations

import json
from typing import Any

from django.db import models


def _int_or_float(digits: str) -> int | float:
    # Python refuses an int of more than 4,300 digits (a ValueError that Django's JSONField does
    # not catch), so one such number would fail the load of its row and of any page listing it.
    try:
        return int(digits)
    except ValueError:
        return float(digits)  # inf: shown as no count


class _LenientDecoder(json.JSONDecoder):
    def __init__(self, **kwargs: Any) -> None:
        super().__init__(parse_int=_int_or_float, **kwargs)


class ReportField(models.JSONField):
    """A ``JSONField`` that loads whatever JSON its column holds, integers of any length too.

    For the ``progress`` columns: the queue writes them only as ``ctx.progress()`` checked, but
    anyone may (an older release, a custom worker, SQL by hand), and the admin lists the rows.
    Migrations see a plain ``JSONField``: the decoder changes how a value is read, not the column.
    """

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("decoder", _LenientDecoder)
        super().__init__(*args, **kwargs)

    def deconstruct(self) -> Any:
        name, _path, args, kwargs = super().deconstruct()
        kwargs.pop("decoder", None)
        return name, "django.db.models.JSONField", args, kwargs
