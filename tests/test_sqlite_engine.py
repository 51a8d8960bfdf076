"""The SQLite engine: SQLAlchemy's ``sqlite+aiosqlite`` dialect, the connection setup the
store relies on, and what a unit of work runs on it."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
from sqlalchemy import event
from sqlalchemy.dialects.sqlite.aiosqlite import SQLiteDialect_aiosqlite
from sqlalchemy.exc import IntegrityError

from ccweb_store.config import Settings
from ccweb_store.store.db import create_engine, migrate
from ccweb_store.store.uow import Store


@pytest.fixture
def url(tmp_path: Path) -> str:
    return f"sqlite+aiosqlite:///{tmp_path / 'engine.db'}"


async def test_every_spelling_of_a_sqlite_url_gets_sqlalchemys_aiosqlite_dialect(
    tmp_path: Path,
) -> None:
    for url in (f"sqlite+aiosqlite:///{tmp_path / 'a.db'}", f"sqlite:///{tmp_path / 'b.db'}"):
        engine = create_engine(url)
        try:
            assert isinstance(engine.dialect, SQLiteDialect_aiosqlite)
            assert engine.url.database == url.split(":///")[1]
        finally:
            await engine.dispose()


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


async def test_a_write_runs_in_one_immediate_transaction_and_a_read_in_none(
    tmp_path: Path,
) -> None:
    """sqlite3's own trace of every statement the driver runs: a unit of work that writes
    takes the write lock first (``BEGIN IMMEDIATE``) and commits; a read runs its statements
    alone, each on its own snapshot, with no transaction to begin or end."""
    store = Store.from_settings(Settings(database_url=f"sqlite:///{tmp_path / 'uow.db'}"))
    seen: list[str] = []

    @event.listens_for(store.engine.sync_engine, "connect")
    def trace(dbapi_connection: Any, _record: Any) -> None:
        dbapi_connection.run_async(lambda driver: driver.set_trace_callback(seen.append))

    try:
        await migrate(store.engine)
        await store.engine.dispose()  # connect again, traced
        async with store.uow() as uow:
            await uow.sessions.create("warm", title="Warm")  # connections made and set up
            await uow.commit()
        seen.clear()
        async with store.uow() as uow:
            await uow.sessions.create("inline", title="Inline")
            await uow.messages.append("inline", "user", "hello")
            await uow.commit()
        repository_calls = list(seen)
        seen.clear()
        async with store.read_uow() as uow:
            count = (await uow._execute(sa.text("SELECT count(*) FROM messages"))).scalar()
            assert await uow.sessions.get("inline") is not None
        read_calls = list(seen)
    finally:
        await store.dispose()
    assert count == 1
    verbs = [" ".join(statement.split()[:2]).upper() for statement in repository_calls]
    assert verbs[0] == "BEGIN IMMEDIATE" and verbs[-1] == "COMMIT"
    inside = {verb.split()[0] for verb in verbs[1:-1]}
    assert {"INSERT", "UPDATE"} <= inside <= {"SELECT", "INSERT", "UPDATE"}  # one transaction
    assert [statement.split()[0].upper() for statement in read_calls] == ["SELECT", "SELECT"]


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
