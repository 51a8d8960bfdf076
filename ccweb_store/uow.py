"""The unit of work: one transaction per request or tool call.

``async with store.uow() as uow: …; await uow.commit()`` — anything not committed is
rolled back when the block exits. Repositories hang off the unit of work and share its
``AsyncConnection`` (Core: the repositories write with Core statements and fill their own
objects, so an ORM session would only add its cost); nothing else begins or ends a
transaction.
"""

from __future__ import annotations

import asyncio
import sqlite3
from datetime import datetime
from types import TracebackType
from typing import Any

from sqlalchemy.engine import Connection
from sqlalchemy.exc import OperationalError
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from ccweb_store.checkpoints import WalCheckpointer
from ccweb_store.config import Settings
from ccweb_store.db import create_engine, read_only, sqlite_file
from ccweb_store.repositories import (
    MessageRepository,
    ReplyRepository,
    RunRepository,
    SessionRepository,
    UnitState,
)

#: The savepoint a unit of work joining an open transaction works in (one at a time).
SAVEPOINT = "ccweb_unit_of_work"
#: Sleeps between attempts at SQLite's write lock: from this, doubling up to the next.
BEGIN_RETRY_FIRST_S = 0.0002
BEGIN_RETRY_MAX_S = 0.01


class SQLiteWriter:
    """The one connection this process writes to a SQLite file with: the turns on it, and the
    commits it groups.

    Turns. SQLite lets one transaction write at a time. Writers of this process queue on
    ``lock`` instead of in SQLite's busy handler, and whoever holds the lock holds the
    connection, so it stays open from one unit of work to the next (no pool checkout and reset
    per write). The ``BEGIN IMMEDIATE`` that takes SQLite's write lock is tried without
    waiting (this connection's busy timeout is 0) and retried after short sleeps on the event
    loop, for up to the configured busy timeout: a writer that waits for another process (or
    another store of this one) lets this process's event loop run meanwhile.

    Group commit. A unit of work's ``commit`` does not COMMIT at once: it passes the turn on
    and waits, while the units of work already ready to run on the event loop go on in the
    same SQLite transaction, each inside a savepoint of its own, so that one that fails undoes
    only its own writes. One COMMIT at the end of that loop iteration makes them all durable,
    and only then do their ``commit`` calls return; if it fails, they all raise. Nothing is
    reported done before it is committed, but a burst of concurrent requests pays for one
    COMMIT, and writes each page they share to the WAL once, instead of once per request.
    """

    def __init__(self, engine: AsyncEngine, busy_timeout_ms: int) -> None:
        self.engine = engine
        self.busy_timeout_ms = busy_timeout_ms
        self.lock = asyncio.Lock()
        self._connection: AsyncConnection | None = None
        #: Whether the unit of work holding the turn works inside a savepoint (it joined a
        #: transaction that others committed in) rather than in a transaction it began.
        self._in_savepoint = False
        #: One future per unit of work that committed into the open transaction.
        self._waiting: list[asyncio.Future[None]] = []
        self._commit_scheduled = False
        path = sqlite_file(engine)
        #: Checkpoints the WAL off the event loop's thread (None for an in-memory database).
        self.checkpointer = WalCheckpointer(path) if path is not None else None

    async def acquire(self) -> AsyncConnection:
        """Take the turn: the connection, in a transaction of this unit of work's own, or in a
        savepoint of the open one that others committed in."""
        await self.lock.acquire()
        try:
            connection = self._connection
            if connection is None or connection.invalidated:
                connection = self._connection = await self.engine.connect()
                self._driver().execute("PRAGMA busy_timeout = 0")  # see _begin
            sync = self._sync()
            self._in_savepoint = sync.in_transaction()
            if self._in_savepoint:
                self._driver().execute(f"SAVEPOINT {SAVEPOINT}")
            else:
                await self._begin(sync)
        except BaseException:
            self._pass_turn()
            raise
        return connection

    async def _begin(self, sync: Connection) -> None:
        """``BEGIN IMMEDIATE`` (the dialect's), retried while another connection writes."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.busy_timeout_ms / 1000
        delay = BEGIN_RETRY_FIRST_S
        while True:
            try:
                sync.begin()
                return
            except OperationalError as error:
                if not _is_busy(error) or loop.time() >= deadline:
                    raise
            await asyncio.sleep(delay)
            delay = min(delay * 2, BEGIN_RETRY_MAX_S)

    async def commit(self) -> None:
        """End the turn keeping this unit of work's writes; return once they are committed."""
        if self._in_savepoint:
            try:
                self._driver().execute(f"RELEASE {SAVEPOINT}")
            except BaseException:
                self.release()
                raise
        committed = asyncio.get_running_loop().create_future()
        self._waiting.append(committed)
        self._pass_turn()
        await committed

    def release(self) -> None:
        """End the turn undoing this unit of work's writes (only its own)."""
        try:
            if self._in_savepoint:
                driver = self._driver()
                driver.execute(f"ROLLBACK TO {SAVEPOINT}")
                driver.execute(f"RELEASE {SAVEPOINT}")
            elif self._sync().in_transaction():
                self._sync().rollback()  # it began the transaction: nobody else is in it
        except BaseException as error:
            self._discard(error)
            raise
        finally:
            self._pass_turn()

    def _pass_turn(self) -> None:
        self.lock.release()
        if self._waiting and not self._commit_scheduled:
            self._commit_scheduled = True
            asyncio.get_running_loop().call_soon(self._commit_when_idle)

    def _commit_when_idle(self) -> None:
        self._commit_scheduled = False
        if not self.lock.locked():  # else whoever holds the turn schedules this again
            self._commit_waiting()

    def _commit_waiting(self) -> None:
        """COMMIT the open transaction for every unit of work waiting on it."""
        waiting, self._waiting = self._waiting, []
        if not waiting:
            return
        try:
            self._sync().commit()
        except Exception as error:
            self._waiting = waiting
            self._discard(error)
            return
        if self.checkpointer is not None:
            self.checkpointer.note_commit()
        for committed in waiting:
            if not committed.done():
                committed.set_result(None)

    def _sync(self) -> Connection:
        assert self._connection is not None and self._connection.sync_connection is not None
        return self._connection.sync_connection

    def _driver(self) -> Any:
        """The ``sqlite3`` connection itself, for the statements SQLAlchemy need not know."""
        return self._sync().connection.dbapi_connection

    def _discard(self, error: BaseException | None = None) -> None:
        """Drop a connection whose transaction could not end cleanly (rolling it back if it
        still can): the units of work waiting for its COMMIT fail, and the next turn connects
        afresh."""
        waiting, self._waiting = self._waiting, []
        for committed in waiting:
            if not committed.done():
                committed.set_exception(
                    error or RuntimeError("the SQLite transaction was lost before its COMMIT")
                )
        if self._connection is None:
            return
        sync = self._sync()
        self._connection = None
        try:
            if sync.in_transaction():
                sync.rollback()
        finally:
            sync.invalidate()

    async def close(self) -> None:
        """Commit what waits for it, give the connection back to the pool, and stop the
        checkpoint thread (after the checkpoint it may be running)."""
        async with self.lock:
            self._commit_waiting()
            if self.checkpointer is not None:
                self.checkpointer.stop()
            if self._connection is not None:
                self._driver().execute(f"PRAGMA busy_timeout = {int(self.busy_timeout_ms)}")
                await self._connection.close()
                self._connection = None


def _is_busy(error: OperationalError) -> bool:
    """Whether SQLite refused because another connection holds the lock (SQLITE_BUSY)."""
    code = getattr(error.orig, "sqlite_errorcode", None)
    return code is not None and code & 0xFF == sqlite3.SQLITE_BUSY


class UnitOfWork:
    """One transaction and the repositories that work inside it."""

    connection: AsyncConnection
    sessions: SessionRepository
    messages: MessageRepository
    replies: ReplyRepository
    runs: RunRepository

    def __init__(self, engine: AsyncEngine, writer: SQLiteWriter | None = None) -> None:
        self._engine = engine
        self._writer = writer

    async def __aenter__(self) -> UnitOfWork:
        if self._writer is not None:
            self.connection = await self._writer.acquire()
        else:
            self.connection = await self._engine.connect()
        state = self._state = UnitState(self.connection)
        self.sessions = SessionRepository(self.connection, state)
        self.messages = MessageRepository(self.connection, state)
        self.replies = ReplyRepository(self.connection, state)
        self.runs = RunRepository(self.connection, state)
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        # Whatever was not committed is rolled back; the objects the repositories returned
        # are plain snapshots and stay readable after the block.
        if self._writer is not None:
            self._end_turn()
            return
        inline = self._state.inline
        if inline is not None:
            inline.close()
        else:
            await self.connection.close()

    async def commit(self) -> None:
        """Commit. On SQLite's writer this ends the unit of work: it returns once the writes
        are committed (``SQLiteWriter``), and no statement may follow."""
        if self._writer is not None:
            if self._state.finished:
                raise RuntimeError("this unit of work has already ended; open a new one")
            self._state.finished = True
            await self._writer.commit()
            return
        inline = self._state.inline
        if inline is not None:
            inline.commit()
        else:
            await self.connection.commit()

    async def rollback(self) -> None:
        """Roll back. On SQLite's writer this ends the unit of work, like leaving the block."""
        if self._writer is not None:
            self._end_turn()
            return
        inline = self._state.inline
        if inline is not None:
            inline.rollback()
        else:
            await self.connection.rollback()

    def _end_turn(self) -> None:
        assert self._writer is not None
        if not self._state.finished:
            self._state.finished = True
            self._writer.release()


class Store:
    """The database handle the whole service shares: an engine and unit-of-work factories."""

    def __init__(self, engine: AsyncEngine, settings: Settings | None = None) -> None:
        self.engine = engine
        self.settings = settings or Settings()
        self._reader = read_only(engine)
        self._writer = (
            SQLiteWriter(engine, self.settings.sqlite_busy_timeout_ms)
            if engine.dialect.name == "sqlite"
            else None
        )
        #: Until when no run lease can have expired, as last found by ``runs._lease_expired``.
        self.no_lease_expires_before: datetime | None = None

    @classmethod
    def from_settings(cls, settings: Settings) -> Store:
        engine = create_engine(
            settings.database_url, busy_timeout_ms=settings.sqlite_busy_timeout_ms
        )
        return cls(engine, settings)

    @property
    def dialect(self) -> str:
        return self.engine.dialect.name

    @property
    def checkpointer(self) -> WalCheckpointer | None:
        """The thread checkpointing this store's SQLite file (``checkpoints``); None on
        PostgreSQL and in-memory SQLite."""
        return self._writer.checkpointer if self._writer is not None else None

    def uow(self) -> UnitOfWork:
        """A unit of work that may write (SQLite: ``BEGIN IMMEDIATE``).

        Never open one inside another: on SQLite the inner one would wait for the outer one.
        """
        return UnitOfWork(self.engine, self._writer)

    def read_uow(self) -> UnitOfWork:
        """A unit of work that only reads (SQLite: a deferred transaction, no write lock)."""
        return UnitOfWork(self._reader)

    async def close(self) -> None:
        """Give back the connection this store writes with and stop its checkpoint thread
        (SQLite); the engine stays open.

        For a store that shares another's engine; ``dispose`` closes both.
        """
        if self._writer is not None:
            await self._writer.close()

    async def dispose(self) -> None:
        await self.close()
        await self.engine.dispose()
