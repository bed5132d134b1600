"""Behind PgBouncer 1.18 in transaction mode, prepared statements fail; the queue's error names the setting.

Each test starts a real PgBouncer of its own (``tests/pooler.py``, with
scripts/pgbouncer) in front of the test database. Two clients that prepare
through it meet each other's statements on the server connections they
share: psycopg alone says only "prepared statement ... already exists" (or
"does not exist", or "bind message supplies ..."); the queue says which
setting to change.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest
from django.db import DatabaseError, connections
from django.test import override_settings

from django_jobqueue.queue.native import run_bound, run_in_transaction
from tests.pooler import pgbouncer
from tests.worker_support import database_url

pytestmark = pytest.mark.usefixtures("postgresql_only")

TWO = "SELECT %s::int + %s::int"
THREE = "SELECT %s::int + %s::int + %s::int"
ADVICE = "set JOBQUEUE['PREPARED_STATEMENTS'] = False (docs/settings.md#prepared_statements)"


@pytest.fixture
def pooled(transactional_db: None) -> Iterator[dict[str, Any]]:
    """The test database's connection settings, pointed at a PgBouncer in transaction mode."""
    settings = connections["default"].settings_dict
    where = settings["HOST"], settings["PORT"]
    with pgbouncer(database_url()) as port:
        connections["default"].close()
        settings["HOST"], settings["PORT"] = "127.0.0.1", port
        try:
            yield settings
        finally:
            connections["default"].close()
            settings["HOST"], settings["PORT"] = where


def other_client(settings: dict[str, Any]) -> psycopg.Connection[Any]:
    """Another client of the pooler that prepares every statement, as the queue's cursors do."""
    return psycopg.connect(
        host=settings["HOST"], port=settings["PORT"], user=settings["USER"], dbname=settings["NAME"],
        autocommit=True, prepare_threshold=0,
    )  # fmt: skip


def test_the_driver_alone_says_nothing_of_the_setting(pooled):
    with other_client(pooled) as one, other_client(pooled) as two:
        with pytest.raises(psycopg.Error) as raised:
            for _ in range(3):
                one.execute(TWO, [1, 2])
                two.execute(THREE, [1, 2, 3])
    assert 'prepared statement "_pg3_0"' in str(raised.value)
    assert "PREPARED_STATEMENTS" not in str(raised.value)


# The queue's two ways to its statements: pipelined in a transaction, or one on its cursor.
WAYS = {
    "pipelined": lambda: run_in_transaction("default", [(TWO, [1, 2])])[0],
    "one statement": lambda: run_bound("default", TWO, [1, 2]),
}


def interleave(settings: dict[str, Any], way: str) -> None:
    """The queue's statements on ``default``, and another client's, by turns through the pooler."""
    with other_client(settings) as other:
        for _ in range(3):
            other.execute(THREE, [1, 2, 3])
            assert WAYS[way]() == [(3,)]


@pytest.fixture(params=list(WAYS))
def way(request: pytest.FixtureRequest) -> str:
    return str(request.param)


def test_the_queue_names_the_setting_and_the_pooler(pooled, way, caplog, monkeypatch):
    monkeypatch.setattr("django_jobqueue.queue.native._pooler_logged", False)
    caplog.set_level(logging.ERROR, logger="django_jobqueue.queue.native")
    with pytest.raises(DatabaseError) as raised:
        interleave(pooled, way)
    message = str(raised.value)
    assert message.startswith("the database answered as a connection pooler in transaction mode does (")
    assert 'prepared statement "_pg3_0"' in message and message.endswith(ADVICE)
    assert isinstance(raised.value.__cause__, psycopg.Error), "the driver's error stays its cause"
    [logged] = [record.getMessage() for record in caplog.records if ADVICE in record.getMessage()]
    assert logged == message


def test_without_prepared_statements_the_pooler_is_no_trouble(pooled, way):
    with override_settings(JOBQUEUE={"PREPARED_STATEMENTS": False}):
        interleave(pooled, way)
