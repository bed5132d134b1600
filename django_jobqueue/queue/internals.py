"""What the queue's hot path relies on beyond the documented APIs of CPython, Django and psycopg.

Each reliance is one small named object here, with what it relies on, what
breaks if a new version changes it, and the fallback if there is one.
``rows``, ``native``, ``validation`` and the statements of ``ops/`` use these
and reach into no library's internals themselves; ``tests/test_internals.py`` holds each one to what it
stands for, and names the internal and the versions when one has changed.
"""

from __future__ import annotations

import contextlib
import functools
import json
from collections.abc import Callable, Iterator, Sequence
from typing import Any, TypeVar

from django.db import models
from django.db.backends.base.base import BaseDatabaseWrapper
from django.db.backends.utils import CursorDebugWrapper, CursorWrapper
from django.db.models.base import ModelState
from django.db.models.signals import post_init, pre_init

M = TypeVar("M", bound=models.Model)

# -- CPython: the C JSON encoder ------------------------------------------------


def flat_json_encoder(encoder: json.JSONEncoder) -> Callable[[dict[str, Any], int], Sequence[str]] | None:
    """The C encoder that ``encoder.encode`` builds per call, built once, for a dict holding no container.

    Relies on ``json.encoder.c_make_encoder`` (CPython's ``_json`` accelerator)
    and its positional arguments (markers, default, encoder, indent, key and
    item separators, sort_keys, skipkeys, allow_nan), as
    ``JSONEncoder.iterencode`` passes them. Building it is half the cost of
    encoding a small payload. ``markers`` is None (no cycle check): only a
    flat dict, which cannot hold a cycle, may be given. Returns None where the
    accelerator is missing; the caller then uses ``encoder.encode``, which
    gives the same text, slower. Should the arguments change, building it
    raises at import, and the text it gives may differ from ``encoder``'s:
    both fail the test.
    """
    make = getattr(json.encoder, "c_make_encoder", None)
    if make is None:
        return None
    # The string encoder iterencode picks: the _ascii one only under ensure_ascii.
    ascii_only = encoder.ensure_ascii
    text_encoder = json.encoder.encode_basestring_ascii if ascii_only else json.encoder.encode_basestring
    built: Callable[[dict[str, Any], int], Sequence[str]] = make(
        None,
        encoder.default,
        text_encoder,
        None,
        encoder.key_separator,
        encoder.item_separator,
        encoder.sort_keys,
        encoder.skipkeys,
        encoder.allow_nan,
    )
    return built


# -- Django: a loaded instance without Model.__init__ ---------------------------


def init_signals_listened(model: type[models.Model]) -> bool:
    """True where a ``pre_init`` or ``post_init`` receiver listens for ``model``: build it the ORM's way."""
    return pre_init.has_listeners(model) or post_init.has_listeners(model)


def loaded_instance(model: type[M], using: str) -> M:
    """An instance of ``model`` with no field set yet, loaded from ``using`` as ``from_db`` leaves one.

    Relies on what ``Model.__init__`` and ``Model.from_db`` leave on an
    instance: a ``ModelState`` in ``_state`` (``adding`` False, ``db`` the
    alias) and each concrete field's value under its ``attname`` in
    ``__dict__``, nothing else. A field set by ``__dict__`` is read back
    through Django's ``DeferredAttribute``, a non-data descriptor. If Django
    adds to that state, instances built here lack it: the test compares one
    with ``from_db``'s. No fallback; ``init_signals_listened`` decides when
    ``from_db`` itself runs.
    """
    instance = model.__new__(model)
    state = ModelState()
    state.adding = False
    state.db = using
    instance.__dict__["_state"] = state
    return instance


def instance_builder(model: type[M], using: str, attnames: Sequence[str]) -> Callable[[list[Any]], M]:
    """What builds ``model`` instances loaded from ``using`` out of every concrete field's value, in order.

    ``Model.__init__``'s ``setattr`` per field is most of ``from_db``'s cost;
    this fills ``__dict__`` at once (see ``loaded_instance``). Where an init
    signal has a receiver, ``from_db`` itself runs, so that it is sent.
    """
    if init_signals_listened(model):
        return lambda values: model.from_db(using, attnames, values)

    def build(values: list[Any]) -> M:
        instance = loaded_instance(model, using)
        instance.__dict__.update(zip(attnames, values, strict=True))
        return instance

    return build


def instance_from_attrs(model: type[M], using: str, attrs: dict[str, Any]) -> M:
    """``loaded_instance`` whose ``__dict__`` becomes ``attrs``, every concrete field's value by attname.

    ``attrs`` is taken, not copied: one dict per instance, the cheapest way
    to fill it. Only where no init signal has a receiver (``init_signals_listened``).
    """
    # loaded_instance's steps, inline: a batch pays this once a job.
    instance = model.__new__(model)
    state = ModelState()
    state.adding = False
    state.db = using
    attrs["_state"] = state
    instance.__dict__ = attrs
    return instance


# -- psycopg's own cursor under Django's cursor wrapper --------------------------


def driver_connection(connection: BaseDatabaseWrapper) -> Any:
    """The driver's connection under ``connection``, opened as Django opens it for a cursor.

    Relies on ``BaseDatabaseWrapper._cursor``'s first steps (a failed health
    check closes, ``ensure_connection`` opens) and on ``connection.connection``
    being the psycopg connection Django's own cursors use, so that a cursor on
    it shares Django's session and transaction. If Django changed either, a
    cursor on it would run outside Django's transaction: the test checks the
    same session.
    """
    connection.close_if_health_check_failed()
    connection.ensure_connection()
    return connection.connection


def wrap_driver_cursor(connection: BaseDatabaseWrapper, cursor: Any) -> CursorWrapper:
    """``cursor``, the driver's, in the wrapper ``connection.cursor()`` puts Django's own cursors in.

    Relies on ``BaseDatabaseWrapper._prepare_cursor``: thread-sharing check,
    then ``CursorWrapper`` (or, when queries are logged, ``CursorDebugWrapper``)
    built as ``(cursor, connection)``. That wrapper applies execute wrappers,
    the broken-transaction check and Django's exceptions; the test runs a
    statement through each.
    """
    connection.validate_thread_sharing()
    wrapper = _ServerBoundDebugCursor if connection.queries_logged else CursorWrapper
    return wrapper(cursor, connection)


def binary_cursor(cursor_class: type[Any], driver_connection: Any) -> Any:
    """A ``cursor_class`` cursor on the psycopg ``driver_connection`` whose results come in binary.

    Relies on psycopg's ``Cursor.format``, the attribute
    ``Connection.cursor(binary=True)`` sets, since ``cursor_class`` is built
    directly rather than through the connection's own ``cursor()``.

    A binary COPY whose columns are named by type (``Copy.set_types``) dumps
    each with the dumper registered last for that type's oid. For ``bytea``
    that is psycopg's DB-API ``Binary`` dumper, a Python subclass of the C one
    for ``bytes`` that checks each value's type first: a sixth of a batch
    enqueue's time went there. Registered again here for ``bytes``, the C
    dumper is the last for the oid; the test checks the COPY picks it.
    """
    import psycopg  # here: a project on SQLite alone need not install it

    cursor = cursor_class(driver_connection)
    cursor.format = psycopg.pq.Format.BINARY
    cursor.adapters.register_loader("jsonb", _jsonb_loader())
    binary = psycopg.adapt.PyFormat.BINARY
    cursor.adapters.register_dumper(bytes, cursor.adapters.get_dumper(bytes, binary))
    return cursor


_decode_json = json.JSONDecoder().decode


def json_loads(data: bytes | memoryview | str) -> Any:
    """``json.loads`` for the jsonb columns a claim returns, three a job, most of them ``[]``.

    psycopg hands ``json.loads`` bytes, which it first sniffs for their
    encoding; jsonb's text is UTF-8, so decoding it directly skips that, and
    the empty array and object (a job's history and worker ids, a payload of
    no arguments) skip the parser. A fresh object each time: the caller may
    change it.
    """
    if data == b"[]":
        return []
    if data == b"{}":
        return {}
    return _decode_json(data if isinstance(data, str) else str(data, "utf-8"))


@functools.cache
def _jsonb_loader() -> type[Any]:
    """psycopg's loader of binary jsonb (a version byte, then the text), through ``json_loads``."""
    from psycopg import DataError
    from psycopg.adapt import Loader
    from psycopg.pq import Format

    class JsonbLoader(Loader):
        format = Format.BINARY

        def load(self, data: Any) -> Any:
            if not data or data[0] != 1:
                raise DataError(f"unknown jsonb binary format: {data[:1]!r}")
            return json_loads(data[1:])

    return JsonbLoader


def driver_cursor(cursor: CursorWrapper) -> Any:
    """The driver's cursor inside Django's ``cursor``: its ``fetchall`` spares the wrapper's function.

    Relies on ``CursorWrapper.cursor``, the attribute Django's wrapper keeps
    the driver's cursor in.
    """
    return cursor.cursor


@contextlib.contextmanager
def copy_rows(
    connection: BaseDatabaseWrapper, cursor: CursorWrapper, sql: str, types: Sequence[str]
) -> Iterator[Callable[[Sequence[Any]], None]]:
    """Run ``sql``, a ``COPY … FROM STDIN``, on ``cursor``; yield what writes one row of it.

    ``types`` names each column's type, in order. The statement is logged with
    the queries, as Django logs its own, and ends, written or abandoned, when
    the block does: an exception out of the block abandons it. Relies on
    psycopg's ``Cursor.copy``, reached through ``CursorWrapper.__getattr__``;
    on ``BaseDatabaseWrapper.wrap_database_errors``, which turns psycopg's
    errors into Django's; and on ``CursorDebugWrapper.debug_sql``, the context
    manager that logs Django's own queries.
    """
    logged = cursor.debug_sql(sql) if isinstance(cursor, CursorDebugWrapper) else contextlib.nullcontext()
    with logged, connection.wrap_database_errors, cursor.copy(sql) as copy:
        copy.set_types(types)
        yield copy.write_row


class _ServerBoundDebugCursor(CursorDebugWrapper):
    """Logs each statement with its parameters quoted in, as Django does under server-side binding.

    Django's own debug cursor reads the text back from the driver, which holds
    none for a statement the server binds (or has prepared). Relies on
    ``CursorDebugWrapper.debug_sql(sql, params)``, the context manager that
    times and logs Django's own queries, and on the PostgreSQL backend's
    ``ops.compose_sql`` (psycopg's client-side quoting); if a value cannot be
    quoted, the statement is logged as written.
    """

    def execute(self, sql: Any, params: Any = None) -> Any:
        import psycopg

        try:
            text = self.db.ops.compose_sql(sql, params)
        except psycopg.Error:
            text = sql
        with self.debug_sql(text, params):
            return CursorWrapper.execute(self, sql, params)
