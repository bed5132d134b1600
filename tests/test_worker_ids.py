"""A worker id names one live worker: a second worker under it is refused while the first lives."""

from __future__ import annotations

import signal

from django.db import connection

from django_jobqueue.models import Job, Worker
from django_jobqueue.queue import engine_for
from tests.worker_support import wait_until


def make_stale(worker_id: str) -> None:
    """Date the worker row's heartbeat two minutes back, as if its worker had died then."""
    with connection.cursor() as cursor:
        cursor.execute(
            f"UPDATE django_jobqueue_worker SET last_heartbeat = {engine_for(connection).now_minus('120')} "
            "WHERE worker_id = %s",
            [worker_id],
        )
        assert cursor.rowcount == 1


def test_a_second_worker_with_a_live_workers_id_is_refused(queue, start_worker, events_path):
    first = start_worker("--worker-id", "twin", "--poll-interval", "0.1")
    first.wait_started()

    second = start_worker("--worker-id", "twin", "--poll-interval", "0.1")

    assert second.wait() != 0
    assert "refusing to start: worker id 'twin' is held by a live worker" in second.log()
    assert f"pid {first.pid}" in second.log()
    assert "started" not in second.log()
    # The first worker still owns its row and still runs jobs.
    assert Worker.objects.get(worker_id="twin").pid == first.pid
    job = queue.push("workers.record", {"path": events_path, "value": "after"})
    wait_until(lambda: Job.objects.filter(pk=job.pk, status="done").exists(), 10, "the first worker's job")
    first.send(signal.SIGTERM)
    assert first.wait() == 0


def test_the_id_is_free_again_once_its_worker_stopped(queue, start_worker):
    first = start_worker("--worker-id", "reused", "--poll-interval", "0.1")
    first.wait_started()
    first.send(signal.SIGTERM)
    assert first.wait() == 0

    again = start_worker("--worker-id", "reused", "--poll-interval", "0.1")
    again.wait_started()
    again.send(signal.SIGTERM)
    assert again.wait() == 0


def test_the_id_of_a_killed_worker_is_free_once_its_heartbeat_is_stale(queue, start_worker):
    killed = start_worker("--worker-id", "phoenix", "--poll-interval", "0.1")
    killed.wait_started()
    killed.kill()
    # Its row stays behind, fresh: a worker cut off from the database looks the same.
    refused = start_worker("--worker-id", "phoenix", "--poll-interval", "0.1")
    assert refused.wait() != 0
    assert "held by a live worker" in refused.log()

    make_stale("phoenix")
    successor = start_worker("--worker-id", "phoenix", "--poll-interval", "0.1")
    successor.wait_started()
    assert Worker.objects.get(worker_id="phoenix").pid == successor.pid
    successor.send(signal.SIGTERM)
    assert successor.wait() == 0
