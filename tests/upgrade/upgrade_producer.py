"""Enqueue the upgrade test's jobs at a steady pace, with one tree's code.

    python upgrade_producer.py FIRST STOP PER_SECOND [--hold-at N --until PATH]

enqueues ``upgrade.record`` jobs for ``n`` in ``range(FIRST, STOP)``, in
batches of ten, ``PER_SECOND`` jobs a second; each ``n`` whose remainder by
100 is 37 fails for good. With ``--hold-at``, it waits before ``n == N`` until
the file ``PATH`` exists: the test holds an old producer across the migration,
so that old code enqueues after it too. The ``PYTHONPATH`` names the tree
whose code it runs (``testproject`` and ``django_jobqueue``) and this directory.
Its last line names the ``django_jobqueue`` package it ran.
"""

from __future__ import annotations

import argparse
import os
import time

BATCH = 10


def fails(n: int) -> bool:
    return n % 100 == 37


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("first", type=int)
    parser.add_argument("stop", type=int)
    parser.add_argument("per_second", type=float)
    parser.add_argument("--hold-at", type=int)
    parser.add_argument("--until")
    args = parser.parse_args()
    if args.hold_at is not None and (args.until is None or (args.hold_at - args.first) % BATCH):
        parser.error(f"--hold-at needs --until and a multiple of {BATCH} after FIRST")

    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "testproject.settings")
    import django

    django.setup()
    from upgrade_jobs import PACKAGE  # registers the job, so that its options apply here too

    from django_jobqueue import QueueClient

    client = QueueClient()
    # The pace: each batch waits for its own time, so that a slow round does not slow the rest.
    began, origin = time.monotonic(), args.first
    for first in range(args.first, args.stop, BATCH):
        if first == args.hold_at:
            while not os.path.exists(args.until):
                time.sleep(0.05)
            began, origin = time.monotonic(), first
        numbers = range(first, min(first + BATCH, args.stop))
        client.push_many([("upgrade.record", {"n": n, "fail": fails(n)}, {}) for n in numbers])
        time.sleep(max(0.0, began + (numbers.stop - origin) / args.per_second - time.monotonic()))
    print(f"enqueued {args.stop - args.first} jobs from {args.first} with {PACKAGE}", flush=True)


if __name__ == "__main__":
    main()
