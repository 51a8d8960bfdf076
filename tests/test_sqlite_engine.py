"""The SQLite engine: the standard library's driver, inline on the event loop, under asyncio."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
from sqlalchemy import event
from sqlalchemy.exc import IntegrityError

from ccweb_store.db import InlineSQLiteDialect, create_engine, read_only


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
                for name in ("foreign_keys", "journal_mode", "busy_timeout", "synchronous")
            }
    finally:
        await engine.dispose()
    assert pragmas == {
        "foreign_keys": 1,
        "journal_mode": "wal",
        "busy_timeout": 1234,
        "synchronous": 1,
    }


async def test_unit_of_work_statements_skip_the_greenlet_but_async_calls_still_work(
    tmp_path: Path,
) -> None:
    from sqlalchemy.util.concurrency import in_greenlet

    from ccweb_store.config import Settings
    from ccweb_store.db import migrate
    from ccweb_store.uow import Store

    store = Store.from_settings(Settings(database_url=f"sqlite:///{tmp_path / 'uow.db'}"))
    seen: list[tuple[str, bool]] = []

    @event.listens_for(store.engine.sync_engine, "before_cursor_execute")
    def record(_conn: Any, _cursor: Any, statement: str, *_args: Any) -> None:
        seen.append((statement.split()[0], in_greenlet()))

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
                await uow.connection.execute(sa.text("SELECT count(*) FROM messages"))
            ).scalar()
    finally:
        await store.dispose()
    assert count == 1
    assert {verb for verb, _ in repository_calls} >= {"BEGIN", "SELECT", "INSERT", "UPDATE"}
    assert not any(in_greenlet for _, in_greenlet in repository_calls)
    assert seen[-1] == ("SELECT", True)  # the AsyncConnection call went through its greenlet
