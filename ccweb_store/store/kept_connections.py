"""Connections a store keeps open for its units of work, each used by one at a time: SQLite's
readers (``SQLiteReaders``) and every unit of work on PostgreSQL (``PostgresConnections``).
SQLite's writes take turns on one connection of their own (``sqlite_writer``)."""

from __future__ import annotations

import time

from sqlalchemy.engine import Connection
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from ccweb_store.store import db
from ccweb_store.store.sqlite.file_watch import SQLiteFileWatch


class KeptConnections:
    """Open connections kept between units of work, each used by one at a time.

    Through the engine's pool a unit of work paid for a checkout and a return (a greenlet
    each, the pool's events, a reset) and for SQLAlchemy's transaction object: ~100 µs around
    a 10 µs read on SQLite, ~250 µs of CPU around a unit of work on PostgreSQL. Here a unit of
    work takes an idle connection off a list and gives it back, its transaction begun and
    ended on the driver (SQLite's ``BEGIN`` when it is taken, PostgreSQL's with its first
    statement; ``end``). Up to ``keep`` connections stay open between
    units of work, their caches warm (SQLite's pages, asyncpg's prepared statements); units of
    work that overlap beyond that open more, which are closed afterwards.
    """

    def __init__(self, engine: AsyncEngine, keep: int) -> None:
        self.engine = engine
        self.keep = keep
        #: Idle connections and since when (``time.monotonic``) each has been idle.
        self._idle: list[tuple[AsyncConnection, float]] = []
        self._closed = False

    async def acquire(self, *, fresh: bool = False) -> AsyncConnection:
        """An open connection, ready for a unit of work's statements: one kept idle, or
        (``fresh``, or none kept) one from the engine's pool."""
        while self._idle and not fresh:
            connection, idle_since = self._idle.pop()
            if await self._usable(connection, idle_since):
                break
        else:
            connection = await self.engine.connect()
        return connection

    async def release(self, connection: AsyncConnection) -> None:
        """Roll back what the unit of work left uncommitted and keep the connection for the
        next one (or close it, when enough are kept or it failed)."""
        try:
            await self.end(connection, commit=False)
        except BaseException:
            await connection.invalidate()
            await connection.close()
            raise
        if self._closed or connection.invalidated or len(self._idle) >= self.keep:
            await connection.close()
        else:
            self._idle.append((connection, time.monotonic()))

    async def close(self) -> None:
        """Close the idle connections; those in use are closed when released."""
        self._closed = True
        idle, self._idle = self._idle, []
        for connection, _ in idle:
            await connection.close()

    async def end(self, connection: AsyncConnection, *, commit: bool) -> None:
        """COMMIT or ROLLBACK the unit of work's transaction, if one began."""
        raise NotImplementedError

    async def _usable(self, connection: AsyncConnection, idle_since: float) -> bool:
        """Whether an idle connection can serve the next unit of work."""
        return not connection.invalidated


class SQLiteReaders(KeptConnections):
    """Read-only units of work on SQLite: ``BEGIN`` on the driver takes no lock until the first
    read, which fixes the snapshot the unit of work sees; ``ROLLBACK`` ends it
    (``db.end_sqlite_transaction``).

    A read is refused (``DatabaseFileMissing``) once the file's path no longer names the file
    the store opened, checked at most once a second (``file_watch``): the store serves
    nothing from a file that the next start would not open."""

    KEEP = 4

    def __init__(self, engine: AsyncEngine, file_watch: SQLiteFileWatch | None = None) -> None:
        super().__init__(engine, self.KEEP)
        self.file_watch = file_watch

    async def acquire(self, *, fresh: bool = False) -> AsyncConnection:
        # The base class's, without its awaits: every step is a call on the driver, and the
        # read units of work of the busiest tools take a connection each.
        if self.file_watch is not None:
            self.file_watch.check_for_read()
        idle = self._idle
        while idle and not fresh:
            connection, _ = idle.pop()
            sync = connection.sync_connection
            if sync is not None and not sync.invalidated:
                break
        else:
            connection = await self.engine.connect()
        try:
            db.run_on_sqlite_driver(connection, "BEGIN")
        except BaseException:
            await connection.close()
            raise
        return connection

    async def end(self, connection: AsyncConnection, *, commit: bool) -> None:
        db.end_sqlite_transaction(connection, commit=commit)


class PostgresConnections(KeptConnections):
    """Units of work on PostgreSQL, reading (an autocommit engine, ``db.read_only``) or
    writing: the transaction begins with the first statement as SQLAlchemy would begin it
    (``db.begin_postgres_transaction``) and ends on asyncpg (``db.end_postgres_transaction``).
    A connection the server is known to have closed (asyncpg saw its socket end: a terminated
    backend, a restart) is dropped without a round trip; one idle for longer than
    ``db.PING_AFTER_IDLE_S`` is pinged before it is used, as the pool would
    (``db._ping_after_idle``), and dropped if the ping fails. A connection that dies unnoticed
    fails the statement that finds out, which the unit of work may run again on a fresh one
    (``uow.UnitOfWork``)."""

    async def end(self, connection: AsyncConnection, *, commit: bool) -> None:
        await db.end_postgres_transaction(connection, commit=commit)

    async def _usable(self, connection: AsyncConnection, idle_since: float) -> bool:
        if connection.invalidated:
            return False
        if db.postgres_connection_closed(connection):
            await connection.invalidate()
            await connection.close()
            return False
        if time.monotonic() - idle_since < db.PING_AFTER_IDLE_S:
            return True
        try:
            await connection.run_sync(_ping)
        except Exception:
            await connection.invalidate()
            await connection.close()
            return False
        return True


def _ping(sync: Connection) -> None:
    """The dialect's ping (what the pool's pre-ping runs), on a connection in use."""
    dbapi_connection = sync.connection.dbapi_connection
    assert dbapi_connection is not None
    sync.dialect.do_ping(dbapi_connection)
