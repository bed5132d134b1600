"""The internals of CPython, Django and psycopg that the hot path relies on (``queue/internals.py``).

Each test holds one reliance to what it stands for, and fails naming the
internal and the versions installed: a new Python, Django or psycopg that
changes one shows here, not as a wrong job or a slow worker.
"""

from __future__ import annotations

import json
import platform
from datetime import UTC, datetime
from importlib import metadata
from typing import Any

import django
import pytest
from django.db import DEFAULT_DB_ALIAS, ProgrammingError, connection, connections, transaction
from django.db.backends.utils import CursorDebugWrapper, CursorWrapper
from django.db.models.base import ModelState
from django.db.models.signals import post_init, pre_init
from django.test.utils import CaptureQueriesContext

from django_jobqueue.models import Job
from django_jobqueue.queue import internals, validation
from django_jobqueue.queue.native import bound_cursor, fetch_rows
from django_jobqueue.queue.ops.new_jobs import NewJobBuilder, inserted_values, with_trace_context
from django_jobqueue.queue.ops.tables import NewJob
from django_jobqueue.queue.rows import JOB_FIELDS, jobs_from_values, loaded_job


def _psycopg_version() -> str:
    try:
        return metadata.version("psycopg")
    except metadata.PackageNotFoundError:
        return "absent"


VERSIONS = (
    f"Python {platform.python_version()} ({platform.python_implementation()}), "
    f"Django {django.__version__}, psycopg {_psycopg_version()}"
)


def changed(internal: str, consequence: str) -> str:
    """The failure message: which internal, under which versions, and what it breaks."""
    return f"{internal} is not as queue/internals.py relies on under {VERSIONS}: {consequence}"


# -- CPython: the C JSON encoder ------------------------------------------------

# The encoding of every payload: validation._JSON's options, as json.dumps takes them.
DUMPS_OPTIONS: dict[str, Any] = {"ensure_ascii": False, "allow_nan": False, "separators": (",", ":")}

FLAT_PAYLOADS = [
    {},
    {"user": 7, "name": "ada", "ok": True, "no": False, "none": None},
    {"quote": 'say "hi"', "backslash": "a\\b", "controls": "\n\t\r\x01\x1f\x7f", "slash": "a/b"},
    {"non-ascii": "Zoë, 東京, ☃, 🎉", "separators": "\u2028\u2029", "bom": "\ufeff"},
    {"floats": 1.5, "tiny": 5e-324, "huge": 1.7976931348623157e308, "neg_zero": -0.0, "sum": 0.1 + 0.2},
    {"ints": 2**63, "negative": -(2**70), "zero": 0},
    {"clé": 1, "": "empty key", "x" * 300: "long key"},
]


def flat_encoder() -> Any:
    encoder = internals.flat_json_encoder(validation._JSON)
    assert encoder is not None, changed(
        "json.encoder.c_make_encoder",
        "CPython's C JSON accelerator is missing, so flat payloads encode through "
        "JSONEncoder.encode, which builds an encoder per call (correct, but slower)",
    )
    return encoder


def test_the_c_json_encoder_is_there():
    assert validation._FLAT_JSON is not None, changed(
        "json.encoder.c_make_encoder", "validation encodes every payload the slower way"
    )
    flat_encoder()


@pytest.mark.parametrize("payload", FLAT_PAYLOADS)
def test_the_c_encoder_writes_what_json_dumps_writes(payload):
    expected = json.dumps(payload, **DUMPS_OPTIONS)
    assert "".join(flat_encoder()(payload, 0)) == expected, changed(
        "json.encoder.c_make_encoder's arguments or output",
        "flat payloads would be stored as other JSON than json.dumps writes",
    )


@pytest.mark.parametrize("payload", FLAT_PAYLOADS)
def test_both_encodings_of_a_payload_agree(payload, monkeypatch):
    fast, fast_copy = validation.encode_payload_and_copy(payload, 1 << 20)
    monkeypatch.setattr(validation, "_FLAT_JSON", None)  # as where the accelerator is missing
    fallback, fallback_copy = validation.encode_payload_and_copy(payload, 1 << 20)

    assert fast == fallback == json.dumps(payload, **DUMPS_OPTIONS)
    assert fast_copy == fallback_copy == payload


@pytest.mark.parametrize("value", [float("nan"), float("inf"), -float("inf")])
def test_the_c_encoder_refuses_what_json_cannot_carry(value):
    with pytest.raises(ValueError):
        "".join(flat_encoder()({"x": value}, 0))


def test_without_the_c_encoder_there_is_no_flat_encoder(monkeypatch):
    monkeypatch.setattr(json.encoder, "c_make_encoder", None)
    assert internals.flat_json_encoder(validation._JSON) is None


# -- Django: a loaded Job without Model.__init__ --------------------------------

ATTNAMES = [field.attname for field in JOB_FIELDS]
NOW = datetime(2026, 3, 1, 12, 30, tzinfo=UTC)


def field_values() -> list[Any]:
    """A value for every concrete field of ``Job``, as a loaded row holds them."""
    job = Job(
        id=42,
        name="tests.internals",
        queue="default",
        payload={"user": 7, "tags": ["a"]},
        priority=3,
        max_attempts=5,
        visibility_timeout=300.0,
        run_at=NOW,
        created_at=NOW,
        unique_key="k-1",
    )
    return [getattr(job, attname) for attname in ATTNAMES]


def assert_loaded_as_orm_loads(built: Job, using: str) -> None:
    """``built`` holds what ``Job.from_db`` leaves on an instance, field by field and in ``_state``."""
    orm = Job.from_db(using, ATTNAMES, [getattr(built, attname) for attname in ATTNAMES])
    assert set(built.__dict__) == set(orm.__dict__), changed(
        "Model.__init__ / from_db's instance attributes",
        f"the ORM's instance holds {sorted(set(orm.__dict__) ^ set(built.__dict__))} "
        "where jobs built without Model.__init__ differ",
    )
    for attname in ATTNAMES:
        assert getattr(built, attname) == getattr(orm, attname), attname
    assert type(built._state) is type(orm._state) is ModelState
    assert vars(built._state) == vars(orm._state), changed(
        "ModelState as from_db leaves it", "jobs built without Model.__init__ have another _state"
    )
    assert built.get_deferred_fields() == set(), changed(
        "DeferredAttribute reading __dict__", "a field set in __dict__ reads as deferred"
    )


def test_a_job_built_without_init_is_the_one_from_db_makes():
    built = loaded_job("other", field_values())
    assert type(built) is Job
    assert (built._state.adding, built._state.db) == (False, "other")
    assert_loaded_as_orm_loads(built, "other")


def test_a_job_built_from_inserted_values_is_the_one_from_db_makes():
    values = dict(zip(ATTNAMES, field_values(), strict=True))
    shared = {"status": values.pop("status")}
    [built] = jobs_from_values("default", [values], shared)
    assert_loaded_as_orm_loads(built, "default")


@pytest.mark.parametrize("signal", [pre_init, post_init], ids=["pre_init", "post_init"])
def test_with_an_init_receiver_jobs_are_built_by_from_db(signal):
    sent: list[str] = []

    def note(sender: Any, **kwargs: Any) -> None:
        sent.append(sender.__name__)

    values = field_values()
    signal.connect(note, sender=Job)
    try:
        built = loaded_job("default", values)
        [inserted] = jobs_from_values("default", [dict(zip(ATTNAMES, values, strict=True))])
    finally:
        signal.disconnect(note, sender=Job)
    assert sent == ["Job", "Job"]
    assert_loaded_as_orm_loads(built, "default")
    assert_loaded_as_orm_loads(inserted, "default")


# -- psycopg's own cursor under Django's cursor wrapper --------------------------


def bound() -> CursorWrapper:
    """The ``bound_cursor`` of the default database (keyed by the connection, not its proxy)."""
    return bound_cursor(connections[DEFAULT_DB_ALIAS])


@pytest.fixture
def pg_cursor(postgresql_only: None, transactional_db: None) -> CursorWrapper:
    return bound()


def test_the_bound_cursor_is_psycopgs_own_on_djangos_connection(pg_cursor):
    import psycopg

    raw = internals.driver_cursor(pg_cursor)
    assert isinstance(pg_cursor, CursorWrapper)
    assert isinstance(raw, psycopg.Cursor), changed(
        "CursorWrapper.cursor", f"Django's wrapper holds a {type(raw).__name__}, not psycopg's cursor"
    )
    assert isinstance(connection.connection, psycopg.Connection), changed(
        "BaseDatabaseWrapper.connection", "it is not the psycopg connection"
    )
    assert raw.connection is connection.connection
    assert raw.format == psycopg.pq.Format.BINARY, changed("psycopg's Cursor.format", "results come as text")
    pg_cursor.execute("SELECT now()")
    assert raw.pgresult is not None and raw.pgresult.fformat(0) == psycopg.pq.Format.BINARY


def test_the_bound_cursor_shares_djangos_session_and_transaction(pg_cursor):
    with transaction.atomic(), connection.cursor() as django_cursor:
        django_cursor.execute("SELECT pg_backend_pid(), txid_current()")
        pg_cursor.execute("SELECT pg_backend_pid(), txid_current()")
        assert fetch_rows(connection, pg_cursor) == [django_cursor.fetchone()], changed(
            "BaseDatabaseWrapper.connection", "the queue's statements run outside Django's transaction"
        )


def test_djangos_execute_wrappers_see_its_statements(pg_cursor):
    seen: list[str] = []

    def wrapper(execute: Any, sql: str, params: Any, many: bool, context: Any) -> Any:
        seen.append(sql)
        return execute(sql, params, many, context)

    with connection.execute_wrapper(wrapper):
        bound().execute("SELECT %s::int", [1])
    assert seen == ["SELECT %s::int"], changed("CursorWrapper.execute", "execute wrappers are skipped")


def test_the_query_log_shows_its_statements_with_their_parameters(pg_cursor):
    with CaptureQueriesContext(connection) as queries:
        cursor = bound()
        assert isinstance(cursor, CursorDebugWrapper)
        cursor.execute("SELECT %s::int, %s::text", [41, "it's"])
    assert [query["sql"] for query in queries.captured_queries] == ["SELECT 41::int, 'it''s'::text"], changed(
        "CursorDebugWrapper.debug_sql / DatabaseOperations.compose_sql", "the query log misses the statement"
    )


def test_errors_are_djangos_and_break_the_transaction_as_djangos_do(pg_cursor):
    from django.db.transaction import TransactionManagementError

    with transaction.atomic():
        with pytest.raises(ProgrammingError), transaction.atomic():
            bound().execute("SELECT * FROM no_such_table")
        bound().execute("SELECT 1")  # the savepoint rolled back: usable
        with pytest.raises(ProgrammingError), transaction.atomic(savepoint=False):
            bound().execute("SELECT * FROM no_such_table")
        with pytest.raises(TransactionManagementError, match="An error occurred in the current transaction"):
            bound().execute("SELECT 1")


def test_copy_is_psycopgs_through_djangos_wrapper(pg_cursor):
    assert pg_cursor.copy.__self__ is internals.driver_cursor(pg_cursor), changed(
        "CursorWrapper.__getattr__", "the batch COPY cannot reach psycopg's Cursor.copy"
    )


def test_a_copy_is_logged_and_fails_with_djangos_errors(pg_cursor):
    sql = "COPY no_such_table (id) FROM STDIN (FORMAT BINARY)"
    with CaptureQueriesContext(connection) as queries, transaction.atomic():
        with pytest.raises(ProgrammingError), transaction.atomic():
            with internals.copy_rows(connection, bound(), sql, ["int8"]):
                pass  # the COPY fails as it starts
    assert [query["sql"] for query in queries.captured_queries if "COPY" in query["sql"]] == [sql], changed(
        "CursorDebugWrapper.debug_sql", "the query log misses a batch's COPY"
    )


def test_django_leaves_preparing_to_whoever_asks(pg_cursor):
    connection.close()
    connection.ensure_connection()
    assert connection.connection.prepare_threshold is None, changed(
        "the PostgreSQL backend's prepare_threshold (None)",
        "psycopg prepares Django's own statements, or the queue's are never prepared",
    )
    bound()
    assert connection.connection.prepare_threshold is not None


def test_psycopg_reads_timestamps_in_the_orms_time_zone(pg_cursor):
    pg_cursor.execute("SELECT now()")
    [(now,)] = fetch_rows(connection, pg_cursor)
    assert now.tzinfo == connection.timezone, changed(
        "psycopg's timestamptz loader or BaseDatabaseWrapper.timezone",
        "every claimed row's timestamps are converted again (correct, but slower)",
    )


def test_a_copy_dumps_bytea_with_the_c_dumper_for_bytes(pg_cursor):
    import psycopg

    adapters = internals.driver_cursor(pg_cursor).adapters
    by_oid = adapters.get_dumper_by_oid(adapters.types["bytea"].oid, psycopg.pq.Format.BINARY)
    assert by_oid is adapters.get_dumper(bytes, psycopg.adapt.PyFormat.BINARY), changed(
        "psycopg's AdaptersMap (the last dumper registered for an oid is the one a COPY by type uses)",
        "each payload of a batch enqueue goes through the DB-API Binary dumper's Python code (slower)",
    )


@pytest.mark.parametrize("traced", [False, True])
def test_a_new_job_built_from_its_batch_template_is_the_one_its_values_make(traced):
    new = NewJob(
        name="tests.noop",
        queue="q",
        payload_json='{"a": [1, 2]}',
        priority=5,
        max_attempts=3,
        visibility_timeout=12.5,
        timeout=9.0,
        run_at=None,
        delay=0.0,
        unique_key=None,
        task_backend="tasks",
        concurrency_key="k",
        concurrency_limit=2,
    )
    now = datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC)
    shared = {"status": "ready", "created_at": now}
    trace = {"traceparent": "00-1-2-01"} if traced else None
    builder = NewJobBuilder("default", shared, trace)
    first, second = builder.build(new, 7, now), builder.build(new._replace(payload={"b": 1}), 8, now)
    values = [inserted_values(new, 7, now), inserted_values(new._replace(payload={"b": 1}), 8, now)]
    expected = jobs_from_values("default", with_trace_context(values, trace), shared)
    for built, wanted in zip((first, second), expected, strict=True):
        assert_loaded_as_orm_loads(built, "default")
        assert {a: getattr(built, a) for a in ATTNAMES} == {a: getattr(wanted, a) for a in ATTNAMES}
    # Each job its own lists and payload.
    assert first.worker_ids is not second.worker_ids and first.attempt_history is not second.attempt_history
    assert first.payload is not second.payload
