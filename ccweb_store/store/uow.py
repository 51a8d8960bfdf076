"""The unit of work: one transaction per request or tool call.

``async with store.uow() as uow: …; await uow.commit()`` — anything not committed is
rolled back when the block exits. Repositories hang off the unit of work and share its
``AsyncConnection`` (Core: the repositories write with Core statements and fill their own
objects, so an ORM session would only add its cost); nothing else begins or ends a
transaction. On SQLite a writing unit of work takes its turn on the process's one writer
connection (``sqlite_writer``), whose commits are grouped: ``commit`` returns once the
writes are durable, and ends the unit of work; a reading one takes a connection the store
keeps open for reads. On PostgreSQL every unit of work takes one of the connections the store
keeps (``kept_connections``).

A kept PostgreSQL connection can die unnoticed between two units of work (a terminated
backend, a server restart within the last second): the unit of work's first statement then
finds out, and runs again once on a fresh connection when nothing of it can have been
written (``UnitOfWork._first_statement``).

A unit of work that fails because the database cannot serve (unreachable, restarting, a
SQLite file that cannot be opened or stays locked: ``db.database_failure``) raises the
retryable ``errors.DatabaseUnavailable`` instead of the driver's error, so the protocol layers
see a domain error and never a driver's. A SQLite file removed or replaced while the store
runs raises ``errors.DatabaseFileMissing`` (``sqlite_file_watch``).
"""

from __future__ import annotations

import asyncio
from datetime import datetime
from types import TracebackType
from typing import Any, NoReturn

import sqlalchemy as sa
from sqlalchemy.exc import DBAPIError
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine
from sqlalchemy.pool import QueuePool, StaticPool

from ccweb_store.config import Settings
from ccweb_store.store.db import (
    create_engine,
    current_revision,
    database_failure,
    read_only,
    sqlite_file_watch,
    unsent_on_dead_connection,
)
from ccweb_store.store.kept_connections import KeptConnections, PostgresConnections, SQLiteReaders
from ccweb_store.store.repositories import (
    CredentialRepository,
    MessageRepository,
    ReplyRepository,
    RunRepository,
    SecretRepository,
    SendRepository,
    SessionRepository,
    UnitState,
    direct,
)
from ccweb_store.store.repositories.base import Repository
from ccweb_store.store.sqlite.checkpoints import WalCheckpointer
from ccweb_store.store.sqlite.writer import SQLiteWriter

#: The repositories of a unit of work by attribute name (``UnitOfWork.__getattr__``).
REPOSITORIES: dict[str, type[Repository]] = {
    "sessions": SessionRepository,
    "messages": MessageRepository,
    "replies": ReplyRepository,
    "runs": RunRepository,
    "sends": SendRepository,
    "credentials": CredentialRepository,
    "secrets": SecretRepository,
}


class UnitOfWork:
    """One transaction and the repositories that work inside it."""

    sessions: SessionRepository
    messages: MessageRepository
    replies: ReplyRepository
    runs: RunRepository
    sends: SendRepository
    credentials: CredentialRepository
    secrets: SecretRepository

    def __init__(
        self,
        engine: AsyncEngine,
        writer: SQLiteWriter | None = None,
        kept: KeptConnections | None = None,
        *,
        savepoint: bool = True,
    ) -> None:
        self._engine = engine
        self._writer = writer
        self._kept = kept
        self._savepoint = savepoint

    async def __aenter__(self) -> UnitOfWork:
        try:
            if self._writer is not None:
                connection = await self._writer.acquire(savepoint=self._savepoint)
            elif self._kept is not None:
                connection = await self._kept.acquire()
            else:
                connection = await self._engine.connect()
        except Exception as error:
            _raise_as_database_failure(error)
        state = self._state = UnitState(connection)
        if isinstance(self._kept, PostgresConnections):
            state.first_statement = self._first_statement
        return self

    @property
    def connection(self) -> AsyncConnection:
        """The unit of work's connection (a fresh one, if its first statement found the one it
        began on dead). Whoever takes it may run statements of its own, which running a later
        statement again would leave behind on the dead connection: from then on, none is."""
        self._state.first_statement = None
        return self._state.connection

    async def _first_statement(self, stmt: sa.Executable, params: Any) -> Any:
        """Run the unit of work's first statement on PostgreSQL; if its kept connection turns
        out to be dead (a terminated backend, a server restart asyncpg had not seen yet), run
        it once more on a fresh connection, when nothing of it can have been written.

        Nothing of the unit of work ran before this statement, so running it again repeats
        nothing, and the caller never sees the dead connection. It is safe when the statement
        never left (asyncpg refused it: ``db.unsent_on_dead_connection``), when it ran in the
        unit of work's transaction (a writing unit of work: its ``BEGIN`` or the
        statement failed, and the server rolls back a transaction whose connection is lost
        before ``COMMIT``) or when it only reads. A statement of an autocommit unit of work that
        writes (``runs`` claims a run in one) commits by itself and may have committed before
        the connection died, so it is not repeated: its error reaches the caller. Later
        statements are not repeated either (the ones before them were lost with the
        connection), nor is a ``COMMIT``, whose outcome is unknown when its connection dies.
        """
        state = self._state
        state.first_statement = None
        try:
            return await direct.execute_postgres(state.connection, stmt, params)
        except DBAPIError as error:
            if not error.connection_invalidated or not (
                unsent_on_dead_connection(error)
                or getattr(stmt, "is_select", False)
                or not _autocommit(self._engine)
            ):
                raise
        assert self._kept is not None
        dead = state.connection
        state.connection = await self._kept.acquire(fresh=True)
        await dead.close()
        return await direct.execute_postgres(state.connection, stmt, params)

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        # Whatever was not committed is rolled back; the objects the repositories returned
        # are plain snapshots and stay readable after the block.
        try:
            if self._writer is not None:
                self._end_turn()
            elif self._kept is not None:
                await self._kept.release(self._state.connection)
            else:
                await self._state.connection.close()
        except Exception as error:
            _raise_as_database_failure(error)
        if isinstance(exc, Exception):
            failure = database_failure(exc)
            if failure is not None:
                raise failure from exc

    def __getattr__(self, name: str) -> Any:
        """A repository, made the first time the unit of work uses it (most use one or two
        of them) and kept as an attribute from then on."""
        try:
            repository_class = REPOSITORIES[name]
        except KeyError:
            raise AttributeError(name) from None
        state = self.__dict__.get("_state")
        if state is None:
            raise RuntimeError(f"uow.{name}: the unit of work has not begun (use `async with`)")
        repository = repository_class(state.connection, state)
        setattr(self, name, repository)
        return repository

    async def commit(self) -> None:
        """Commit. On SQLite's writer this ends the unit of work: it returns once the writes
        are committed (``SQLiteWriter``), and no statement may follow."""
        self._state.locked_sessions = {}  # the transaction's row locks end with it
        if self._writer is not None:
            if self._state.finished:
                raise RuntimeError("this unit of work has already ended; open a new one")
            self._state.finished = True
            await self._writer.commit()
            return
        if self._kept is not None:
            await self._kept.end(self._state.connection, commit=True)
        else:
            await self._state.connection.commit()

    async def rollback(self) -> None:
        """Roll back. On SQLite's writer this ends the unit of work, like leaving the block."""
        self._state.locked_sessions = {}
        if self._writer is not None:
            self._end_turn()
            return
        if self._kept is not None:
            await self._kept.end(self._state.connection, commit=False)
        else:
            await self._state.connection.rollback()

    def _end_turn(self) -> None:
        assert self._writer is not None
        if not self._state.finished:
            self._state.finished = True
            self._writer.release()


def _raise_as_database_failure(error: Exception) -> NoReturn:
    """Raise ``error``, as ``DatabaseUnavailable`` when the database failed
    (``db.database_failure``): a client gets a retryable domain error, never the driver's."""
    failure = database_failure(error)
    if failure is None:
        raise error
    raise failure from error


def _autocommit(engine: AsyncEngine) -> bool:
    """Whether each statement on ``engine`` commits by itself (``db.read_only`` on PostgreSQL)."""
    return engine.get_execution_options().get("isolation_level") == "AUTOCOMMIT"


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
        #: Connections kept for units of work (``kept_connections``): on SQLite for reads,
        #: unless the database has only one connection (in memory: the writer's), which reads
        #: share through the engine; on PostgreSQL for writes, and for reads and autocommit
        #: units of work (``read_only``). Together they keep at most one and a half times the
        #: pool's size open, so its overflow still serves everyone else (``/healthz``, …).
        self._readers: KeptConnections | None = None
        self._writers: KeptConnections | None = None
        #: Whether the SQLite file's path still names the file the store opened (None for
        #: PostgreSQL and in-memory SQLite): checked before every COMMIT (``SQLiteWriter``),
        #: now and then before reads (``SQLiteReaders``) and by ``health``.
        self._file_watch = sqlite_file_watch(engine)
        if engine.dialect.name == "postgresql":
            size = engine.pool.size() if isinstance(engine.pool, QueuePool) else 2
            self._writers = PostgresConnections(engine, size)
            self._readers = PostgresConnections(self._reader, max(1, size // 2))
        elif not isinstance(engine.pool, StaticPool):
            self._readers = SQLiteReaders(self._reader, self._file_watch)
        #: Until when no run lease can have expired, as last found by ``runs._lease_expired``.
        self.no_lease_expires_before: datetime | None = None
        #: The key that signs conversation credentials, once ``credentials.signing_key``
        #: has loaded it (from ``CCWEB_CREDENTIAL_SECRET`` or the database).
        self.credential_key: bytes | None = None
        #: Held while this process loads or makes that key: two requests of one process that
        #: both find none must not both make one (on SQLite the first one's row is still
        #: uncommitted in the shared write transaction when the second looks, so the second
        #: would neither insert its own nor read the first's).
        self.credential_key_lock = asyncio.Lock()

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

    def uow(self, *, autocommit: bool = False, refuses_first: bool = False) -> UnitOfWork:
        """A unit of work that may write (SQLite: ``BEGIN IMMEDIATE``).

        ``autocommit`` is for a unit of work whose statements need not commit together: on
        PostgreSQL each then commits by itself, which saves the ``BEGIN`` and ``COMMIT`` round
        trips to the server; SQLite's writes commit together as always.

        ``refuses_first`` is the promise of a unit of work that raises only before its first
        write: on SQLite it then shares a group commit's transaction without a savepoint of
        its own (``sqlite_writer.SQLiteWriter``); an autocommit one needs none either.

        Never open one inside another: on SQLite the inner one would wait for the outer one.
        """
        if autocommit and self._writer is None:  # PostgreSQL, whose reads are autocommit
            return UnitOfWork(self._reader, kept=self._readers)
        savepoint = not (autocommit or refuses_first)
        return UnitOfWork(self.engine, self._writer, self._writers, savepoint=savepoint)

    def read_uow(self) -> UnitOfWork:
        """A unit of work that only reads (SQLite: a deferred transaction, no write lock)."""
        return UnitOfWork(self._reader, kept=self._readers)

    async def health(self) -> str | None:
        """The schema revision of the database, read to show that it answers (``/healthz``).

        Raises ``DatabaseFileMissing`` when the SQLite file was removed or replaced while the
        store ran, and ``DatabaseUnavailable`` when the database cannot answer.
        """
        if self._file_watch is not None:
            self._file_watch.check()
        try:
            async with self.engine.connect() as connection:
                return await current_revision(connection)
        except Exception as error:
            _raise_as_database_failure(error)

    async def close(self) -> None:
        """Give back the connections this store writes and reads with and stop its checkpoint
        thread (SQLite); the engine stays open.

        For a store that shares another's engine; ``dispose`` closes both.
        """
        if self._writer is not None:
            await self._writer.close()
        for kept in (self._writers, self._readers):
            if kept is not None:
                await kept.close()

    async def dispose(self) -> None:
        await self.close()
        await self.engine.dispose()
