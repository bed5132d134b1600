"""Many pullers, producers and tickers at once, on committed transactions."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections import Counter
from datetime import timedelta
from pathlib import Path

from django.utils import timezone

from django_jobqueue import QueueClient, enqueue, enqueue_many
from django_jobqueue.models import Job
from tests.racing import run_threads
from tests.worker_support import database_url

ROOT = Path(__file__).resolve().parent.parent


def test_eight_threads_pulling_3000_jobs_claim_each_exactly_once(queue):
    made = enqueue_many([("tests.noop", {"i": i}) for i in range(3000)])

    def drain(index: int) -> list[int]:
        client, worker_id, seen = QueueClient(), f"worker-{index}", []
        while batch := client.pull_many(worker_id=worker_id, limit=10):
            for job in batch:
                seen.append(job.pk)
                assert client.ack(job, worker_id=worker_id)
        return seen

    claims = Counter(pk for seen in run_threads(8, drain) for pk in seen)
    assert len(claims) == 3000 and set(claims.values()) == {1}
    assert set(claims) == {job.pk for job in made}
    assert Job.objects.filter(status="done", attempts=1).count() == 3000


def test_concurrent_producers_of_one_unique_key_make_exactly_one_job(queue):
    for round_number in range(10):
        key = f"otp:{round_number}"
        pks = run_threads(8, lambda i, key=key: enqueue("tests.otp", {"by": i}, unique_key=key).pk)
        assert len(set(pks)) == 1
        assert Job.objects.filter(unique_key=key).count() == 1


def test_concurrent_tickers_handle_each_expired_claim_once(queue):
    enqueue_many([("tests.noop", {"i": i}, {"max_attempts": 1 + i % 2}) for i in range(400)])
    QueueClient().pull_many(worker_id="dead", limit=400)
    Job.objects.update(locked_until=timezone.now() - timedelta(seconds=5))
    handled = run_threads(4, lambda i: QueueClient().tick_timeouts())
    # Each once: what one ticker passes over, another holds and handles.
    assert sum(handled) == 400
    assert Job.objects.filter(status="ready").count() == 200  # max_attempts 2: back to ready
    assert Job.objects.count() == 200  # max_attempts 1: dead letters
    from django_jobqueue.models import DeadLetter

    assert DeadLetter.objects.count() == 200


def subprocess_env() -> dict[str, str]:
    """Environment for a child process that uses this test run's database."""
    env = dict(os.environ, DJANGO_SETTINGS_MODULE="testproject.settings", PYTHONPATH=str(ROOT))
    env["DATABASE_URL"] = database_url()
    return env


PULLER = """
import json, os, time, django
django.setup()
from django_jobqueue import QueueClient
client, seen = QueueClient(), []
# Start together: a process that drained everything before the other started
# would prove nothing about two claimers at once.
open(READY, "w").close()
while not os.path.exists(GO):
    time.sleep(0.005)
while batch := client.pull_many(worker_id=WORKER, limit=5):
    for job in batch:
        seen.append(job.pk)
        assert client.ack(job, worker_id=WORKER)
print(json.dumps(seen))
"""


def test_two_processes_pulling_from_one_database_claim_each_job_once(queue, tmp_path):
    made = enqueue_many([("tests.noop", {"i": i}) for i in range(1000)])
    env = subprocess_env()
    go = tmp_path / "go"
    children = [
        subprocess.Popen(
            [
                sys.executable,
                "-c",
                f"WORKER = 'proc-{n}'\nREADY = {str(tmp_path / f'ready-{n}')!r}\nGO = {str(go)!r}\n{PULLER}",
            ],
            env=env,
            cwd=ROOT,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for n in range(2)
    ]
    deadline = time.monotonic() + 60
    while not all((tmp_path / f"ready-{n}").exists() for n in range(2)):
        assert time.monotonic() < deadline, "the pulling processes did not start"
        assert all(child.poll() is None for child in children), "a pulling process died"
        time.sleep(0.01)
    go.touch()
    outputs = [child.communicate(timeout=120) for child in children]
    for child, (_, err) in zip(children, outputs, strict=True):
        assert child.returncode == 0, err
    seen = [json.loads(out) for out, _ in outputs]
    claims = Counter(seen[0] + seen[1])
    assert set(claims) == {job.pk for job in made} and set(claims.values()) == {1}
    assert seen[0] and seen[1], "both processes should have claimed some jobs"
