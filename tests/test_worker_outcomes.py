"""The outcomes a job's line can log are the ``Outcome`` enum's words, as the docs list them."""

from __future__ import annotations

import logging
import re
from pathlib import Path

from django_jobqueue.worker.run.job_line import OUTCOME_LOG_LEVELS
from django_jobqueue.worker.run.outcomes import Outcome

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


def test_a_job_line_is_the_record_logger_log_would_make(caplog):
    """Made without the logging module's search of the stack, and still through the logger's filters."""
    from django_jobqueue.models import Job
    from django_jobqueue.worker.run.executor import Executor
    from django_jobqueue.worker.run.job_line import log_outcome, logger

    executor = Executor(None, "w")  # type: ignore[arg-type]
    job = Job(id=7, name="tests.noop", queue="q", attempts=1, max_attempts=3)
    with caplog.at_level(logging.INFO, logger="django_jobqueue"):
        executor._log(job, 0.25, Outcome.DONE, "")
    [record] = caplog.records
    assert record.getMessage() == "job tests.noop id=7 attempt=1/3 duration=0.250s outcome=done"
    assert (record.name, record.levelno, record.funcName) == (logger.name, logging.INFO, "log_outcome")
    assert record.pathname == log_outcome.__code__.co_filename
    assert record.job_fields["id"] == 7 and record.job_fields["outcome"] == "done"

    caplog.clear()
    refuse = logging.Filter("nothing.of.ours")
    logger.addFilter(refuse)
    try:
        with caplog.at_level(logging.INFO, logger="django_jobqueue"):
            executor._log(job, 0.25, Outcome.DONE, "")
    finally:
        logger.removeFilter(refuse)
    assert not caplog.records
