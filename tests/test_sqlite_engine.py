"""The SQLite engine: the standard library's driver, inline on the event loop, under asyncio."""

from __future__ import annotations

import asyncio
import json
import threading
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
from hypothesis import given
from hypothesis import strategies as st
from sqlalchemy import event
from sqlalchemy.exc import IntegrityError

from ccweb_store.config import Settings
from ccweb_store.store.column_types import _sqlite_datetime_to_text
from ccweb_store.store.db import (
    InlineSQLiteDialect,
    create_engine,
    migrate,
    read_only,
    sqlite_json_bind,
    sqlite_json_dumps,
)
from ccweb_store.store.repositories import direct
from ccweb_store.store.repositories.message_import import _insert_statement
from ccweb_store.store.uow import Store


@pytest.fixture
def url(tmp_path: Path) -> str:
    return f"sqlite+aiosqlite:///{tmp_path / 'engine.db'}"


async def test_every_spelling_of_a_sqlite_url_gets_the_inline_dialect(tmp_path: Path) -> None:
    for url in (f"sqlite+aiosqlite:///{tmp_path / 'a.db'}", f"sqlite:///{tmp_path / 'b.db'}"):
        engine = create_engine(url)
        try:
            assert isinstance(engine.dialect, InlineSQLiteDialect)
            assert engine.url.database == url.split(":///")[1]
        finally:
            await engine.dispose()


async def test_statements_run_on_the_event_loops_own_thread(url: str) -> None:
    engine = create_engine(url)
    threads: list[int] = []

    @event.listens_for(engine.sync_engine, "before_cursor_execute")
    def record(*_args: Any) -> None:
        threads.append(threading.get_ident())

    try:
        async with engine.begin() as connection:
            await connection.execute(sa.text("CREATE TABLE t (id INTEGER PRIMARY KEY, v TEXT)"))
            await connection.execute(sa.text("INSERT INTO t (v) VALUES ('a'), ('b')"))
        async with read_only(engine).connect() as connection:
            rows = (await connection.execute(sa.text("SELECT v FROM t ORDER BY id"))).all()
            driver_rows = (await connection.exec_driver_sql("SELECT count(*) FROM t")).scalar()
    finally:
        await engine.dispose()
    assert [row.v for row in rows] == ["a", "b"]
    assert driver_rows == 2
    assert threads and set(threads) == {threading.get_ident()}


async def test_driver_errors_arrive_as_sqlalchemy_errors_and_roll_back(url: str) -> None:
    engine = create_engine(url)
    try:
        async with engine.begin() as connection:
            await connection.execute(sa.text("CREATE TABLE u (k TEXT PRIMARY KEY)"))
            await connection.execute(sa.text("INSERT INTO u VALUES ('x')"))
        with pytest.raises(IntegrityError):
            async with engine.begin() as connection:
                await connection.execute(sa.text("INSERT INTO u VALUES ('y')"))
                await connection.execute(sa.text("INSERT INTO u VALUES ('x')"))
        async with engine.connect() as connection:
            keys = (await connection.execute(sa.text("SELECT k FROM u"))).scalars().all()
    finally:
        await engine.dispose()
    assert keys == ["x"]


async def test_connections_get_the_pragmas_the_service_relies_on(url: str) -> None:
    engine = create_engine(url, busy_timeout_ms=1234)
    try:
        async with engine.connect() as connection:
            pragmas = {
                name: (await connection.exec_driver_sql(f"PRAGMA {name}")).scalar()
                for name in (
                    "foreign_keys",
                    "journal_mode",
                    "busy_timeout",
                    "synchronous",
                    "temp_store",
                    "wal_autocheckpoint",
                )
            }
    finally:
        await engine.dispose()
    assert pragmas == {
        "foreign_keys": 1,
        "journal_mode": "wal",
        "busy_timeout": 1234,
        "synchronous": 1,
        "temp_store": 2,
        "wal_autocheckpoint": 10_000,
    }


async def test_unit_of_work_statements_skip_the_greenlet_but_async_calls_still_work(
    tmp_path: Path,
) -> None:
    from sqlalchemy.util.concurrency import in_greenlet

    store = Store.from_settings(Settings(database_url=f"sqlite:///{tmp_path / 'uow.db'}"))
    seen: list[tuple[str, bool]] = []

    @event.listens_for(store.engine.sync_engine, "connect")
    def trace(dbapi_connection: Any, _record: Any) -> None:
        # sqlite3's own trace: every statement the driver runs, however it was sent.
        dbapi_connection.set_trace_callback(
            lambda statement: seen.append((statement.split()[0].upper(), in_greenlet()))
        )

    try:
        await migrate(store.engine)
        seen.clear()
        async with store.uow() as uow:
            await uow.sessions.create("inline", title="Inline")
            await uow.messages.append("inline", "user", "hello")
            await uow.commit()
        repository_calls = list(seen)
        async with store.read_uow() as uow:
            count = (
                await uow.execute(sa.text("SELECT count(*) FROM messages"))
            ).scalar()
        read_calls = list(seen)
    finally:
        await store.dispose()
    assert count == 1
    assert [verb for verb, _ in repository_calls] == [
        "PRAGMA",  # the writer's connection waits for the write lock on the loop, not in SQLite
        "BEGIN",
        "SELECT",
        "INSERT",
        "UPDATE",
        "INSERT",
        "COMMIT",
    ]
    assert not any(in_greenlet for _, in_greenlet in repository_calls)
    # The unit of work began and ended its transaction on the driver; the AsyncConnection call
    # ran in SQLAlchemy's greenlet, inside that transaction.
    assert read_calls[-3:] == [("BEGIN", False), ("SELECT", True), ("ROLLBACK", False)]


async def test_a_write_waiting_past_the_busy_timeout_fails_as_a_retryable_database_unavailable(
    tmp_path: Path,
) -> None:
    """BEGIN IMMEDIATE comes from the dialect inside SQLAlchemy's error handling; the unit of
    work answers its ``database is locked`` as ``database_unavailable``, with ``retryAfter``."""
    import sqlite3

    from sqlalchemy.exc import OperationalError

    from ccweb_store.domain.errors import DatabaseUnavailable

    path = tmp_path / "busy.db"
    store = Store.from_settings(
        Settings(database_url=f"sqlite:///{path}", sqlite_busy_timeout_ms=50)
    )
    other = sqlite3.connect(path, isolation_level=None)
    try:
        await migrate(store.engine)
        other.execute("BEGIN IMMEDIATE")  # another process holds the write lock
        with pytest.raises(DatabaseUnavailable, match="CCWEB_SQLITE_BUSY_TIMEOUT_MS") as busy:
            async with store.uow() as uow:
                await uow.sessions.create("blocked")
        assert busy.value.data == {"retryAfter": 2}
        assert isinstance(busy.value.__cause__, OperationalError)
        assert "database is locked" in str(busy.value.__cause__)
        other.execute("ROLLBACK")
        async with store.uow() as uow:  # and the next unit of work goes through
            await uow.sessions.create("through")
            await uow.commit()
        async with store.read_uow() as uow:
            assert await uow.sessions.get("through") is not None
            assert await uow.sessions.get("blocked") is None
    finally:
        other.close()
        await store.dispose()


async def test_writes_take_turns_on_one_kept_connection_and_leave_nothing_behind(
    tmp_path: Path,
) -> None:
    store = Store.from_settings(Settings(database_url=f"sqlite:///{tmp_path / 'writer.db'}"))
    try:
        await migrate(store.engine)
        async with store.uow() as uow:
            first = uow.connection
            await uow.sessions.create("kept", title="Kept")
            await uow.commit()
        async with store.uow() as uow:  # never committed: rolled back at the end
            assert uow.connection is first
            await uow.sessions.create("dropped")
        with pytest.raises(RuntimeError):
            async with store.uow() as uow:  # fails half-way
                await uow.sessions.create("half")
                raise RuntimeError("the caller failed")
        async with store.uow() as uow:
            assert uow.connection is first
            assert await uow.sessions.get("dropped") is None
            assert await uow.sessions.get("half") is None
            await uow.sessions.create("after", title="After")
            await uow.commit()

        async def write(session_id: str) -> None:
            async with store.uow() as uow:
                await uow.sessions.create(session_id)
                await asyncio.sleep(0)  # let the others queue for the turn
                await uow.commit()

        await asyncio.gather(*(write(f"w{i}") for i in range(10)))
        async with store.read_uow() as uow:
            assert uow.connection is not first
            rows, _ = await uow.sessions.list_page(limit=50)
    finally:
        await store.dispose()
    assert sorted(row.id for row in rows) == sorted(
        ["kept", "after", *(f"w{i}" for i in range(10))]
    )


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


@pytest.mark.parametrize("value", JSON_VALUES)
def test_json_columns_get_exactly_the_text_json_dumps_gives(value: Any) -> None:
    assert sqlite_json_dumps(value) == json.dumps(value)


JSON_TREES = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(),
    lambda children: st.lists(children) | st.dictionaries(st.text(), children),
    max_leaves=30,
)


@given(JSON_TREES)
def test_any_json_value_gets_the_text_json_dumps_gives(value: Any) -> None:
    assert sqlite_json_dumps(value) == json.dumps(value)


def test_the_encoder_made_once_keeps_nothing_from_a_refused_value() -> None:
    """A refused value (circular, or holding what JSON cannot) leaves nothing behind that
    would make the same containers look circular, or encode differently, later."""
    shared = {"blocks": [{"type": "text", "text": "ok"}]}
    circular: list[Any] = [shared]
    circular.append(circular)
    with pytest.raises(ValueError, match="Circular reference"):
        sqlite_json_dumps(circular)
    with pytest.raises(TypeError, match="not JSON serializable"):
        sqlite_json_dumps([shared, {"when": object()}])
    assert sqlite_json_dumps([shared, shared]) == json.dumps([shared, shared])
    assert sqlite_json_dumps(shared) == json.dumps(shared)


def test_json_columns_refuse_what_json_dumps_refuses() -> None:
    circular: list[Any] = []
    circular.append(circular)
    with pytest.raises(ValueError, match="Circular reference"):
        sqlite_json_dumps(circular)
    with pytest.raises(TypeError, match="not JSON serializable"):
        sqlite_json_dumps({"when": object()})
    assert sqlite_json_dumps({"after": "errors"}) == '{"after": "errors"}'


def test_json_columns_refuse_values_nested_too_deeply_as_json_dumps_does() -> None:
    """The encoder keeps no list of the containers it is in: a circular value is found by its
    recursion, and refused with ``json.dumps``'s error; a deep value still recurses too far."""
    deep: list[Any] = []
    for _ in range(100_000):
        deep = [deep]
    with pytest.raises(RecursionError):
        json.dumps(deep)
    with pytest.raises(RecursionError):
        sqlite_json_dumps(deep)
    circular: dict[str, Any] = {"blocks": []}
    circular["blocks"].append({"up": circular})
    with pytest.raises(ValueError, match="Circular reference"):
        sqlite_json_dumps(circular)
    nested = [{"a": [1, 2.5, None, "é"]}] * 3
    assert sqlite_json_dumps([nested, nested]) == json.dumps([nested, nested])


def _sa_json_bind() -> Any:
    """SQLAlchemy's own bind processor of the JSON columns on this project's SQLite engines."""
    engine = create_engine("sqlite+aiosqlite:///:memory:")
    dialect = engine.sync_engine.dialect
    process = sa.JSON().dialect_impl(dialect).bind_processor(dialect)
    assert process is not None
    return process


@given(JSON_TREES)
def test_json_columns_bind_in_one_call_what_sqlalchemys_processor_binds(value: Any) -> None:
    assert sqlite_json_bind(value) == _sa_json_bind()(value)


def test_json_column_binds_of_nulls_and_refused_values_are_sqlalchemys() -> None:
    process = _sa_json_bind()
    for value in (None, sa.JSON.NULL, sa.null(), {}, [], "text", 1.5, {"a": {"b": [None]}}):
        assert sqlite_json_bind(value) == process(value), value
    assert sqlite_json_bind(sa.null()) is None
    assert sqlite_json_bind(None) == "null"
    circular: dict[str, Any] = {}
    circular["self"] = circular
    for bind in (sqlite_json_bind, process):
        with pytest.raises(ValueError, match="Circular reference"):
            bind(circular)
        with pytest.raises(TypeError, match="not JSON serializable"):
            bind({"when": object()})


def test_execute_many_binds_json_and_datetimes_with_their_column_converters() -> None:
    """The message insert the importer runs: its metadata bound by ``sqlite_json_bind``, its
    time by ``_sqlite_datetime_to_text`` (the bind processor without its last-value cache),
    everything else as it is; a JSON type that stores None as SQL NULL keeps SQLAlchemy's."""
    engine = create_engine("sqlite+aiosqlite:///:memory:")
    dialect = engine.sync_engine.dialect
    keys = ("content", "created_at", "id", "metadata_", "role", "seq", "session_id")
    compiled = direct.compiled_form(_insert_statement(keys), dialect, dict.fromkeys(keys))
    assert compiled is not None
    converters = dict(zip(compiled.names, compiled.column_processors, strict=True))
    assert converters["metadata_"] is sqlite_json_bind
    assert converters["created_at"] is _sqlite_datetime_to_text
    assert {name for name, convert in converters.items() if convert is None} == {
        "content",
        "id",
        "role",
        "seq",
        "session_id",
    }
    table = sa.table("t", sa.column("doc", sa.JSON(none_as_null=True)))
    stmt = direct.prebuilt(sa.insert(table).values(doc=sa.bindparam("doc")))
    plain = direct.compiled_form(stmt, dialect, {"doc": None})
    assert plain is not None
    assert plain.column_processors[0] is not sqlite_json_bind
    assert plain.column_processors[0] is plain.binds[0][3]
