"""PostgreSQL through asyncpg: the engine's pool, and a unit of work's transaction on asyncpg's
public ``Connection``.

A unit of work checks a connection out of SQLAlchemy's pool (``AsyncEngine.connect``) and runs
every statement on the asyncpg connection under it (``get_raw_connection().driver_connection``):
``fetch`` and ``execute`` prepare each statement once per connection and keep it (asyncpg's
statement cache). The unit of work owns its transaction (``transaction``: asyncpg's
``Connection.transaction``), begun with its first statement; SQLAlchemy runs nothing on that
connection meanwhile, and its pool finds no transaction of its own to end when the connection
comes back.

A pooled connection is pinged before use only after sitting idle (``PING_AFTER_IDLE_S``); one
the server closed since (asyncpg saw its socket end) is replaced without a round trip. A
connection that dies unnoticed within that second fails the statement that finds out: a unit
of work's first statement then runs again once on a fresh connection, when nothing of it can
have been written (``transaction.PostgresTransaction._first``).
"""

from __future__ import annotations

import secrets
import time
from collections.abc import Callable
from contextlib import AbstractAsyncContextManager, suppress
from pathlib import Path
from typing import Any

import asyncpg
import orjson
import sqlalchemy as sa
from sqlalchemy import event, exc
from sqlalchemy.engine import Connection, ExceptionContext, make_url
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine, create_async_engine
from sqlalchemy.pool import ConnectionPoolEntry, QueuePool

from ccweb_store.domain import json_values
from ccweb_store.store.failures import unsent_on_dead_connection
from ccweb_store.store.postgres import bulk, listen, vacuum
from ccweb_store.store.postgres.transaction import PostgresTransaction
from ccweb_store.store.postgres.url_options import connect_options
from ccweb_store.store.transaction import CompiledStatements

#: A pooled connection idle for longer than this is pinged before it is used.
PING_AFTER_IDLE_S = 1.0
_IDLE_SINCE = "ccweb_idle_since"


def create_postgres_engine(url: str, **kwargs: Any) -> AsyncEngine:
    """An engine on ``postgresql+asyncpg`` with the pool setup the store relies on; the URL's
    libpq parameters (``sslmode``…) become asyncpg's connect arguments (``url_options``)."""
    bare, connect_args = connect_options(make_url(url))
    kwargs["connect_args"] = {**connect_args, **kwargs.get("connect_args", {})}
    kwargs.setdefault("pool_size", 10)
    kwargs.setdefault("max_overflow", 10)
    kwargs.setdefault("json_deserializer", loads_postgres_json)
    engine = create_async_engine(bare, **kwargs)
    if not kwargs.get("pool_pre_ping"):
        _ping_after_idle(engine)

    @event.listens_for(engine.sync_engine, "handle_error")
    def _dead_connection(context: ExceptionContext) -> None:
        if unsent_on_dead_connection(context.original_exception):
            context.is_disconnect = True  # SQLAlchemy invalidates the connection

    return engine


def loads_postgres_json(text: str) -> Any:
    """A PostgreSQL JSON column's value. ``jsonb`` keeps numbers as ``numeric``, so a float
    such as ``1e20`` comes back written as an integer; orjson reads an integer beyond 64 bits
    as the float it was. Text orjson refuses takes ``json_values.loads_stored``."""
    try:
        return orjson.loads(text)
    except orjson.JSONDecodeError:
        return json_values.loads_stored(text)


def _ping_after_idle(engine: AsyncEngine) -> None:
    """Ping a pooled connection before use only when it sat idle for ``PING_AFTER_IDLE_S``.

    SQLAlchemy's ``pool_pre_ping`` pings at every checkout, a round trip against the few a
    unit of work needs. A connection handed back moments ago has just worked, unless asyncpg
    has seen the server close it since (``driver_closed``, no round trip); one that sat in the
    pool may have been closed unnoticed (an idle timeout across a network) and is pinged.
    Either is replaced here, as the pre-ping would.
    """

    @event.listens_for(engine.sync_engine, "checkin")
    def _note_idle(_dbapi_connection: Any, record: ConnectionPoolEntry) -> None:
        record.info[_IDLE_SINCE] = time.monotonic()

    @event.listens_for(engine.sync_engine, "checkout")
    def _ping_if_idle(dbapi_connection: Any, record: ConnectionPoolEntry, _proxy: Any) -> None:
        if driver_closed(dbapi_connection):
            raise exc.DisconnectionError("the server closed a pooled connection")
        idle_since = record.info.get(_IDLE_SINCE)
        if idle_since is None or time.monotonic() - idle_since < PING_AFTER_IDLE_S:
            return
        try:
            engine.dialect.do_ping(dbapi_connection)
        except Exception as error:  # the pool replaces the connection and tries again
            raise exc.DisconnectionError(f"a pooled connection failed its ping: {error}") from error


def driver_closed(dbapi_connection: Any) -> bool:
    """Whether asyncpg knows the connection to be closed: it reads the socket whenever the
    event loop runs, so it sees the server end the connection without a round trip."""
    is_closed = getattr(dbapi_connection.driver_connection, "is_closed", None)
    return bool(is_closed()) if is_closed is not None else False


def _ping(sync: Connection) -> None:
    """The dialect's ping (what the pool's pre-ping runs), on a connection in use."""
    dbapi_connection = sync.connection.dbapi_connection
    assert dbapi_connection is not None, "the connection is closed"
    sync.dialect.do_ping(dbapi_connection)


class PostgresDatabase:
    """A PostgreSQL database and the connections this process uses on it.

    Up to the pool's size of connections stay checked out between units of work, each used
    by one at a time: taking one off that list costs far less than a checkout from the pool
    and its return (its events, its reset), and its prepared statements stay warm. One the
    server closed since (asyncpg saw its socket end) is dropped without a round trip; one idle
    for ``PING_AFTER_IDLE_S`` is pinged first, as the pool would (``_ping_after_idle``).
    """

    def __init__(self, engine: AsyncEngine) -> None:
        self.engine = engine
        self.statements = CompiledStatements(engine.dialect)
        #: Names this process in the event notices it sends (``repositories.events``).
        self.origin = secrets.token_hex(8)
        pool = engine.pool
        self.keep = pool.size() if isinstance(pool, QueuePool) else 2
        #: Idle connections, the asyncpg connection under each, and since when it is idle.
        self._idle: list[tuple[AsyncConnection, asyncpg.Connection, float]] = []
        self._closed = False

    async def begin(self, *, write: bool, autocommit: bool = False) -> PostgresTransaction:
        """A unit of work's connection; ``write`` runs its statements in one transaction,
        unless ``autocommit``: each statement then commits by itself, as a read's do (units
        of work that need no atomicity: saves the ``BEGIN`` and ``COMMIT`` round trips)."""
        connection, driver = await self.connect()
        return PostgresTransaction(self, connection, driver, atomic=write and not autocommit)

    async def connect(self, *, fresh: bool = False) -> tuple[AsyncConnection, asyncpg.Connection]:
        """A connection for a unit of work: one kept idle (unless ``fresh``), or the pool's."""
        while self._idle and not fresh:
            connection, driver, idle_since = self._idle.pop()
            if await self._usable(connection, driver, idle_since):
                return connection, driver
        connection = await self.engine.connect()
        try:
            raw = await connection.get_raw_connection()
        except BaseException:
            await connection.close()
            raise
        return connection, raw.driver_connection

    async def _usable(
        self, connection: AsyncConnection, driver: asyncpg.Connection, idle_since: float
    ) -> bool:
        if not connection.invalidated and not driver.is_closed():
            if time.monotonic() - idle_since < PING_AFTER_IDLE_S:
                return True
            try:
                await connection.run_sync(_ping)
                return True
            except Exception:
                pass
        await self.drop(connection)
        return False

    async def release(self, connection: AsyncConnection, driver: asyncpg.Connection) -> None:
        """Keep the connection for the next unit of work, or give it back to the pool."""
        if self._closed or connection.invalidated or len(self._idle) >= self.keep:
            await connection.close()
        else:
            self._idle.append((connection, driver, time.monotonic()))

    async def drop(self, connection: AsyncConnection) -> None:
        """Close a connection for good: the pool opens a new one in its place."""
        with suppress(Exception):  # a dead connection may fail to say goodbye
            if not connection.invalidated:
                await connection.invalidate()
            await connection.close()

    def snapshot(self) -> AbstractAsyncContextManager[AsyncConnection]:
        """A connection whose reads all see one snapshot (``bulk.snapshot``)."""
        return bulk.snapshot(self.engine)

    def byte_ordered(self, column: sa.ColumnElement[Any]) -> sa.ColumnElement[Any]:
        return bulk.byte_ordered(column)

    def portable_json_text(self, text: str) -> str:
        return bulk.portable_json_text(text, loads_postgres_json)

    async def issued_ids(self, connection: AsyncConnection, table: sa.Table) -> int:
        return await bulk.issued_ids(connection, table)

    async def backup(self, target: Path, tables: list[sa.Table]) -> dict[str, Any]:
        """PostgreSQL is backed up by its own tool: the ``pg_dump`` command for ``target``."""
        return {"command": bulk.pg_dump_command(self.engine.url, target)}

    def watch_commits(self, poke: Callable[[], None]) -> AbstractAsyncContextManager[None]:
        """Call ``poke`` when another process commits events, while the block runs."""
        return listen.listening(self.engine, poke, ignore=self.origin)

    async def vacuum_interval(self, configured: float | None) -> float:
        return await vacuum.vacuum_interval(self.engine, configured)

    async def keep_vacuumed(self, interval: float) -> None:
        await vacuum.keep_vacuumed(self.engine, interval)

    async def refresh_statistics(self) -> None:
        """``ANALYZE`` every table after a bulk load (``vacuum.analyze_tables``)."""
        await vacuum.analyze_tables(self.engine)

    async def close(self) -> None:
        """Give the idle connections back to the pool; those in use go back when released."""
        self._closed = True
        idle, self._idle = self._idle, []
        for connection, _, _ in idle:
            await connection.close()
