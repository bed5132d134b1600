"""The engine of each database: what the statements ask of it."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any, cast

import pytest
from django.db import connection
from django.test import override_settings

from django_jobqueue.conf import DEFAULTS, jobqueue_settings
from django_jobqueue.queue import engine_for
from django_jobqueue.queue.engines import ENGINES, MARIADB, Engine


def test_the_connection_gets_the_engine_of_its_database() -> None:
    engine = engine_for(connection)
    assert engine.vendor == connection.vendor
    # Workers wake by notification exactly where the database can send one.
    assert engine.supports_listen_notify is (connection.vendor == "postgresql")


def test_a_database_without_an_engine_is_named_in_the_error() -> None:
    oracle = cast(Any, SimpleNamespace(vendor="oracle"))
    with pytest.raises(NotImplementedError, match="'oracle' database"):
        engine_for(oracle)


@pytest.mark.parametrize("engine", [*ENGINES.values(), MARIADB], ids=[*ENGINES, "mariadb"])
def test_an_engine_sets_only_what_the_protocol_declares(engine: Engine) -> None:
    """A misspelt flag would be a new attribute nobody reads: the database's capability silently off."""
    declared = set(Engine.__annotations__)
    # Its own spelling of a method the protocol has is the engine's to give.
    methods = {name for name, value in vars(Engine).items() if callable(value)}
    assert {name for name in vars(type(engine)) if not name.startswith("__")} <= declared | methods
    flags = [name for name in declared if name.startswith("supports_")]
    assert all(type(getattr(engine, flag)) is bool for flag in flags)
    assert engine.now and engine.now_plus("1") and engine.json_push("c", "%s") and engine.json_pop("c")


def test_an_engine_without_row_locks_spells_no_lock() -> None:
    for engine in [*ENGINES.values(), MARIADB]:
        assert bool(engine.skip_locked) is engine.supports_skip_locked
        assert bool(engine.for_update) is engine.supports_select_for_update


def test_merged_settings_fill_in_the_defaults_of_what_is_not_set() -> None:
    with override_settings(JOBQUEUE={"MAX_ATTEMPTS": 9}):
        merged = jobqueue_settings.merged()
    assert merged == {**DEFAULTS, "MAX_ATTEMPTS": 9}
