"""A module no worker may import: importing it writes the file named by ``JOBQUEUE_CANARY``.

A job named ``tests.canary_module.run`` is enqueued by the tests; a worker that
resolved job names by importing dotted paths would import this module.
"""

import os
from pathlib import Path

CANARY = os.environ.get("JOBQUEUE_CANARY")
if CANARY:
    Path(CANARY).write_text("imported\n")


def run() -> None:
    if CANARY:
        Path(CANARY).write_text("ran\n")
