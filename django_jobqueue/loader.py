"""Import the modules whose ``@job`` functions fill the registry: at start, in every process."""

from __future__ import annotations

import logging
from importlib import import_module

from django.apps import apps
from django.utils.module_loading import module_has_submodule

from .conf import jobqueue_settings

logger = logging.getLogger(__name__)


def load_job_modules() -> list[str]:
    """Import the ``jobs`` module of every installed app, then ``JOBQUEUE["MODULES"]``.

    Return the names of the modules imported. An error inside one of them is
    raised: a worker that cannot load its code must not start and run half of
    it. This is the only way a worker finds code; a job name read from the
    database is never imported.
    """
    loaded = []
    for app_config in apps.get_app_configs():
        if module_has_submodule(app_config.module, "jobs"):
            loaded.append(import_module(f"{app_config.name}.jobs").__name__)
    for name in jobqueue_settings.MODULES:
        loaded.append(import_module(name).__name__)
    return loaded
