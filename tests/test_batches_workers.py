"""A batch run by real worker processes: its callback runs once, with the counts, after every job."""

from __future__ import annotations

import signal

from django_jobqueue import batch
from django_jobqueue.models import Batch
from tests.jobs_for_workers import events
from tests.worker_support import wait_until

JOBS = 40
FAILING = {3, 17, 29}


def test_two_workers_run_a_batch_and_its_callback_once(queue, start_worker, events_path):
    with batch(on_finish="workers.batch_done", payload={"path": events_path, "report": "r1"}) as opened:
        jobs = [
            queue.push(
                "workers.batch_part", {"path": events_path, "n": n, "fail": n in FAILING, "seconds": 0.02}
            )
            for n in range(JOBS)
        ]
    cancelled = jobs[-2:]
    assert all(queue.cancel(job) for job in cancelled)
    workers = [start_worker("--concurrency", "4", "--worker-id", f"batcher-{n}") for n in range(2)]

    def called_back() -> list[dict[str, object]]:
        return [event for event in events(events_path) if event["event"] == "batch_done"]

    [callback] = wait_until(called_back, 30, "the batch's callback")
    for worker in workers:
        # A worker still importing Django has no SIGTERM handler yet; on a
        # loaded machine the other one may have run the whole batch by then.
        worker.wait_started()
    for worker in workers:
        worker.send(signal.SIGTERM)
    for worker in workers:
        assert worker.wait() == 0, worker.log()
    assert {k: callback[k] for k in ("batch_id", "done", "failed", "cancelled", "report")} == {
        "batch_id": opened.id, "done": JOBS - 2 - len(FAILING), "failed": len(FAILING), "cancelled": 2,
        "report": "r1",
    }  # fmt: skip
    parts = [event for event in events(events_path) if event["event"] == "part"]
    assert {event["n"] for event in parts} == set(range(JOBS - 2))
    # The callback came after the last job of the batch had run.
    assert callback["time"] >= max(event["time"] for event in parts)
    assert len(called_back()) == 1
    assert Batch.objects.get(pk=opened.id).callback_job_id == callback["job"]
