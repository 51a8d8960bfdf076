"""``statements``: a statement compiled once for the store's driver (``Compiled``: the values
in the order of its SQL, the defaults it gives itself, lists bound to ``IN``, the conversions
of JSON and datetimes both ways, ``many`` for an executemany) and ``Batch`` (run step by step,
or as one statement of CTEs on PostgreSQL), on real SQLite and PostgreSQL through a Store."""

from __future__ import annotations

import json
import re
from datetime import UTC, datetime, timedelta, timezone
from typing import Any

import pytest
import sqlalchemy as sa
from hypothesis import given
from hypothesis import strategies as st
from sqlalchemy.dialects import sqlite
from sqlalchemy.dialects.postgresql.asyncpg import PGDialect_asyncpg
from sqlalchemy.engine import Dialect
from sqlalchemy.exc import IntegrityError, InvalidRequestError

from ccweb_store.store.compiled_parts import compile_parts
from ccweb_store.store.db import create_engine
from ccweb_store.store.repositories.base import MESSAGES, SESSIONS
from ccweb_store.store.statements import Batch, Compiled, prebuilt
from ccweb_store.store.transaction import Transaction
from ccweb_store.store.uow import Store

_TABLE = sa.Table(
    "compiled_probe",
    sa.MetaData(),
    sa.Column("id", sa.String, primary_key=True),
    sa.Column("status", sa.String),
    sa.Column("at", sa.DateTime(timezone=True)),
    sa.Column("doc", sa.JSON(none_as_null=True)),
)
_NONE = prebuilt(sa.select(_TABLE.c.id).where(_TABLE.c.status.is_(None)))
_ONE = prebuilt(sa.select(_TABLE.c.id).where(_TABLE.c.id == sa.bindparam("id")))
_SEVERAL = prebuilt(
    sa.select(_TABLE.c.id).where(
        _TABLE.c.id == sa.bindparam("id"),
        _TABLE.c.status == "queued",
        _TABLE.c.at < sa.bindparam("at"),
    )
)
_DIALECTS = [
    pytest.param(sqlite.dialect(), id="sqlite"),
    pytest.param(PGDialect_asyncpg(), id="postgres"),
]


@pytest.mark.parametrize("dialect", _DIALECTS)
def test_values_none_one_and_several_in_sql_order(dialect: Dialect) -> None:
    assert list(Compiled(_NONE, dialect, ()).values(None)) == []
    assert list(Compiled(_ONE, dialect, ("id",)).values({"id": "a"})) == ["a"]
    at = datetime(2026, 12, 1, 9, 0, tzinfo=UTC)
    compiled = Compiled(_SEVERAL, dialect, ("at", "id"))
    values = list(compiled.values({"at": at, "id": "b"}))
    assert values[:2] == ["b", "queued"]  # the statement's own value filled in between
    processor = _TABLE.c.at.type.dialect_impl(dialect).bind_processor(dialect)
    assert values[2] == (processor(at) if processor else at)
    assert compiled.values({"at": None, "id": "b"})[2] is None  # None is bound as NULL
    assert compiled.defaults == {compiled.names[1]: "queued"}


@pytest.mark.parametrize("dialect", _DIALECTS)
def test_a_missing_value_is_sqlalchemys_error(dialect: Dialect) -> None:
    compiled = Compiled(_SEVERAL, dialect, ("id",))
    with pytest.raises(InvalidRequestError, match="'at'"):
        compiled.values({"id": "b"})


@pytest.mark.parametrize("dialect", _DIALECTS)
def test_a_list_bound_to_in_is_rendered_per_call_and_each_value_converted(
    dialect: Dialect,
) -> None:
    stmt = prebuilt(
        sa.select(_TABLE.c.id).where(
            _TABLE.c.at.in_(sa.bindparam("times", expanding=True)),
            _TABLE.c.id != sa.bindparam("id"),
        )
    )
    compiled = Compiled(stmt, dialect, ("id", "times"))
    assert compiled.expanding
    processor = _TABLE.c.at.type.dialect_impl(dialect).bind_processor(dialect)
    times = [datetime(2026, 1, d, tzinfo=UTC) for d in (1, 2, 3)]
    for count in (1, 3):
        sql, values = compiled.statement({"times": times[:count], "id": "x"})
        converted = [processor(t) if processor else t for t in times[:count]]
        assert _in_sql_order(sql, values) == [*converted, "x"]


def _in_sql_order(sql: str, values: Any) -> list[Any]:
    """The values bound, in the order their placeholders appear in ``sql`` (``?``: in order;
    ``$n``: the n-th value)."""
    numbered = re.findall(r"\$(\d+)", sql)
    if not numbered:
        assert sql.count("?") == len(values)
        return list(values)
    assert len(numbered) == len(values)
    return [values[int(n) - 1] for n in numbered]


@pytest.mark.parametrize("dialect", _DIALECTS)
def test_many_converts_every_value_none_included_and_keeps_sql_null_where_the_type_does(
    dialect: Dialect,
) -> None:
    """As SQLAlchemy's executemany: a JSON column stores JSON ``null`` for None; one whose
    type stores None as SQL NULL keeps NULL."""
    messages = Compiled(sa.insert(MESSAGES), dialect, ("content", "id", "metadata"))
    rows = [
        {"id": "a", "content": "x", "metadata": None},
        {"id": "b", "content": "y", "metadata": {"k": [1, None]}},
    ]
    position = messages.names.index("metadata")
    assert [values[position] for values in messages.many(rows)] == ["null", '{"k": [1, null]}']
    probe = Compiled(sa.insert(_TABLE), dialect, ("doc", "id"))
    position = probe.names.index("doc")
    stored = [values[position] for values in probe.many([{"id": "a", "doc": None}])]
    assert stored == [None]


JSON_VALUES: list[Any] = [
    None,
    True,
    0,
    -(10**40),
    1.5,
    -0.0,
    1e16,
    float("nan"),
    float("inf"),
    'é ☃ \ud800 \n " \\',
    [],
    {},
    {"legacy": {"timestamp": 1700000000000}, "contentBlocks": [{"type": "text", "text": "ok"}]},
    {1: "int key", False: "bool key", None: "null key", 2.5: "float key"},
    [[[{"deep": [None, False, "x"]}]]],
]
JSON_TREES = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(),
    lambda children: st.lists(children) | st.dictionaries(st.text(), children),
    max_leaves=30,
)


def _sqlite_metadata_bind() -> Any:
    """How the store's SQLite driver binds a message's metadata: the value as stored."""
    engine = create_engine("sqlite+aiosqlite:///:memory:")
    compiled = Compiled(sa.insert(MESSAGES), engine.sync_engine.dialect, ("id", "metadata"))
    position = compiled.names.index("metadata")
    return lambda value: compiled.many([{"id": "m", "metadata": value}])[0][position]


_BIND = _sqlite_metadata_bind()


def _read_as(text: str) -> str:
    """What ``text`` reads back as, written one way (NaN included)."""
    return json.dumps(json.loads(text), sort_keys=True)


@pytest.mark.parametrize("value", JSON_VALUES)
def test_json_columns_store_text_that_reads_back_as_json_dumps_text_does(value: Any) -> None:
    assert _read_as(_BIND(value)) == _read_as(json.dumps(value))


@given(JSON_TREES)
def test_any_json_value_reads_back_as_json_dumps_text_does(value: Any) -> None:
    assert _read_as(_BIND(value)) == _read_as(json.dumps(value))


@pytest.mark.parametrize("value", [float("nan"), float("inf"), [1, float("-inf")]])
def test_a_number_that_is_not_finite_is_not_written_as_null(value: Any) -> None:
    assert _BIND(value) == json.dumps(value)


def test_json_columns_refuse_what_json_dumps_refuses() -> None:
    circular: list[Any] = []
    circular.append(circular)
    with pytest.raises(ValueError, match="Circular reference"):
        _BIND(circular)
    with pytest.raises(TypeError, match="not JSON serializable"):
        _BIND({"when": object()})
    deep: list[Any] = []
    for _ in range(100_000):
        deep = [deep]
    with pytest.raises(RecursionError):
        _BIND(deep)
    assert json.loads(_BIND({"after": "errors"})) == {"after": "errors"}


_TIMES = [
    datetime(2024, 5, 1, 12, 34, 56, 123456, tzinfo=UTC),
    datetime(2024, 5, 1, 12, 0, tzinfo=timezone(timedelta(hours=5, minutes=30))),
    datetime(2024, 5, 1, 1, 0, tzinfo=timezone(timedelta(hours=-8))),
    datetime(999, 12, 31, 23, 59, 59, 999999, tzinfo=UTC),
    datetime(2024, 5, 1, 12, 34, 56),  # naive: taken as UTC
]
_DOCS: list[Any] = [{"a": [1, None, "é"]}, [], "text", 1.5, None, {"nested": {"x": True}}]
_READ_MESSAGE = prebuilt(
    sa.select(MESSAGES.c.created_at, MESSAGES.c.metadata).where(
        MESSAGES.c.id == sa.bindparam("message_id")
    )
)
_WRITE_MESSAGE = prebuilt(
    sa.update(MESSAGES)
    .where(MESSAGES.c.id == sa.bindparam("message_id"))
    .values(created_at=sa.bindparam("p_at"), metadata=sa.bindparam("p_doc"))
)


async def test_datetimes_and_json_convert_both_ways_as_sqlalchemys_execution_does(
    store: Store,
) -> None:
    """Written by the driver and read back by it and by SQLAlchemy's own execution: the same
    instant, aware and in UTC, and the same JSON."""
    async with store.uow() as uow:
        await uow.sessions.create("s")
        message = await uow.messages.append("s", "user", "x")
        await uow.commit()
    for at, doc in zip(_TIMES, _DOCS, strict=False):
        async with store.uow() as uow:
            await uow._execute(_WRITE_MESSAGE, {"message_id": message.id, "p_at": at, "p_doc": doc})
            await uow.commit()
        async with store.read_uow() as uow:
            driver = tuple((await uow._execute(_READ_MESSAGE, {"message_id": message.id})).one())
        async with store.engine.connect() as connection:
            through = tuple(
                (await connection.execute(_READ_MESSAGE, {"message_id": message.id})).one()
            )
        instant = at if at.tzinfo is not None else at.replace(tzinfo=UTC)
        assert driver == through == (instant, doc), (at, doc)
        assert driver[0].tzinfo is UTC


async def test_in_over_a_list_finds_the_rows_of_every_length(store: Store) -> None:
    async with store.uow() as uow:
        for session_id in ("a", "b", "c"):
            await uow.sessions.create(session_id)
        await uow.commit()
    stmt = prebuilt(
        sa.select(SESSIONS.c.id)
        .where(SESSIONS.c.id.in_(sa.bindparam("ids", expanding=True)))
        .order_by(SESSIONS.c.id)
    )
    async with store.read_uow() as uow:
        found = [
            (await uow._execute(stmt, {"ids": ids})).scalars().all()
            for ids in ([], ["b"], ["c", "a", "nobody"], ["a", "b", "c"])
        ]
    assert found == [[], ["b"], ["a", "c"], ["a", "b", "c"]]


# --- Batch ---------------------------------------------------------------------------------

#: A conversation touched and a message appended with the next seq, as a send does: a time
#: and a JSON value bound by two steps, the message read back.
_TOUCH_AND_APPEND = Batch(
    (
        sa.update(SESSIONS)
        .where(SESSIONS.c.id == sa.bindparam("p_session"))
        .values(updated_at=sa.bindparam("p_now")),
        {"p_session": "conversation", "p_now": "now"},
    ),
    (
        sa.insert(MESSAGES).values(
            id=sa.bindparam("p_id"),
            session_id=sa.bindparam("p_session"),
            seq=sa.select(sa.func.coalesce(sa.func.max(MESSAGES.c.seq), 0) + 1)
            .where(MESSAGES.c.session_id == sa.bindparam("p_session"))
            .scalar_subquery(),
            role=sa.bindparam("p_role"),
            content=sa.bindparam("p_content"),
            metadata=sa.bindparam("p_doc"),
            created_at=sa.bindparam("p_now"),
        ),
        {
            "p_id": "message",
            "p_session": "conversation",
            "p_role": "who",
            "p_content": "text",
            "p_doc": "doc",
            "p_now": "now",
        },
    ),
    read_back=(MESSAGES, "message"),
)
NOW = datetime(2026, 12, 1, 11, 0, 0, 123456, tzinfo=UTC)


async def _append_by_batch(store: Store, session_id: str, *, how: str) -> Any:
    """Two messages appended by the batch, ``how``: ``steps`` (one statement per step),
    ``driver`` (the driver's choice), ``one`` (PostgreSQL's one statement). What the batch
    read back each time: seq, metadata and time."""
    returned = []
    for n in (1, 2):
        values = {
            "conversation": session_id,
            "now": NOW + timedelta(seconds=n),
            "message": f"{session_id}-{n}",
            "who": "user",
            "text": f"message {n}",
            "doc": {"n": n, "tags": ["a", None]},
        }
        async with store.uow() as uow:
            transaction = uow.messages.transaction
            if how == "steps":
                rows, _ = await Transaction.execute_batch(transaction, _TOUCH_AND_APPEND, values)
            else:
                transaction.one_statement_batches = how == "one"
                rows, _ = await transaction.execute_batch(_TOUCH_AND_APPEND, values)
            row = rows.mappings().one()
            returned.append((row["seq"], row["metadata"], row["created_at"]))
            await uow.commit()
    return returned


async def _written(store: Store, session_id: str) -> tuple[Any, ...]:
    async with store.read_uow() as uow:
        session = (
            await uow._execute(sa.select(SESSIONS.c.updated_at).where(SESSIONS.c.id == session_id))
        ).scalar_one()
        messages = await uow.messages.list_after(session_id)
    return session, [(m.seq, m.role, m.content, m.metadata_, m.created_at) for m in messages]


async def test_a_batch_step_by_step_and_as_one_statement_writes_and_returns_the_same(
    store: Store,
) -> None:
    async with store.uow() as uow:
        for session_id in ("steps", "driver", "one"):
            await uow.sessions.create(session_id)
        await uow.commit()
    by_steps = await _append_by_batch(store, "steps", how="steps")
    by_driver = await _append_by_batch(store, "driver", how="driver")
    expected = [(n, {"n": n, "tags": ["a", None]}, NOW + timedelta(seconds=n)) for n in (1, 2)]
    assert by_steps == by_driver == expected
    written = await _written(store, "steps")
    assert written == await _written(store, "driver")
    assert written[0] == NOW + timedelta(seconds=2)
    if store.dialect == "postgresql":  # SQLite has no data-modifying CTEs
        assert await _append_by_batch(store, "one", how="one") == expected
        assert await _written(store, "one") == written


async def test_a_failing_step_raises_sqlalchemys_error_and_the_unit_of_work_leaves_nothing(
    store: Store,
) -> None:
    async with store.uow() as uow:
        await uow.sessions.create("s")
        await uow.commit()
    values = {"conversation": "s", "now": NOW, "message": "same", "who": "user", "text": "x"}
    values["doc"] = {}
    async with store.uow() as uow:
        await uow.messages.transaction.execute_batch(_TOUCH_AND_APPEND, values)
        await uow.commit()
    with pytest.raises(IntegrityError):
        async with store.uow() as uow:
            await uow.messages.transaction.execute_batch(
                _TOUCH_AND_APPEND, {**values, "now": NOW + timedelta(1)}
            )
            await uow.commit()
    async with store.read_uow() as uow:
        assert [m.id for m in await uow.messages.list_after("s")] == ["same"]
        assert (await uow.sessions.require("s")).updated_at == NOW


def test_on_postgresql_a_batch_is_one_statement_of_ctes_binding_the_values_names() -> None:
    compiled = compile_parts(_TOUCH_AND_APPEND.as_one_statement(), PGDialect_asyncpg(), ())
    sql = " ".join(compiled.sql.split())
    assert sql.startswith("WITH step_0 AS (UPDATE sessions SET updated_at=")
    assert ") INSERT INTO messages " in sql and "RETURNING messages.id, messages.session_id" in sql
    names = ("conversation", "doc", "message", "now", "text", "who")
    assert set(compiled.names) - {"coalesce_1", "coalesce_2"} == set(names)
    assert _TOUCH_AND_APPEND.names == names


_RENAME = Batch(
    (
        sa.update(SESSIONS)
        .where(SESSIONS.c.id == sa.bindparam("p_session"))
        .values(updated_at=sa.bindparam("p_now")),
        {"p_session": "conversation", "p_now": "now"},
    ),
    (
        sa.update(SESSIONS)
        .where(SESSIONS.c.id == sa.bindparam("p_session"))
        .values(title=sa.bindparam("p_title"))
        .returning(SESSIONS.c.id, SESSIONS.c.title),
        {"p_session": "renamed", "p_title": "new_title"},
    ),
)


async def test_a_value_named_like_a_column_of_a_step_writes_only_where_the_step_binds_it(
    store: Store,
) -> None:
    """The batch's values are bound by name; a value whose name is also a column of a step's
    table (``title`` here, given alongside) is not written to that column. (The steps change
    different rows: on PostgreSQL they are one statement, which changes a row once.)"""
    async with store.uow() as uow:
        await uow.sessions.create("s", title="Old")
        await uow.sessions.create("t", title="Old")
        await uow.commit()
    values = {
        "conversation": "s",
        "renamed": "t",
        "now": NOW,
        "new_title": "New",
        "title": "not a step's value",
    }
    async with store.uow() as uow:
        returned, _ = await uow.messages.transaction.execute_batch(_RENAME, values)
        assert [tuple(row) for row in returned] == [("t", "New")]
        await uow.commit()
    async with store.read_uow() as uow:
        touched = await uow.sessions.require("s")
        renamed = await uow.sessions.require("t")
    assert (touched.title, touched.updated_at) == ("Old", NOW)
    assert renamed.title == "New"
