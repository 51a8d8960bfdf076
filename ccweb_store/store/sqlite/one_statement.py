"""Writes SQLite makes in one statement, where they would be several: a ``statements.Batch``
as an ``INSERT`` into a view of the writer connection's own whose ``INSTEAD OF`` trigger runs
the batch's steps, in order; and a claim whose ``run.started`` event a trigger on ``runs``
writes.

Each statement costs a hand-off to aiosqlite's thread, which waits for a turn of the event loop
under load and costs more than the statement itself; a batch is one hand-off instead of one
per step, and a claim one instead of three. The views and triggers are ``TEMP``: they belong
to the connection, are made when the writer connects (``install_script``), from the same
statements the other drivers run (each bound parameter read from the inserted row,
``NEW."name"``), and change nothing in the file, its schema or its migrations.

A batch's trigger ends with the unit of work's events noted so far, given as one JSON array in
the row's ``ccweb_events`` column (``events_json``: each event the row of values the
``events`` table's INSERT binds), so that a unit of work whose last write is a batch writes
its outbox in the same statement (``EventRepository``). A batch that reads its row back
returns it through the INSERT's ``RETURNING``, which SQLite evaluates after the trigger ran: a
scalar subquery per column of the row the batch inserted, by its primary key.

The claim's trigger (``run_started_trigger``) fires when a run goes from ``queued`` to
``running``, which only a claim does, and writes the event PostgreSQL's claim writes in its
own statement (``event_rows.run_started_event``, the one definition of both).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, cast

import orjson
import sqlalchemy as sa
from sqlalchemy.engine import Dialect
from sqlalchemy.sql.dml import UpdateBase
from sqlalchemy.sql.elements import BindParameter
from sqlalchemy.sql.visitors import replacement_traverse

from ccweb_store.domain.events import Event
from ccweb_store.domain.kinds import RunStatus
from ccweb_store.store.event_rows import EVENT_COLUMNS, EVENTS, event_row, run_started_event
from ccweb_store.store.models import Base
from ccweb_store.store.statements import Batch, Compiled, prebuilt

RUNS = Base.metadata.tables["runs"]
#: The view column that carries the unit of work's events (NULL: none).
EVENTS_COLUMN = "ccweb_events"
_EVENT_INSERT = prebuilt(sa.insert(EVENTS))


@dataclass(frozen=True, slots=True)
class InstalledBatch:
    """A batch as its view takes it: the INSERT that runs it (its values bound by the batch's
    names, and ``ccweb_events``), and the DDL that makes the view and its trigger."""

    insert: sa.Insert
    ddl: str


def installed(batch: Batch, index: int, dialect: Dialect) -> InstalledBatch:
    """The view ``ccweb_batch_<index>`` that runs ``batch``, and the INSERT into it."""
    view_name = f"ccweb_batch_{index}"
    names = (*batch.names, EVENTS_COLUMN)
    columns = [sa.column(name, batch.types.get(name, sa.Text())) for name in names]
    view = sa.table(view_name, *columns, schema="temp")
    insert = sa.insert(view).values(
        {
            name: sa.bindparam(name, type_=column.type)
            for name, column in zip(names, columns, strict=True)
        }
    )
    if batch.read_back is not None:
        table, key = batch.read_back
        (primary_key,) = table.primary_key.columns
        insert = insert.returning(
            *(
                sa.select(column)
                .where(primary_key == sa.literal_column(f"{view_name}.{_quote(key)}"))
                .scalar_subquery()
                .label(column.key)
                for column in table.c
            )
        )
    steps = [_in_trigger(stmt, batch.names, dialect) for stmt in batch.unread]
    steps.append(_events_step(event_insert(dialect).names))
    quoted = ", ".join(_quote(name) for name in names)
    nulls = ", ".join("NULL" for _ in names)
    ddl = (
        f"CREATE TEMP VIEW IF NOT EXISTS {view_name} ({quoted}) AS SELECT {nulls} WHERE 0;\n"
        f"CREATE TEMP TRIGGER IF NOT EXISTS {view_name}_run\n"
        f"INSTEAD OF INSERT ON {view_name} BEGIN\n"
        + "".join(f"{step};\n" for step in steps)
        + "END;\n"
    )
    return InstalledBatch(prebuilt(insert), ddl)


def install_script(dialect: Dialect) -> tuple[str, dict[Batch, InstalledBatch]]:
    """The DDL of every batch made so far (``Batch.made``) that a trigger can run and of the
    claim's trigger, and each batch's INSERT; made once per dialect and count of batches
    (compiling them costs more than connecting). A batch with a step that returns rows itself
    (rather than by ``read_back``) cannot be a trigger: a trigger's statements return
    nothing. Such a batch runs step by step."""
    key = (type(dialect), dialect.paramstyle, len(Batch.made))
    made = _scripts.get(key)
    if made is None:
        batches = {
            batch: installed(batch, index, dialect)
            for index, batch in enumerate(Batch.made)
            if not any(stmt.exported_columns for stmt in batch.unread)
        }
        script = "".join(each.ddl for each in batches.values()) + run_started_trigger(dialect)
        made = _scripts[key] = (script, batches)
    return made[0], dict(made[1])


_scripts: dict[tuple[Any, ...], tuple[str, dict[Batch, InstalledBatch]]] = {}


def events_json(events: Sequence[Event], dialect_events: Compiled) -> str | None:
    """The events noted so far as the ``ccweb_events`` value: a JSON array of each event's
    row (``event_row``) as the ``events`` INSERT binds it, in its parameters' order; None for
    none."""
    if not events:
        return None
    rows = dialect_events.many([event_row(event) for event in events])
    try:
        return orjson.dumps(rows).decode()
    except (orjson.JSONEncodeError, TypeError):
        return json.dumps(rows)


def event_insert(dialect: Dialect) -> Compiled:
    """The ``events`` INSERT compiled for ``dialect``, for ``events_json``'s conversions."""
    return Compiled(_EVENT_INSERT, dialect, EVENT_COLUMNS)


#: The name of the claim's trigger on ``runs``.
RUN_STARTED_TRIGGER = "ccweb_run_started"


def run_started_trigger(dialect: Dialect) -> str:
    """The DDL of the trigger that writes a claimed run's ``run.started`` event (at the run's
    ``started_at``, the claim's time)."""
    row = _NewRow()
    event = run_started_event(row, row.started_at, sa.func.json_object)
    insert = sa.insert(EVENTS).from_select(list(EVENT_COLUMNS), event)
    return (
        f"CREATE TEMP TRIGGER IF NOT EXISTS {RUN_STARTED_TRIGGER} AFTER UPDATE OF status ON runs "
        f"WHEN OLD.status = '{RunStatus.QUEUED}' AND NEW.status = '{RunStatus.RUNNING}' BEGIN\n"
        f"{_in_trigger(insert, (), dialect)};\nEND;\n"
    )


class _NewRow:
    """A trigger's ``NEW`` row of ``runs``: each column by name, as ``NEW."column"``."""

    def __getattr__(self, name: str) -> sa.ColumnElement[Any]:
        column = RUNS.c[name]
        return sa.literal_column(f"NEW.{_quote(column.name)}", column.type)


def _in_trigger(stmt: UpdateBase, names: tuple[str, ...], dialect: Dialect) -> str:
    """``stmt`` as a trigger's step: each value the batch binds read from the inserted row,
    every other value written as a literal (a trigger binds nothing)."""

    def from_row(element: Any, **_: Any) -> Any:
        if isinstance(element, BindParameter) and element.key in names:
            return sa.literal_column(f"NEW.{_quote(element.key)}", element.type)
        return None

    step = cast(UpdateBase, replacement_traverse(stmt, {}, from_row))
    if isinstance(step, sa.Insert):
        step = step.inline()  # its key is given: nothing to return (a trigger returns nothing)
    return str(step.compile(dialect=dialect, compile_kwargs={"literal_binds": True}))


def _events_step(columns: tuple[str, ...]) -> str:
    """The trigger's last step: the events of ``ccweb_events``, in their order, each an array
    of ``columns``' values."""
    values = ", ".join(f"json_extract(value, '$[{index}]')" for index in range(len(columns)))
    return (
        f"INSERT INTO events ({', '.join(columns)}) "
        f"SELECT {values} FROM json_each(NEW.{EVENTS_COLUMN}) ORDER BY key"
    )


def _quote(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'
