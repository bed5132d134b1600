"""A job's change of status between live (ready, running, waiting) and finished (done, cancelled).

Where the engine keeps finished jobs apart (PostgreSQL: the job table is
partitioned by status, migration 0011), such a change moves the row: one
statement deletes it from one partition and inserts it, changed, into the
other. Never an UPDATE: PostgreSQL would move an updated row across
partitions itself, but another transaction whose UPDATE, DELETE or ``SELECT
… FOR UPDATE`` of the row waited on that one then fails ("tuple to be locked
was already moved to another partition") where it should find the row gone.
A heartbeat, a claim or a cancel that met an ack mid-flight would fail with
it. A row deleted is passed over by each of them, as a row that no longer
matches is: the same outcome as on one table.

Elsewhere (SQLite) the change is the ``UPDATE`` it always was.

The statements' SQL refers to the job's columns as ``{JOB}.column`` or
unqualified, in both forms: the partition deleted from and the rows moved are
aliased as the job table.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from ..engines import Engine
from ..rows import JOB_COLUMNS, JOB_COLUMNS_SQL
from .returning import update_returning
from .tables import FINISHED_JOBS, JOB, LIVE_JOBS, cursor_and_engine


@dataclass(frozen=True)
class Change:
    """What a transition writes: each changed column's new value, as SQL over the row's old values.

    ``params`` holds the parameters of the expressions that take some, by column.
    ``joined`` is a table expression the ``WHERE`` and the values may read
    (``unnest(…) AS acks(…)``), with ``joined_params``; where the row is moved,
    ``carried`` names the columns of it the values read, each as ``expr AS
    name``, and the values read them by that name.
    """

    sets: Mapping[str, str]
    params: Mapping[str, Sequence[Any]] = field(default_factory=dict)
    joined: str = ""
    joined_params: Sequence[Any] = ()
    carried: str = ""

    def values(self, columns: Sequence[str]) -> tuple[list[str], list[Any]]:
        """The new value of each of ``columns`` (the old one where unchanged), and their parameters."""
        values = [self.sets.get(column, column) for column in columns]
        params = [param for column in columns if column in self.sets for param in self.params.get(column, ())]
        return values, params


def transition_cte(
    engine: Engine,
    name: str,
    change: Change,
    where: str,
    where_params: Sequence[Any],
    returning: str,
    to_finished: bool = True,
) -> tuple[str, list[Any]]:
    """A ``WITH`` item (or two) whose last is ``name``: ``returning`` of each job ``where`` picks, changed.

    ``to_finished``: the jobs picked are live and end finished; else the other way.
    """
    if not engine.finished_jobs_apart:
        statement, params = in_place(change, where, where_params, returning)
        return f"{name} AS ({statement})", params
    source, target = (LIVE_JOBS, FINISHED_JOBS) if to_finished else (FINISHED_JOBS, LIVE_JOBS)
    joined = f" USING {change.joined}" if change.joined else ""
    carried = f", {change.carried}" if change.carried else ""
    values, value_params = change.values(JOB_COLUMNS)
    sql = (
        f"{name}_rows AS (DELETE FROM {source} AS {JOB}{joined} WHERE {where} RETURNING {JOB}.*{carried}), "
        f"{name} AS (INSERT INTO {target} AS {JOB} ({JOB_COLUMNS_SQL}) SELECT {', '.join(values)} "
        f"FROM {name}_rows AS {JOB} RETURNING {returning})"
    )
    return sql, [*change.joined_params, *where_params, *value_params]


def transition(
    engine: Engine,
    change: Change,
    where: str,
    where_params: Sequence[Any],
    returning: str,
    to_finished: bool = True,
) -> tuple[str, list[Any]]:
    """One statement: ``transition_cte``'s change, returning ``returning`` of each job changed."""
    if not engine.finished_jobs_apart:
        return in_place(change, where, where_params, returning)
    ctes, params = transition_cte(engine, "moved", change, where, where_params, returning, to_finished)
    return f"WITH {ctes} SELECT * FROM moved", params


def run_transition(
    using: str,
    change: Change,
    where: str,
    where_params: Sequence[Any],
    returning: str,
    to_finished: bool = True,
    in_place_only: bool = False,
) -> list[Any]:
    """Run ``transition`` (or, ``in_place_only``, ``in_place``) of the jobs ``where`` picks; its rows.

    Where the database cannot return an UPDATE's rows, the jobs are locked first,
    waiting on them as the UPDATE would (``ops/returning.py``).
    """
    cursor, engine = cursor_and_engine(using)
    if not engine.supports_update_returning:
        columns = reading_order(change.sets)
        values, params = change.values(columns)
        sets = ", ".join(f"{column} = {value}" for column, value in zip(columns, values, strict=True))
        return update_returning(using, JOB, sets, params, where, where_params, returning, engine.for_update)
    if in_place_only:
        cursor.execute(*in_place(change, where, where_params, returning))
    else:
        cursor.execute(*transition(engine, change, where, where_params, returning, to_finished))
    return list(cursor.fetchall())


def reading_order(sets: Mapping[str, str]) -> list[str]:
    """The columns of ``sets`` in an order that MySQL's UPDATE may assign them in.

    MySQL assigns left to right, each expression reading the columns assigned
    before it as already changed (PostgreSQL and SQLite read the row as it
    was). A column is assigned only after every expression that reads it.
    """
    reads = {
        column: {other for other in sets if other != column and re.search(rf"\b{other}\b", value)}
        for column, value in sets.items()
    }
    ordered: list[str] = []
    while len(ordered) < len(sets):
        # Free to assign: read by no expression still to be assigned.
        free = [
            column
            for column in sets
            if column not in ordered
            and not any(column in reads[other] for other in sets if other not in ordered and other != column)
        ]
        if not free:
            raise ValueError(f"the assignments of {sorted(sets)} read each other in a circle")
        ordered.append(free[0])
    return ordered


def in_place(
    change: Change, where: str, where_params: Sequence[Any], returning: str
) -> tuple[str, list[Any]]:
    """One ``UPDATE``: ``change`` of the jobs ``where`` picks, which stay live or finished."""
    columns = list(change.sets)
    values, params = change.values(columns)
    assignments = ", ".join(f"{column} = {value}" for column, value in zip(columns, values, strict=True))
    joined = f" FROM {change.joined}" if change.joined else ""
    sql = f"UPDATE {JOB} SET {assignments}{joined} WHERE {where} RETURNING {returning}"
    return sql, [*params, *change.joined_params, *where_params]
