"""Engines and migrations: the engine for a database URL (SQLite through aiosqlite,
PostgreSQL through asyncpg, each set up by its driver module), whether an error is the
database failing rather than the request, and Alembic upgrades to head."""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Any

from sqlalchemy import text
from sqlalchemy.engine import Connection, make_url
from sqlalchemy.exc import DBAPIError
from sqlalchemy.exc import TimeoutError as PoolTimeout
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from ccweb_store.config import database_kind, normalize_database_url
from ccweb_store.domain.errors import DatabaseUnavailable
from ccweb_store.store.postgres.driver import create_postgres_engine, unsent_on_dead_connection
from ccweb_store.store.sqlite.driver import create_sqlite_engine

PROJECT_ROOT = Path(__file__).resolve().parents[2]
ALEMBIC_INI = PROJECT_ROOT / "alembic.ini"
MIGRATIONS_DIR = PROJECT_ROOT / "migrations"


def create_engine(url: str, *, busy_timeout_ms: int = 30_000, **kwargs: Any) -> AsyncEngine:
    """An async engine for ``url`` with the connection setup this service relies on."""
    url = normalize_database_url(url)
    if database_kind(url) == "sqlite":
        return create_sqlite_engine(url, busy_timeout_ms, **kwargs)
    return create_postgres_engine(url, **kwargs)


#: PostgreSQL errors that say the server cannot serve now, whatever the request: its
#: shutdown, crash or start (``57P01``-``57P03``), no connection slot left (``53300``), and
#: every connection exception (class ``08``).
UNAVAILABLE_SQLSTATES = frozenset({"57P01", "57P02", "57P03", "53300"})
#: SQLite's (primary) result codes that say the file cannot be read or written now, and the
#: reason a client is told.
UNAVAILABLE_SQLITE_CODES = {
    sqlite3.SQLITE_IOERR: "the database file cannot be read or written (disk I/O error)",
    sqlite3.SQLITE_CANTOPEN: "the database file cannot be opened",
    sqlite3.SQLITE_BUSY: (
        "the database is busy: another process held its write lock for longer than "
        "CCWEB_SQLITE_BUSY_TIMEOUT_MS"
    ),
    sqlite3.SQLITE_LOCKED: "the database is busy (locked)",
    sqlite3.SQLITE_FULL: "the database is full: the disk holding it has no room left",
}


def database_failure(error: BaseException) -> DatabaseUnavailable | None:
    """The ``DatabaseUnavailable`` to answer when ``error`` is the database failing rather
    than the request (a connection refused or lost, a server shutting down or starting up, a
    SQLite file that cannot be opened, read or written, or stays locked); None for any other.

    Looks through SQLAlchemy's wrapper (``orig``) and the exceptions each was raised from.
    The reason names neither the database's host nor its path.
    """
    if isinstance(error, DBAPIError) and error.connection_invalidated:
        return DatabaseUnavailable("the database is unreachable (the connection to it was lost)")
    if isinstance(error, PoolTimeout):
        return DatabaseUnavailable(
            "every connection of the server to the database is in use (the pool timed out)"
        )
    cause: BaseException | None = error
    while cause is not None:
        if isinstance(cause, sqlite3.Error):
            reason = UNAVAILABLE_SQLITE_CODES.get(getattr(cause, "sqlite_errorcode", 0) & 0xFF)
            return DatabaseUnavailable(reason) if reason is not None else None
        sqlstate = getattr(cause, "sqlstate", None)
        if isinstance(sqlstate, str) and (
            sqlstate in UNAVAILABLE_SQLSTATES or sqlstate.startswith("08")
        ):
            # The server's own words ("the database system is shutting down"), without the
            # "<class …>: " SQLAlchemy's asyncpg adapter puts before them.
            said = str(cause).rsplit("'>: ", 1)[-1]
            return DatabaseUnavailable(f"the database is unreachable ({said or sqlstate})")
        if isinstance(cause, ConnectionRefusedError):
            return DatabaseUnavailable("the database is unreachable (the connection was refused)")
        if isinstance(cause, TimeoutError):
            return DatabaseUnavailable("the database is unreachable (connecting timed out)")
        if isinstance(cause, OSError):
            detail = cause.strerror or type(cause).__name__
            return DatabaseUnavailable(f"the database is unreachable ({detail})")
        if unsent_on_dead_connection(cause):
            return DatabaseUnavailable(
                "the database is unreachable (the connection to it was lost)"
            )
        cause = cause.orig if isinstance(cause, DBAPIError) else cause.__cause__
    return None


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
    async with engine.connect() as connection:
        await connection.execute(text("SELECT 1"))


async def create_database(server_url: str, name: str) -> str:
    """Create database ``name`` on the PostgreSQL server of ``server_url``; return its URL.

    For tests and benchmarks that want a scratch database of their own.
    """

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
