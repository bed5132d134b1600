"""The connection budget of a stopping worker (docs/workers.md, "The connection budget")."""

from __future__ import annotations

import signal
import threading

import pytest
from django.conf import settings
from django.test import override_settings

from django_jobqueue import enqueue_many, job
from django_jobqueue.models import DeadLetter
from django_jobqueue.worker.config import WorkerConfig
from django_jobqueue.worker.supervisor import Supervisor
from tests.worker_support import database_url, wait_until, worker_sessions


@job(name="budget.tick")
def tick() -> None:
    """A periodic job for the scheduler to keep: it never comes due within a test."""


@pytest.mark.django_db(transaction=True)
def test_the_listener_and_the_scheduler_close_before_the_completer_opens(postgresql_only: None):
    """The completer's connection takes the place of theirs: a stopping worker stays within N + 7."""
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
        # A daemon, and stopped whatever happens: a claiming loop left running would hold the test
        # process open at its exit.
        claimer = threading.Thread(target=supervisor.run, daemon=True)
        claimer.start()
        try:
            # Probed: live on a direct connection, deaf behind a pooler; running either way.
            wait_until(
                lambda: listener.state in ("live", "deaf") and scheduler.synced,
                10,
                "the listener and the scheduler",
            )
        finally:
            supervisor.request_stop("test")
            claimer.join(30)

    assert not claimer.is_alive()
    assert alive_at_completer_start == [(False, False)]
    assert supervisor.clean is True


@pytest.mark.slow
def test_a_process_slot_closes_what_it_opened_to_record_a_failure(queue, postgresql_only, start_worker):
    """At CONN_MAX_AGE 0 the worker's side of a --pool processes slot holds no connection between jobs.

    A child runs the job; the slot's thread in the worker writes its dead
    letter, on a connection of its own, and closes it after, as a thread
    slot does. What stays: the claimer, the heartbeat, the ticker, the cancel
    watch and the listener.
    """
    name = "jq-budget-fails"
    url = f"{database_url()}?application_name={name}"
    worker = start_worker(
        "--pool", "processes", "--concurrency", "3", "--poll-interval", "0.1",
        env={"JOBQUEUE_MODULES": "tests.jobs_for_workers", "DATABASE_URL": url},
    )  # fmt: skip
    worker.wait_started(60)
    enqueue_many([("workers.fail_now", {"reason": "for the budget"})] * 6)

    wait_until(lambda: DeadLetter.objects.count() == 6, 30, "every job to be dead-lettered")
    wait_until(lambda: worker_sessions(name) <= 5, 5, "the slots' connections to close")
    worker.send(signal.SIGTERM)
    assert worker.wait() == 0
