"""The unit of work: one transaction per request or tool call.

``async with store.uow() as uow: …; await uow.commit()`` — anything not committed is
rolled back when the block exits. Repositories hang off the unit of work and share its
``AsyncConnection`` (Core: the repositories write with Core statements and fill their own
objects, so an ORM session would only add its cost); nothing else begins or ends a
transaction.
"""

from __future__ import annotations

import asyncio
from datetime import datetime
from types import TracebackType

from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from ccweb_store.config import Settings
from ccweb_store.db import create_engine, read_only
from ccweb_store.repositories import (
    MessageRepository,
    ReplyRepository,
    RunRepository,
    SessionRepository,
    UnitState,
)


class SQLiteWriter:
    """The one connection this process writes to a SQLite file with, and the turns on it.

    SQLite lets one transaction write at a time. Writers of this process queue on ``lock``
    instead of in SQLite's busy handler, which polls with sleeps of up to 100 ms; the busy
    timeout still arbitrates between processes. Whoever holds the lock holds the connection,
    so it stays open from one unit of work to the next (no pool checkout and reset per write).
    """

    def __init__(self, engine: AsyncEngine) -> None:
        self.engine = engine
        self.lock = asyncio.Lock()
        self._connection: AsyncConnection | None = None

    async def acquire(self) -> AsyncConnection:
        await self.lock.acquire()
        try:
            if self._connection is None or self._connection.invalidated:
                self._connection = await self.engine.connect()
        except BaseException:
            self.lock.release()
            raise
        return self._connection

    def release(self) -> None:
        """End the unit of work: roll back whatever it did not commit, then pass the turn."""
        try:
            sync = self._connection.sync_connection if self._connection is not None else None
            if sync is not None and sync.in_transaction():
                try:
                    sync.rollback()
                except BaseException:
                    self._connection = None  # unusable: the next writer connects afresh
                    sync.invalidate()
                    raise
        finally:
            self.lock.release()

    async def close(self) -> None:
        async with self.lock:
            if self._connection is not None:
                await self._connection.close()
                self._connection = None


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
        # close() rolls back whatever was not committed; the objects the repositories
        # returned are plain snapshots and stay readable after the block.
        if self._writer is not None:
            self._writer.release()
            return
        inline = self._state.inline
        if inline is not None:
            inline.close()
        else:
            await self.connection.close()

    async def commit(self) -> None:
        inline = self._state.inline
        if inline is not None:
            inline.commit()
        else:
            await self.connection.commit()

    async def rollback(self) -> None:
        inline = self._state.inline
        if inline is not None:
            inline.rollback()
        else:
            await self.connection.rollback()


class Store:
    """The database handle the whole service shares: an engine and unit-of-work factories."""

    def __init__(self, engine: AsyncEngine, settings: Settings | None = None) -> None:
        self.engine = engine
        self.settings = settings or Settings()
        self._reader = read_only(engine)
        self._writer = SQLiteWriter(engine) if engine.dialect.name == "sqlite" else None
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

    def uow(self) -> UnitOfWork:
        """A unit of work that may write (SQLite: ``BEGIN IMMEDIATE``).

        Never open one inside another: on SQLite the inner one would wait for the outer one.
        """
        return UnitOfWork(self.engine, self._writer)

    def read_uow(self) -> UnitOfWork:
        """A unit of work that only reads (SQLite: a deferred transaction, no write lock)."""
        return UnitOfWork(self._reader)

    async def close(self) -> None:
        """Give back the connection this store writes with (SQLite); the engine stays open.

        For a store that shares another's engine; ``dispose`` closes both.
        """
        if self._writer is not None:
            await self._writer.close()

    async def dispose(self) -> None:
        await self.close()
        await self.engine.dispose()
