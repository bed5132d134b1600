"""The pytest plugin: a ``jobqueue`` fixture with the testing kit's functions as methods.

Registered as the ``pytest11`` entry point ``django_jobqueue``, so pytest loads
it in every project that installs django-jobqueue, with or without
pytest-django and Django settings: importing it imports nothing of Django, and
the kit is imported only when a test asks for the fixture.
"""

from __future__ import annotations

from typing import Any

import pytest


class JobQueueFixture:
    """What the ``jobqueue`` fixture gives: ``jobqueue.run_jobs()``, ``jobqueue.assert_enqueued(...)`` …

    Each method is the function of ``django_jobqueue.testing`` of its name,
    with the same arguments.
    """

    def run_jobs(self, *args: Any, **kwargs: Any) -> Any:
        from .runner import run_jobs

        return run_jobs(*args, **kwargs)

    def run_schedule(self, *args: Any, **kwargs: Any) -> Any:
        from .runner import run_schedule

        return run_schedule(*args, **kwargs)

    def assert_enqueued(self, *args: Any, **kwargs: Any) -> Any:
        from .assertions import assert_enqueued

        return assert_enqueued(*args, **kwargs)

    def assert_not_enqueued(self, *args: Any, **kwargs: Any) -> None:
        from .assertions import assert_not_enqueued

        assert_not_enqueued(*args, **kwargs)

    def enqueued(self, *args: Any, **kwargs: Any) -> Any:
        from .assertions import enqueued

        return enqueued(*args, **kwargs)

    def perform(self, *args: Any, **kwargs: Any) -> Any:
        from .performing import perform

        return perform(*args, **kwargs)

    def __repr__(self) -> str:
        return "<jobqueue testing kit>"


@pytest.fixture
def jobqueue(request: pytest.FixtureRequest) -> JobQueueFixture:
    """The testing kit (``django_jobqueue.testing``) as methods; the test gets the database.

    It asks for pytest-django's ``db``: the test's transaction, rolled back
    after it. A test marked ``django_db(transaction=True)``, or asking for
    ``transactional_db``, keeps its committed transactions.
    """
    request.getfixturevalue("db")
    return JobQueueFixture()
