"""The connection budget of a stopping worker (docs/workers.md, "The connection budget")."""

from __future__ import annotations

import threading

import pytest
from django.conf import settings
from django.test import override_settings

from django_jobqueue import job
from django_jobqueue.worker.config import WorkerConfig
from django_jobqueue.worker.supervisor import Supervisor
from tests.worker_support import wait_until


@job(name="budget.tick")
def tick() -> None:
    """A periodic job for the scheduler to keep: it never comes due within a test."""


@pytest.mark.django_db(transaction=True)
def test_the_listener_and_the_scheduler_close_before_the_completer_opens(postgresql_only: None):
    """The completer's connection takes the place of theirs: a stopping worker stays within --concurrency + 7."""
    schedules = {"budget-tick": {"job": "budget.tick", "every": 3600}}
    with override_settings(JOBQUEUE={**settings.JOBQUEUE, "SCHEDULES": schedules}):
        supervisor = Supervisor(WorkerConfig(worker_id="budget-order", using="default"))
        listener, scheduler = supervisor.wakeup.listener, supervisor.scheduler
        assert listener is not None and scheduler is not None
        alive_at_completer_start: list[tuple[bool, bool]] = []
        start = supervisor.completer.start

        def start_completer() -> None:
            alive_at_completer_start.append((listener.alive, scheduler.alive))
            start()

        supervisor.completer.start = start_completer  # type: ignore[method-assign]
        claimer = threading.Thread(target=supervisor.run)
        claimer.start()
        wait_until(lambda: listener.state == "live" and scheduler.synced, 10, "the listener and the scheduler")
        supervisor.request_stop("test")
        claimer.join(30)

    assert not claimer.is_alive()
    assert alive_at_completer_start == [(False, False)]
    assert supervisor.clean is True
