"""``store.compiled_parts``: the SQLAlchemy compiler attributes the store reads, on both
dialects, as the statement runner uses them. A release of SQLAlchemy that renames or changes
one fails here; CI runs this file against the newest release the project's pin allows."""

from __future__ import annotations

import re
from datetime import UTC, datetime
from typing import Any

import pytest
import sqlalchemy as sa
from sqlalchemy.dialects.postgresql.asyncpg import PGDialect_asyncpg
from sqlalchemy.dialects.sqlite.aiosqlite import SQLiteDialect_aiosqlite
from sqlalchemy.engine import Dialect
from sqlalchemy.exc import InvalidRequestError
from sqlalchemy.sql.compiler import SQLCompiler

from ccweb_store.store.compiled_parts import (
    CompiledParts,
    compile_parts,
    expanded,
    parameters_by_name,
)
from ccweb_store.store.event_rows import EVENT_COLUMNS, EVENTS
from ccweb_store.store.uow import Store

DIALECTS = [
    pytest.param(SQLiteDialect_aiosqlite(), id="sqlite"),
    pytest.param(PGDialect_asyncpg(), id="postgres"),
]
AT = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)

#: A RETURNING insert of every event column but the id.
INSERT_RETURNING = sa.insert(EVENTS).returning(EVENTS.c.id, EVENTS.c.created_at)
#: A select with a list bound to an IN (expanding), a value the statement binds itself, a
#: value given, and a literal-executed LIMIT.
SELECT_IN = (
    sa.select(EVENTS.c.id)
    .where(
        EVENTS.c.created_at.in_(sa.bindparam("times", expanding=True)),
        EVENTS.c.type == "run.queued",
        EVENTS.c.conversation_id == sa.bindparam("conversation"),
    )
    .order_by(EVENTS.c.id)
    .limit(sa.bindparam("most", type_=sa.Integer(), literal_execute=True))
)


def _bound_in_sql_order(sql: str, names: tuple[str, ...]) -> list[str]:
    """The names bound, in the order their placeholders appear in ``sql`` (``?``: in order;
    ``$n``: the n-th name)."""
    numbered = re.findall(r"\$(\d+)", sql)
    if not numbered:
        assert sql.count("?") == len(names)
        return list(names)
    assert sorted(int(n) for n in numbered) == list(range(1, len(names) + 1))
    return [names[int(n) - 1] for n in numbered]


def _converted(parts: CompiledParts, dialect: Dialect, given: dict[str, Any]) -> list[Any]:
    values = []
    for name, bind in zip(parts.names, parts.binds, strict=True):
        value = given.get(name, bind.effective_value)
        processor = bind.type.dialect_impl(dialect).bind_processor(dialect)
        values.append(processor(value) if processor and value is not None else value)
    return values


def test_the_compiler_attributes_the_store_reads_are_there() -> None:
    compiled = SELECT_IN.compile(dialect=SQLiteDialect_aiosqlite())
    assert isinstance(compiled, SQLCompiler)
    for name in (
        "positiontup",
        "binds",
        "insert_prefetch",
        "update_prefetch",
        "post_compile_params",
        "literal_execute_params",
    ):
        assert hasattr(compiled, name), name
    state = compiled.construct_expanded_state({"times": [AT], "conversation": "c", "most": 1})
    for name in ("statement", "positiontup", "positional_parameters", "processors"):
        assert hasattr(state, name), name


@pytest.mark.parametrize("dialect", DIALECTS)
def test_a_returning_insert_binds_the_columns_given_in_the_sqls_order(dialect: Dialect) -> None:
    parts = compile_parts(INSERT_RETURNING, dialect, EVENT_COLUMNS)
    assert not parts.expanding
    assert "RETURNING" in parts.sql
    assert sorted(parts.names) == sorted(EVENT_COLUMNS)
    assert [bind.key for bind in parts.binds] == list(parts.names)
    # The columns are bound in the order the INSERT lists them.
    listed = re.search(r"INSERT INTO events \(([^)]*)\)", parts.sql)
    assert listed is not None
    assert _bound_in_sql_order(parts.sql, parts.names) == listed.group(1).split(", ")
    # Each bind keeps its column's type, whose processor converts the value.
    by_name = dict(zip(parts.names, parts.binds, strict=True))
    assert isinstance(by_name["created_at"].type, type(EVENTS.c.created_at.type))
    assert isinstance(by_name["payload"].type, type(EVENTS.c.payload.type))
    assert all(bind.required for bind in parts.binds)


@pytest.mark.parametrize("dialect", DIALECTS)
def test_a_value_the_statement_binds_itself_is_its_default(dialect: Dialect) -> None:
    parts = compile_parts(SELECT_IN, dialect, ())
    own = {bind.effective_value for bind in parts.binds if not bind.required}
    assert "run.queued" in own  # (SQLite's LIMIT comes with an OFFSET 0 of its own)
    given = next(bind for bind in parts.binds if bind.key == "conversation")
    assert given.required and isinstance(given.type, sa.String)


@pytest.mark.parametrize("dialect", DIALECTS)
def test_an_expanding_in_is_rendered_per_call_with_each_item_a_parameter(dialect: Dialect) -> None:
    parts = compile_parts(SELECT_IN, dialect, ())
    assert parts.expanding
    times = [AT.replace(day=day) for day in (1, 2, 3)]
    for count in (1, 3):
        rendered = expanded(parts, {"times": times[:count], "conversation": "c", "most": 5})
        # The list's items are parameters of their own, the LIMIT a literal.
        assert "LIMIT 5" in rendered.sql and "most" not in rendered.names
        items = [name for name in rendered.names if name.startswith("times")]
        assert len(items) == count
        bound = dict(zip(rendered.names, rendered.values, strict=True))
        assert [bound[name] for name in items] == times[:count]
        assert bound["conversation"] == "c" and "run.queued" in bound.values()
        assert len(_bound_in_sql_order(rendered.sql, rendered.names)) == len(rendered.values)
        # Each item converts as its column's type does (SQLite's timestamp text).
        processor = EVENTS.c.created_at.type.dialect_impl(dialect).bind_processor(dialect)
        for name in items:
            if processor is None:
                assert rendered.processors.get(name) is None
            else:
                assert rendered.processors[name](bound[name]) == processor(bound[name])


@pytest.mark.parametrize("dialect", DIALECTS)
def test_a_column_default_computed_in_python_is_refused(dialect: Dialect) -> None:
    table = sa.Table(
        "python_defaults",
        sa.MetaData(),
        sa.Column("id", sa.Integer, primary_key=True),
        sa.Column("made", sa.String, default=lambda: "made"),
        sa.Column("changed", sa.String, onupdate=lambda: "changed"),
    )
    with pytest.raises(InvalidRequestError, match="computed in Python"):
        compile_parts(sa.insert(table), dialect, ("id",))  # insert_prefetch
    with pytest.raises(InvalidRequestError, match="computed in Python"):
        compile_parts(sa.update(table), dialect, ("made",))  # update_prefetch
    assert compile_parts(sa.insert(table), dialect, ("id", "made")).names


def test_parameters_by_name_give_each_parameters_type() -> None:
    binds = parameters_by_name(SELECT_IN)
    assert binds["times"].expanding
    assert isinstance(binds["conversation"].type, sa.String)


async def test_a_returning_insert_and_an_expanding_in_run_on_the_driver_as_compiled(
    store: Store,
) -> None:
    """Both statements compiled for the store's own dialect and run on its connection with
    the values in binding order: the row goes in and comes back, and the IN finds it."""
    dialect = store.engine.dialect
    insert = compile_parts(INSERT_RETURNING, dialect, EVENT_COLUMNS)
    row = {
        "type": "run.queued",
        "conversation_id": "conv-a",
        "peer_conversation_id": None,
        "message_id": None,
        "run_id": "run_1",
        "request_id": None,
        "created_at": AT,
        "payload": {"kind": "manual"},
    }
    select = compile_parts(SELECT_IN, dialect, ())
    times = [AT, AT.replace(day=2)]
    rendered = expanded(select, {"times": times, "conversation": "conv-a", "most": 10})
    processors = {
        name: bind.type.dialect_impl(dialect).bind_processor(dialect)
        for name, bind in zip(select.names, select.binds, strict=True)
    } | dict(rendered.processors)
    values = [
        value if value is None or (convert := processors.get(name)) is None else convert(value)
        for name, value in zip(rendered.names, rendered.values, strict=True)
    ]
    async with store.engine.begin() as connection:
        inserted = (
            await connection.exec_driver_sql(insert.sql, tuple(_converted(insert, dialect, row)))
        ).all()
        found = (await connection.exec_driver_sql(rendered.sql, tuple(values))).all()
        await connection.rollback()
    assert len(inserted) == 1
    assert [tuple(each) for each in found] == [(inserted[0][0],)]
