"""SQLite through aiosqlite: the engine's connection setup, this process's one writer, and its
readers; a unit of work's transaction on the aiosqlite connection is ``transaction``'s.

Every connection gets the pragmas the store relies on (WAL, ``synchronous = NORMAL``, foreign
keys, the busy timeout) and leaves transactions to us (``isolation_level = None``, as
SQLAlchemy's documentation shows for SQLite). SQLite lets one transaction write at a time:
this process's writers take turns on one connection, holding ``SQLiteDatabase.lock`` from
``BEGIN IMMEDIATE`` (which takes SQLite's write lock, waiting up to the busy timeout for
another process on aiosqlite's thread, not on the event loop) to ``COMMIT``. Reads run on
connections of their own, each statement on its own snapshot, as PostgreSQL's reads do.
Statements run on aiosqlite's public connection (``execute_fetchall``, ``execute``,
``executemany``), reached through ``AsyncConnection.get_raw_connection``.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import sqlite3
import weakref
from collections.abc import Callable
from contextlib import AbstractAsyncContextManager, suppress
from pathlib import Path
from typing import Any

import aiosqlite
import orjson
import sqlalchemy as sa
from sqlalchemy import event
from sqlalchemy.engine import Connection, Engine, make_url
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine, create_async_engine
from sqlalchemy.pool import ConnectionPoolEntry, StaticPool

from ccweb_store.domain import json_values
from ccweb_store.store.sqlite import bulk, commit_watch, one_statement
from ccweb_store.store.sqlite.checkpoints import WAL_AUTOCHECKPOINT_PAGES, WalCheckpointer
from ccweb_store.store.sqlite.file_watch import SQLiteFileWatch
from ccweb_store.store.sqlite.transaction import SQLiteTransaction, driver_error
from ccweb_store.store.statements import Batch, Compiled
from ccweb_store.store.transaction import CompiledStatements

log = logging.getLogger(__name__)

#: Idle read connections kept open between units of work.
KEEP_READERS = 4
#: A table of the writer connection's own, empty, that a statement which writes nothing
#: names to see whether sqlite3 begins a transaction before it (``_prepare_writer``).
_PROBE = "temp.ccweb_begins_itself"


def dumps_json(value: Any) -> str:
    """The text of a JSON column's value on SQLite: orjson's (compact, UTF-8), or
    ``json.dumps``'s where orjson would refuse it or write it otherwise (an integer beyond 64
    bits, a key that is not a string, text that is not valid Unicode; a number that is not
    finite, which orjson writes as ``null``). Either reads back as the same value."""
    try:
        text = orjson.dumps(value)
    except (orjson.JSONEncodeError, TypeError):
        return json.dumps(value)
    return json.dumps(value) if b"null" in text else text.decode()


def create_sqlite_engine(url: str, busy_timeout_ms: int, **kwargs: Any) -> AsyncEngine:
    """An engine on ``sqlite+aiosqlite`` with the connection setup the store relies on."""
    kwargs.setdefault("json_serializer", dumps_json)
    kwargs.setdefault("json_deserializer", json_values.loads_stored)
    engine = create_async_engine(make_url(url).set(drivername="sqlite+aiosqlite"), **kwargs)
    path = sqlite_file(engine)
    watch = SQLiteFileWatch(path) if path is not None else None

    if watch is not None:

        @event.listens_for(engine.sync_engine, "do_connect")
        def _refuse_another_file(*_args: Any) -> None:
            # Before SQLite opens the path: it would create an empty file where the store's
            # was deleted, or read another file moved there with the store's WAL.
            watch.check()
            create_private_file(watch.path)
            # A file SQLite cannot open is refused here, with SQLite's own error, before a
            # driver thread starts: aiosqlite leaves the thread of a failed connect to stop
            # on its own, answering an event loop that may be gone by then.
            sqlite3.connect(watch.path).close()

    @event.listens_for(engine.sync_engine, "connect")
    def _on_connect(dbapi_connection: Any, _record: ConnectionPoolEntry) -> None:
        if watch is not None:
            try:
                watch.opened()
            except BaseException:
                dbapi_connection.close()
                raise
        # Transactions begin as the store begins them (BEGIN IMMEDIATE for writes).
        dbapi_connection.isolation_level = None
        cursor = dbapi_connection.cursor()
        try:
            cursor.execute("PRAGMA foreign_keys = ON")
            cursor.execute("PRAGMA journal_mode = WAL")
            cursor.execute(f"PRAGMA busy_timeout = {int(busy_timeout_ms)}")
            cursor.execute("PRAGMA synchronous = NORMAL")
            cursor.execute("PRAGMA temp_store = MEMORY")
            # The store's checkpoint thread (``checkpoints``) copies most pages before SQLite's
            # own automatic checkpoint, which bounds the WAL should that thread fall behind.
            cursor.execute(f"PRAGMA wal_autocheckpoint = {WAL_AUTOCHECKPOINT_PAGES}")
        finally:
            cursor.close()

    @event.listens_for(engine.sync_engine, "begin")
    def _begin(connection: Connection) -> None:
        # A transaction SQLAlchemy runs itself (migrations, ``engine.begin()``) begins here,
        # as the driver no longer begins one by itself.
        connection.exec_driver_sql("BEGIN")

    _file_watches[engine.sync_engine] = watch
    return engine


def create_private_file(path: str) -> None:
    """Create the database file ``0600`` when it is not there yet, before SQLite would create
    it with the umask's permissions (often readable by every local user). SQLite gives the
    ``-wal`` and ``-shm`` files it makes beside it the database file's permissions."""
    try:
        descriptor = os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o600)
    except OSError:
        return  # there already, or not creatable: SQLite opens it or says why
    os.close(descriptor)


#: The watch on each engine's file, made with the engine (its connect events use it).
_file_watches: weakref.WeakKeyDictionary[Engine, SQLiteFileWatch | None] = (
    weakref.WeakKeyDictionary()
)


def sqlite_file(engine: AsyncEngine) -> str | None:
    """The path of the SQLite file behind ``engine``; None for an in-memory database or a
    ``file:`` URI (``?uri=true``), which is passed to SQLite as it is."""
    database = engine.url.database
    if not database or database == ":memory:" or engine.url.query.get("uri"):
        return None
    args, kwargs = engine.dialect.create_connect_args(engine.url)
    if kwargs.get("uri"):
        return None
    path: str = args[0]
    return path


def sqlite_url_file(url: str) -> Path | None:
    """The file a ``sqlite`` URL names, resolved against the working directory; None for an
    in-memory database or a ``file:`` URI."""
    parsed = make_url(url)
    database = parsed.database
    if not database or database == ":memory:" or parsed.query.get("uri"):
        return None
    return Path(database).absolute()


def file_watch(engine: AsyncEngine) -> SQLiteFileWatch | None:
    """The watch on the SQLite file behind ``engine`` (None: in memory, or a URI)."""
    return _file_watches.get(engine.sync_engine)


async def _connect(engine: AsyncEngine) -> tuple[AsyncConnection, aiosqlite.Connection]:
    """A new connection and the aiosqlite connection under it. A unit of work cancelled while
    it connects (a background job at shutdown) waits for the connection's thread to answer and
    closes it: left behind, the thread would answer an event loop that is gone."""
    opening = asyncio.ensure_future(_open(engine))
    try:
        return await asyncio.shield(opening)
    except asyncio.CancelledError:
        with suppress(Exception):
            connection, _ = await opening
            await connection.close()
        raise


async def _open(engine: AsyncEngine) -> tuple[AsyncConnection, aiosqlite.Connection]:
    connection = await engine.connect()
    try:
        raw = await connection.get_raw_connection()
    except BaseException:
        await connection.close()
        raise
    driver: aiosqlite.Connection = raw.driver_connection  # type: ignore[assignment]
    return connection, driver


class SQLiteDatabase:
    """A SQLite file (or in-memory database) and the connections this process uses on it."""

    def __init__(self, engine: AsyncEngine) -> None:
        self.engine = engine
        self.statements = CompiledStatements(engine.dialect)
        #: Held by the unit of work that writes (from BEGIN IMMEDIATE to its end).
        self.lock = asyncio.Lock()
        #: An in-memory database is one connection: everything takes turns on it.
        self.single = isinstance(engine.pool, StaticPool)
        self._writer: tuple[AsyncConnection, aiosqlite.Connection] | None = None
        #: Whether sqlite3 begins the writer's transaction itself before a statement that
        #: writes (``isolation_level = "IMMEDIATE"``), checked when the writer connects.
        self.begins_itself = False
        #: Whether the writer connection's claims write their own ``run.started`` event
        #: (``one_statement.run_started_trigger``).
        self.claim_event_by_trigger = False
        #: The batches the writer connection runs as one statement each (``one_statement``).
        self.batches: dict[Batch, one_statement.InstalledBatch] = {}
        #: The ``events`` INSERT, whose conversions ``one_statement.events_json`` applies.
        self.event_insert: Compiled = one_statement.event_insert(engine.dialect)
        self._readers: list[tuple[AsyncConnection, aiosqlite.Connection]] = []
        self._closed = False
        #: Whether the path still names the file the store opened: checked before every
        #: COMMIT, and at most once a second before reads.
        self.file_watch = file_watch(engine)
        #: Checkpoints the WAL on a thread of its own (None for an in-memory database): the
        #: file the watch names, as there is a watch for every file on disk.
        watch = self.file_watch
        self.checkpointer = WalCheckpointer(watch.path, file_watch=watch) if watch else None

    async def begin(self, *, write: bool, autocommit: bool = False) -> SQLiteTransaction:
        """A unit of work's transaction: writing (the writer's turn, ``BEGIN IMMEDIATE``) or
        reading (a reader connection, each statement on its own snapshot). A writing one
        with ``autocommit`` commits each statement by itself where the writer's claims write
        their own events (``claim_event_by_trigger``), else it is a transaction too."""
        if write or self.single:
            await self.lock.acquire()
            try:
                connection, driver = await self._writer_connection()
            except sqlite3.Error as error:
                self.lock.release()
                raise driver_error(error, "BEGIN IMMEDIATE", ()) from error
            except BaseException:
                self.lock.release()
                raise
            alone = write and autocommit and self.claim_event_by_trigger
            return SQLiteTransaction(
                self, connection, driver, writer=True, begin=write and not alone, autocommit=alone
            )
        if self.file_watch is not None:
            self.file_watch.check_for_read()
        if self._readers:
            connection, driver = self._readers.pop()
        else:
            connection, driver = await _connect(self.engine)
        return SQLiteTransaction(self, connection, driver, writer=False)

    async def _writer_connection(self) -> tuple[AsyncConnection, aiosqlite.Connection]:
        if self._writer is None or self._writer[0].invalidated:
            self._writer = None
            connection, driver = await _connect(self.engine)
            try:
                await self._prepare_writer(driver)
            except BaseException:
                await connection.invalidate()
                await connection.close()
                raise
            self._writer = connection, driver
        return self._writer

    async def _prepare_writer(self, driver: aiosqlite.Connection) -> None:
        """Make the writer connection's batch views and claim trigger (``one_statement``), and
        let sqlite3 begin its transactions: ``BEGIN IMMEDIATE`` then comes in the same call as
        a unit of work's first statement, when that statement writes (``SQLiteTransaction``).
        Whether sqlite3 does is checked here, with a statement that changes nothing; where it
        does not, every unit of work that writes begins with a ``BEGIN IMMEDIATE`` of its own.
        The connection is made for this alone: ``close`` does not give it back to the pool."""
        script, installed = one_statement.install_script(self.engine.dialect)
        try:
            await driver.executescript(script)
            self.batches, self.claim_event_by_trigger = installed, True
        except sqlite3.Error as error:  # an older SQLite (no RETURNING or JSON): step by step
            log.warning("SQLite runs each batch and claim step by step: %s", error)
            self.batches, self.claim_event_by_trigger = {}, False
        await driver.execute(f"CREATE TEMP TABLE IF NOT EXISTS {_PROBE} (unused)")
        # DEFERRED for the check: a write to the connection's own table takes no lock on the
        # file, so the check never waits for another process's write.
        driver.isolation_level = "DEFERRED"
        await driver.execute(f"DELETE FROM {_PROBE}")
        self.begins_itself = driver.in_transaction
        if driver.in_transaction:
            await driver.execute("ROLLBACK")
        driver.isolation_level = "IMMEDIATE"

    async def end_write(self, connection: AsyncConnection, *, failed: bool) -> None:
        """The writer's turn ends; a connection whose transaction could not end is dropped."""
        try:
            if failed and self._writer is not None and self._writer[0] is connection:
                self._writer = None
                await connection.invalidate()
                await connection.close()
        finally:
            self.lock.release()

    async def keep_reader(
        self, connection: AsyncConnection, driver: aiosqlite.Connection, *, failed: bool
    ) -> None:
        if failed or self._closed or len(self._readers) >= KEEP_READERS:
            if failed:
                await connection.invalidate()
            await connection.close()
        else:
            self._readers.append((connection, driver))

    def snapshot(self) -> AbstractAsyncContextManager[AsyncConnection]:
        """A connection whose reads all see one snapshot (``bulk.snapshot``)."""
        return bulk.snapshot(self.engine)

    def byte_ordered(self, column: sa.ColumnElement[Any]) -> sa.ColumnElement[Any]:
        """``column`` as SQLite orders it: text by its bytes already."""
        return column

    def portable_json_text(self, text: str) -> str:
        """SQLite's JSON text reads the same with any JSON reader already."""
        return text

    async def issued_ids(self, connection: AsyncConnection, table: sa.Table) -> int:
        return await bulk.issued_ids(connection, table)

    async def backup(self, target: Path, tables: list[sa.Table]) -> dict[str, Any]:
        """Back the file up to ``target`` while it is in use, then open the copy and check
        it (``bulk.backup_file``, ``bulk.check_backup``)."""
        if self.file_watch is None:
            raise ValueError("an in-memory database has no file to back up")
        source = self.file_watch.path
        await asyncio.to_thread(bulk.backup_file, source, target)
        return await asyncio.to_thread(bulk.check_backup, target, tables)

    def watch_commits(self, poke: Callable[[], None]) -> AbstractAsyncContextManager[None]:
        """Call ``poke`` when another process commits to the file, while the block runs."""
        return commit_watch.watching(None if self.single else self._data_version, poke)

    async def _data_version(self, wait: bool) -> int | None:
        """The writer connection's ``PRAGMA data_version``: it changes when another
        connection (another process: this one writes on this connection only) committed.
        Unless ``wait``, None while this process writes: the question waits for a later tick
        rather than delay a write."""
        if not wait and self.lock.locked():
            return None
        async with self.lock:
            _, driver = await self._writer_connection()
            rows = await driver.execute_fetchall("PRAGMA data_version")
        return int(next(iter(rows))[0])

    async def vacuum_interval(self, configured: float | None) -> float:
        """SQLite needs no vacuum pass of the service's (``store.postgres.vacuum``)."""
        return 0.0

    async def keep_vacuumed(self, interval: float) -> None:
        return None

    async def refresh_statistics(self) -> None:
        """``PRAGMA optimize`` after a bulk load: SQLite analyzes the tables whose statistics
        the planner would miss (every table, from SQLite 3.46 on: the ``0x10000`` bit)."""
        async with self.lock:
            _, driver = await self._writer_connection()
            await driver.execute("PRAGMA optimize=0x10002")

    def committed(self) -> None:
        if self.checkpointer is not None:
            self.checkpointer.note_commit()

    async def close(self) -> None:
        """Close the connections and stop the checkpoint thread; the engine stays open."""
        self._closed = True
        async with self.lock:
            if self.checkpointer is not None:
                self.checkpointer.stop()
            if self._writer is not None:
                connection, driver = self._writer
                self._writer = None
                if self.single:  # the database itself: kept, as it came
                    with suppress(Exception):
                        driver.isolation_level = None
                else:  # its views, trigger and isolation level are this store's: not pooled
                    await connection.invalidate()
                await connection.close()
        readers, self._readers = self._readers, []
        for connection, _ in readers:
            await connection.close()
