"""The outcomes a job's line can log are the ``Outcome`` enum's words, as the docs list them."""

from __future__ import annotations

import logging
import re
from pathlib import Path

from django_jobqueue.worker.executor import OUTCOME_LOG_LEVELS
from django_jobqueue.worker.outcomes import Outcome

WORKERS_DOC = Path(__file__).resolve().parent.parent / "docs" / "workers.md"


def documented_outcomes() -> dict[str, str]:
    """The rows of the docs' outcome table: word -> level."""
    rows = re.findall(r"^\| `(\w+)` \| .* \| (INFO|WARNING|ERROR) \|$", WORKERS_DOC.read_text(), re.MULTILINE)
    return dict(rows)


def test_the_docs_list_every_logged_outcome_at_its_level():
    logged = {outcome for outcome in Outcome if outcome is not Outcome.PENDING}
    levels = {
        str(outcome): logging.getLevelName(OUTCOME_LOG_LEVELS.get(outcome, logging.WARNING))
        for outcome in logged
    }
    assert documented_outcomes() == levels


def test_an_outcome_logs_as_its_word():
    record = logging.LogRecord(
        "django_jobqueue", logging.ERROR, __file__, 1, "outcome=%s", (Outcome.DEAD,), None
    )
    assert record.getMessage() == "outcome=dead"
