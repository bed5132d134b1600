"""Django's Tasks framework on the queue: the backend, and Django Tasks' view of the rows.

- ``compat``: the framework's names, from Django 6 or the ``django-tasks`` backport;
- ``rows``: a row's ``Task`` (found by its module path) and its ``TaskResult``;
- ``options``: the backend's ``OPTIONS`` and their system checks;
- ``backend``: ``JobQueueBackend``, public as ``django_jobqueue.backends.JobQueueBackend``.

Imports go one way: ``backend`` uses ``options``, ``rows`` and ``compat``;
``rows`` uses ``compat``. The worker's side (``worker/run/tasks.py``) and the
public ``django_jobqueue.backends`` import from here, never the reverse.

This package imports nothing on its own: tools that import the ``tasks``
module of every installed app (Celery's autodiscovery) find an empty module,
whether or not the Tasks framework is installed.
"""
