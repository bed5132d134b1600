"""Processes for the rescue-racing-ack scenario: ``python -m tests.faults.racer ROLE STOP_FILE``.

``puller``: threads that each claim one job with a short claim, run it for as
long as the claim lasts, ack it, and write the ack's answer to the ledger.
``ticker``: ``tick_timeouts`` in a tight loop. Both run until ``STOP_FILE``
exists; a ticker then prints how many claims it handled.
"""

from __future__ import annotations

import os
import random
import sys
import threading
import time

CLAIM_SECONDS = 0.2
THREADS = 8


def puller(stop_file: str, worker_id: str) -> None:
    from django.db import connections

    from django_jobqueue import QueueClient

    from . import ledger

    client = QueueClient()

    def loop() -> None:
        try:
            while not os.path.exists(stop_file):
                job = client.pull(worker_id=worker_id, visibility_timeout=CLAIM_SECONDS)
                if job is None:
                    time.sleep(0.01)
                    continue
                entry = ledger.start(job.pk, job.claim_token, job.attempts, worker_id)
                # As long as the claim, give or take: the ack races the rescue.
                time.sleep(CLAIM_SECONDS * random.uniform(0.9, 1.0))
                acked = client.ack(job, worker_id=worker_id)
                ledger.end(entry, note="acked" if acked else "refused")
        finally:
            connections.close_all()

    threads = [threading.Thread(target=loop) for _ in range(THREADS)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()


def ticker(stop_file: str) -> None:
    from django_jobqueue import QueueClient

    client = QueueClient()
    handled = ticks = 0
    while not os.path.exists(stop_file):
        handled += client.tick_timeouts()
        ticks += 1
    print(f"ticks={ticks} handled={handled}", flush=True)


def main() -> None:
    import django

    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "testproject.settings")
    django.setup()
    role, stop_file = sys.argv[1], sys.argv[2]
    if role == "puller":
        puller(stop_file, sys.argv[3])
    else:
        ticker(stop_file)


if __name__ == "__main__":
    main()
