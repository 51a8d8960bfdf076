"""SQLite's readers: the connections a process keeps open for its read-only units of work
(``SQLiteReaders``). The unit of work (``uow.py``) takes one for each ``read_uow`` on a
SQLite file."""

from __future__ import annotations

from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from ccweb_store.db import end_sqlite_transaction, run_on_sqlite_driver


class SQLiteReaders:
    """Connections kept open for read-only units of work, each used by one at a time.

    Through the engine's pool a read costs several times the read itself: the checkout (a
    greenlet, the pool's events), SQLAlchemy's transaction object and the reset on return took
    ~100 µs around a 10 µs ``SELECT``. Here a unit of work takes an idle connection off a
    list, runs ``BEGIN`` on the driver (SQLite takes no lock until the first read, which
    fixes the snapshot the unit of work sees) and ``ROLLBACK`` when it is done
    (``db.end_sqlite_transaction``). Up to ``KEEP`` connections stay open between units of
    work, each with its page cache warm; units of work that overlap beyond that open more,
    which are closed afterwards.
    """

    KEEP = 4

    def __init__(self, engine: AsyncEngine) -> None:
        self.engine = engine
        self._idle: list[AsyncConnection] = []
        self._closed = False

    async def acquire(self) -> AsyncConnection:
        """An open connection in a transaction of its own, ready to read."""
        connection = self._idle.pop() if self._idle else await self.engine.connect()
        try:
            run_on_sqlite_driver(connection, "BEGIN")
        except BaseException:
            await connection.close()
            raise
        return connection

    async def release(self, connection: AsyncConnection) -> None:
        """End the connection's transaction and keep it for the next unit of work (or close
        it, when enough are kept or it failed)."""
        try:
            end_sqlite_transaction(connection, commit=False)
        except BaseException:
            await connection.invalidate()
            await connection.close()
            raise
        if self._closed or connection.invalidated or len(self._idle) >= self.KEEP:
            await connection.close()
        else:
            self._idle.append(connection)

    async def close(self) -> None:
        """Close the idle connections; those in use are closed when released."""
        self._closed = True
        idle, self._idle = self._idle, []
        for connection in idle:
            await connection.close()
