"""The unit of work: one transaction per request or tool call, and the store that makes them.

``async with store.uow() as uow: …; await uow.commit()`` — anything not committed is rolled
back when the block exits. The repositories are attributes of the unit of work and run their
statements in its transaction (``transaction.Transaction``); nothing else begins or ends one.
The database's driver is chosen once, when the store opens (``store.sqlite.driver`` or
``store.postgres.driver``); no other module asks which database it is.

A unit of work that fails because the database cannot serve (unreachable, restarting, a
SQLite file that cannot be opened or stays locked: ``failures.database_failure``) raises the
retryable ``errors.DatabaseUnavailable`` instead of the driver's error, so the protocol layers
see a domain error and never a driver's. A SQLite file removed or replaced while the store
runs raises ``errors.DatabaseFileMissing`` (``store.sqlite.file_watch``).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from contextlib import AbstractAsyncContextManager
from datetime import datetime
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING, Any, NoReturn

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from ccweb_store.config import Settings
from ccweb_store.domain.errors import DatabaseUnavailable
from ccweb_store.domain.events import Event
from ccweb_store.store.db import create_engine, current_revision
from ccweb_store.store.event_feed import EventFeed
from ccweb_store.store.failures import database_failure
from ccweb_store.store.repositories.base import UnitState
from ccweb_store.store.repositories.credentials import CredentialRepository, SecretRepository
from ccweb_store.store.repositories.debugging import DebuggingRepository
from ccweb_store.store.repositories.events import EventRepository
from ccweb_store.store.repositories.identity import IdentityRepository
from ccweb_store.store.repositories.json_columns import JsonColumnRepository
from ccweb_store.store.repositories.messages import MessageRepository
from ccweb_store.store.repositories.monitoring import MonitoringRepository
from ccweb_store.store.repositories.replies import ReplyRepository
from ccweb_store.store.repositories.reply_titles import ReplyTitleRepository
from ccweb_store.store.repositories.runs import RunRepository
from ccweb_store.store.repositories.sends import SendRepository
from ccweb_store.store.repositories.sessions import SessionRepository
from ccweb_store.store.repositories.whole_tables import WholeTableRepository
from ccweb_store.store.sqlite.checkpoints import WalCheckpointer
from ccweb_store.store.sqlite.driver import SQLiteDatabase
from ccweb_store.store.statements import Rows
from ccweb_store.store.transaction import Params, Transaction

if TYPE_CHECKING:
    from ccweb_store.store.postgres.driver import PostgresDatabase

    Database = SQLiteDatabase | PostgresDatabase


class UnitOfWork:
    """One transaction and the repositories that work inside it."""

    sessions: SessionRepository
    messages: MessageRepository
    replies: ReplyRepository
    reply_titles: ReplyTitleRepository
    runs: RunRepository
    sends: SendRepository
    credentials: CredentialRepository
    secrets: SecretRepository
    json_columns: JsonColumnRepository
    events: EventRepository
    identity: IdentityRepository
    monitoring: MonitoringRepository
    debugging: DebuggingRepository
    whole_tables: WholeTableRepository

    def __init__(
        self,
        database: Database,
        *,
        write: bool,
        autocommit: bool = False,
        on_events: Callable[[list[Event]], None] | None = None,
    ) -> None:
        self._database = database
        self._write = write
        self._autocommit = autocommit
        self._on_events = on_events
        self._transaction: Transaction | None = None

    async def __aenter__(self) -> UnitOfWork:
        try:
            transaction = await self._database.begin(write=self._write, autocommit=self._autocommit)
        except Exception as error:
            _raise_as_database_failure(error, "begin")
        self._transaction = transaction
        state = self._state = UnitState(transaction)
        self.sessions = SessionRepository(state)
        self.messages = MessageRepository(state)
        self.replies = ReplyRepository(state)
        self.reply_titles = ReplyTitleRepository(state)
        self.runs = RunRepository(state)
        self.sends = SendRepository(state)
        self.credentials = CredentialRepository(state)
        self.secrets = SecretRepository(state)
        self.json_columns = JsonColumnRepository(state)
        self.events = EventRepository(state)
        self.identity = IdentityRepository(state)
        self.monitoring = MonitoringRepository(state)
        self.debugging = DebuggingRepository(state)
        self.whole_tables = WholeTableRepository(state)
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        # Whatever was not committed is rolled back; the objects the repositories returned
        # are plain snapshots and stay readable after the block.
        try:
            await self._current().close()
        except Exception as error:
            _raise_as_database_failure(error, "close")
        if isinstance(exc, Exception) and not isinstance(exc, DatabaseUnavailable):
            failure = database_failure(exc)
            if failure is not None:
                _count_failure("work")
                raise failure from exc

    def _current(self) -> Transaction:
        if self._transaction is None:
            raise RuntimeError("the unit of work has not begun (use `async with`)")
        return self._transaction

    async def _execute(self, stmt: sa.Executable, params: Params = None) -> Rows:
        """Run a statement no repository owns in this unit of work (tests);
        its rows read by position or by column name. Only the store's modules build
        statements: the layers above call repositories."""
        return (await self._current().execute(stmt, params)).named()

    async def copy_rows(self, table: sa.Table, rows: Sequence[Sequence[Any]]) -> None:
        """Insert whole rows of ``table`` as ``store.bulk.copy_select`` reads them, the
        database's fastest way (PostgreSQL: ``COPY``)."""
        await self._current().copy_rows(table, rows)

    async def keep_issued_ids(self, table: sa.Table, highest: int) -> None:
        """Make the database hand out ids of ``table`` above ``highest`` from now on."""
        await self._current().keep_issued_ids(table, highest)

    async def commit(self) -> None:
        """Commit; the unit of work ends, and no statement may follow."""
        transaction = self._current()
        if transaction.ended:
            raise RuntimeError("this unit of work has already ended; open a new one")
        state = self._state
        written = state.events
        if state.written_events:
            written = [*state.written_events, *written]
        await self.events.flush()  # in the transaction, as its last write
        state.locked_sessions = {}  # the transaction's row locks end with it
        await transaction.commit()
        if written and self._on_events is not None:
            self._on_events(written)

    async def rollback(self) -> None:
        """Roll back; the unit of work ends, like leaving the block."""
        self._state.locked_sessions = {}
        self._state.events = []
        self._state.written_events = []
        await self._current().rollback()


def _raise_as_database_failure(error: Exception, during: str) -> NoReturn:
    """Raise ``error``, as ``DatabaseUnavailable`` when the database failed
    (``failures.database_failure``): a client gets a retryable domain error, never the driver's.
    A failure is counted (``ccweb_database_errors_total``) by what was ``during``."""
    failure = database_failure(error)
    if failure is None:
        raise error
    _count_failure(during)
    raise failure from error


def _count_failure(during: str) -> None:
    """One more ``ccweb_database_errors_total`` (the metrics load with the first failure: a
    command that meets none never loads them)."""
    from ccweb_store.metrics import DATABASE_ERRORS

    DATABASE_ERRORS.labels(during).inc()


class Store:
    """The database handle the whole service shares: an engine, its driver, and units of
    work."""

    def __init__(self, engine: AsyncEngine, settings: Settings | None = None) -> None:
        self.engine = engine
        self.settings = settings or Settings()
        #: The database's name ("sqlite", "postgresql"), for what the service reports.
        self.dialect: str = engine.dialect.name
        self._database: Database
        if self.dialect == "sqlite":
            self._database = SQLiteDatabase(engine)
        else:  # loaded when chosen: a command on SQLite never loads asyncpg
            from ccweb_store.store.postgres.driver import PostgresDatabase

            self._database = PostgresDatabase(engine)
        #: Until when no run lease can have expired, as last found by ``runs._lease_expired``.
        self.no_lease_expires_before: datetime | None = None
        #: The key that signs conversation credentials, once ``credentials.signing_key``
        #: has loaded it (from ``CCWEB_CREDENTIAL_SECRET`` or the database).
        self.credential_key: bytes | None = None
        #: Held while this process loads or makes that key: two requests of one process that
        #: both find none must not both make one.
        self.credential_key_lock = asyncio.Lock()
        #: The event outbox as it grows, for this process's subscribers (``event_feed``).
        self.feed = EventFeed(self._read_events_after, self._latest_event_id, self._watch)

    @classmethod
    def from_settings(cls, settings: Settings) -> Store:
        engine = create_engine(
            settings.database_url, busy_timeout_ms=settings.sqlite_busy_timeout_ms
        )
        return cls(engine, settings)

    @property
    def checkpointer(self) -> WalCheckpointer | None:
        """The thread checkpointing this store's SQLite file (``store.sqlite.checkpoints``);
        None on PostgreSQL and in-memory SQLite."""
        database = self._database
        return database.checkpointer if isinstance(database, SQLiteDatabase) else None

    def uow(self, *, autocommit: bool = False) -> UnitOfWork:
        """A unit of work that may write (SQLite: ``BEGIN IMMEDIATE`` on the writer).

        ``autocommit`` is for a unit of work whose statements need not commit together: each
        then commits by itself, which saves the calls of ``BEGIN`` and ``COMMIT``, and a
        change must write its events in its own statement
        (``Transaction.events_in_statements``: a claim). On SQLite it still takes the writer's
        turn; where the writer cannot write a claim's event in the claim's statement, its
        statements commit together as a transaction's do.

        Never open one inside another: on SQLite the inner one would wait for the outer one.
        """
        return UnitOfWork(
            self._database, write=True, autocommit=autocommit, on_events=self.feed.poke
        )

    async def move_stranded_events(self) -> int:
        """Move the events left in the inbox (``EventRepository.move_inbox``): a process
        committed them but died before it moved them, or a copy brought them. How many. The
        writer is taken only when there is something to move."""
        async with self.read_uow() as uow:
            if not await uow.events.inbox_holds_any():
                return 0
        async with self.uow() as uow:
            moved = await uow.events.move_inbox()
            await uow.commit()
        return moved

    def read_uow(self) -> UnitOfWork:
        """A unit of work that only reads, each statement on its own snapshot."""
        return UnitOfWork(self._database, write=False)

    def snapshot(self) -> AbstractAsyncContextManager[AsyncConnection]:
        """A connection that only reads, every read on one snapshot of the database (SQLite: one
        read transaction; PostgreSQL: ``REPEATABLE READ READ ONLY``): a consistent copy of a
        database that is being written to."""
        return self._database.snapshot()

    @property
    def url(self) -> str:
        """The URL of this store's database as its engine connects (its password too: show
        it with ``db.shown_url``)."""
        return self.engine.url.render_as_string(hide_password=False)

    def byte_ordered(self, column: sa.ColumnElement[Any]) -> sa.ColumnElement[Any]:
        """``column`` to sort by so that text sorts by its UTF-8 bytes, on either database."""
        return self._database.byte_ordered(column)

    def portable_json_text(self, text: str) -> str:
        """A JSON column's text as read from this database (``store.bulk.copy_select``),
        written so that the other database reads the values this one answers."""
        return self._database.portable_json_text(text)

    async def issued_ids(self, connection: AsyncConnection, table: sa.Table) -> int:
        """The highest id the database has handed out for ``table`` (0: none, or the table
        has no id column the database counts), read on ``connection``."""
        return await self._database.issued_ids(connection, table)

    async def backup(self, target: Path, tables: list[sa.Table]) -> dict[str, Any]:
        """SQLite: back the file up to ``target`` while it is in use and check the copy
        (``{"revision", "rows"}``). PostgreSQL: ``{"command": [...]}``, the ``pg_dump`` that
        does it."""
        return await self._database.backup(target, tables)

    async def _read_events_after(self, after: int, limit: int) -> list[dict[str, Any]]:
        async with self.read_uow() as uow:
            return await uow.events.after(after, limit)

    async def _latest_event_id(self) -> int:
        async with self.read_uow() as uow:
            return await uow.events.latest_id()

    def _watch(self, poke: Callable[[], None]) -> AbstractAsyncContextManager[None]:
        return self._database.watch_commits(poke)

    async def vacuum_interval(self, configured: float | None) -> float:
        """Seconds between the service's own upkeep passes (``store.postgres.vacuum``): 0 for
        none (SQLite; PostgreSQL whose autovacuum is on, unless ``configured`` says so)."""
        return await self._database.vacuum_interval(configured)

    async def keep_vacuumed(self, interval: float) -> None:
        """Every ``interval`` seconds, vacuum and analyze the tables whose counters call for
        it, until cancelled."""
        await self._database.keep_vacuumed(interval)

    async def refresh_statistics(self) -> None:
        """After a bulk load (``copy``, ``import-json``): ``ANALYZE`` every table on
        PostgreSQL, ``PRAGMA optimize`` on SQLite, so that the planner knows what they hold."""
        await self._database.refresh_statistics()

    async def health(self) -> str | None:
        """The schema revision of the database, read to show that it answers (``/healthz``).

        Raises ``DatabaseFileMissing`` when the SQLite file was removed or replaced while the
        store ran, and ``DatabaseUnavailable`` when the database cannot answer.
        """
        database = self._database
        if isinstance(database, SQLiteDatabase) and database.file_watch is not None:
            database.file_watch.check()
        try:
            async with self.engine.connect() as connection:
                return await current_revision(connection)
        except Exception as error:
            _raise_as_database_failure(error, "health")

    async def close(self) -> None:
        """Give back the connections this store keeps and stop its checkpoint thread
        (SQLite); the engine stays open. For a store that shares another's engine;
        ``dispose`` closes both."""
        await self.feed.close()
        await self._database.close()

    async def dispose(self) -> None:
        await self.close()
        await self.engine.dispose()
