"""Engines, connection setup, and migrating to head.

SQLite gets its pragmas on every connection and begins writing transactions with
``BEGIN IMMEDIATE``: a deferred transaction that later upgrades to a write fails with
SQLITE_BUSY at once, whatever the busy timeout. PostgreSQL runs on asyncpg.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Awaitable, Callable
from functools import partial
from pathlib import Path
from typing import Any

import aiosqlite
from sqlalchemy import event, text
from sqlalchemy.engine import Connection
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine, create_async_engine
from sqlalchemy.pool import ConnectionPoolEntry

from ccweb_store.config import database_kind, normalize_database_url

PROJECT_ROOT = Path(__file__).resolve().parent.parent
ALEMBIC_INI = PROJECT_ROOT / "alembic.ini"
MIGRATIONS_DIR = PROJECT_ROOT / "migrations"

#: Execution option naming how a SQLite transaction begins: "IMMEDIATE" or "DEFERRED".
SQLITE_BEGIN = "ccweb_sqlite_begin"


def create_engine(url: str, *, busy_timeout_ms: int = 30_000, **kwargs: Any) -> AsyncEngine:
    """An async engine for ``url`` with the connection setup this service relies on."""
    url = normalize_database_url(url)
    if database_kind(url) == "sqlite":
        return _create_sqlite_engine(url, busy_timeout_ms, **kwargs)
    kwargs.setdefault("pool_size", 10)
    kwargs.setdefault("max_overflow", 10)
    kwargs.setdefault("pool_pre_ping", True)
    return create_async_engine(url, **kwargs)


class InlineSQLiteConnection(aiosqlite.Connection):
    """An aiosqlite connection whose statements run on the event loop's own thread.

    aiosqlite hands every call (cursor, execute, fetch, close: four per query) to a worker
    thread, and on SQLite those hand-offs cost far more than the statement. A call on a local
    SQLite file takes microseconds, and this process's writers already take turns on the
    unit of work's lock, so running statements inline blocks the loop only while another
    *process* holds the write lock (for at most the busy timeout).
    """

    async def _execute(self, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        if not self._running or not self._connection:
            raise ValueError("Connection closed")
        return fn(*args, **kwargs)


def _inline_connector(database: str) -> Callable[[], Awaitable[aiosqlite.Connection]]:
    async def connect() -> aiosqlite.Connection:
        connection = InlineSQLiteConnection(
            partial(sqlite3.connect, database, isolation_level=None, check_same_thread=False),
            iter_chunk_size=64,
        )
        connection._thread.daemon = True
        return await connection

    return connect


def _create_sqlite_engine(url: str, busy_timeout_ms: int, **kwargs: Any) -> AsyncEngine:
    from sqlalchemy.engine import make_url

    database = make_url(url).database or ":memory:"
    engine = create_async_engine(url, async_creator=_inline_connector(database), **kwargs)
    sync_engine = engine.sync_engine

    @event.listens_for(sync_engine, "connect")
    def _on_connect(dbapi_connection: Any, _record: ConnectionPoolEntry) -> None:
        # Let us issue BEGIN ourselves (see _on_begin) instead of the driver's implicit one.
        dbapi_connection.isolation_level = None
        cursor = dbapi_connection.cursor()
        try:
            cursor.execute("PRAGMA foreign_keys = ON")
            cursor.execute("PRAGMA journal_mode = WAL")
            cursor.execute(f"PRAGMA busy_timeout = {int(busy_timeout_ms)}")
            cursor.execute("PRAGMA synchronous = NORMAL")
        finally:
            cursor.close()

    @event.listens_for(sync_engine, "begin")
    def _on_begin(connection: Connection) -> None:
        mode = connection.get_execution_options().get(SQLITE_BEGIN, "IMMEDIATE")
        connection.exec_driver_sql(f"BEGIN {mode}")

    return engine


def read_only(engine: AsyncEngine) -> AsyncEngine:
    """The same engine, but SQLite transactions begin DEFERRED (they never write)."""
    return engine.execution_options(**{SQLITE_BEGIN: "DEFERRED"})


def alembic_config(url: str | None = None) -> Any:
    """An Alembic ``Config`` for this project, usable from any working directory."""
    from alembic.config import Config

    config = Config(str(ALEMBIC_INI))
    config.set_main_option("script_location", str(MIGRATIONS_DIR))
    if url is not None:
        config.attributes["database_url"] = normalize_database_url(url)
    return config


async def migrate(engine: AsyncEngine, revision: str = "head") -> None:
    """Upgrade the database behind ``engine`` to ``revision``."""
    await _run_alembic(engine, "upgrade", revision)


async def downgrade(engine: AsyncEngine, revision: str) -> None:
    """Downgrade the database behind ``engine`` to ``revision``."""
    await _run_alembic(engine, "downgrade", revision)


async def _run_alembic(engine: AsyncEngine, verb: str, revision: str) -> None:
    from alembic import command

    def run(sync_connection: Connection) -> None:
        config = alembic_config()
        config.attributes["connection"] = sync_connection
        getattr(command, verb)(config, revision)

    async with engine.begin() as connection:
        await connection.run_sync(run)


async def current_revision(connection: AsyncConnection) -> str | None:
    """The schema revision stamped in the database, or None before any migration."""

    def read(sync_connection: Connection) -> str | None:
        from alembic.runtime.migration import MigrationContext

        return MigrationContext.configure(sync_connection).get_current_revision()

    return await connection.run_sync(read)


async def head_revision() -> str | None:
    """The newest revision the migrations directory knows."""
    from alembic.script import ScriptDirectory

    return ScriptDirectory.from_config(alembic_config()).get_current_head()


async def ping(engine: AsyncEngine) -> None:
    """Raise if the database cannot answer a trivial query."""
    async with read_only(engine).connect() as connection:
        await connection.execute(text("SELECT 1"))


async def create_database(server_url: str, name: str) -> str:
    """Create database ``name`` on the PostgreSQL server of ``server_url``; return its URL.

    For tests and benchmarks that want a scratch database of their own.
    """
    from sqlalchemy.engine import make_url

    await _run_autocommit(server_url, f'CREATE DATABASE "{name}"')
    return (
        make_url(normalize_database_url(server_url))
        .set(database=name)
        .render_as_string(hide_password=False)
    )


async def drop_database(server_url: str, name: str) -> None:
    """Drop database ``name`` (closing its connections) if it exists."""
    await _run_autocommit(server_url, f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


async def _run_autocommit(server_url: str, statement: str) -> None:
    engine = create_engine(server_url, isolation_level="AUTOCOMMIT")
    try:
        async with engine.connect() as connection:
            await connection.execute(text(statement))
    finally:
        await engine.dispose()
