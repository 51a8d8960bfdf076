"""A unit of work's transaction on an aiosqlite connection (``driver`` hands out the
writer's or a reader's): its statements on aiosqlite's public connection, many rows inserted
a statement of many at a time, a batch as one statement (``one_statement``), ``sqlite3``'s errors
raised as SQLAlchemy's.

A unit of work that writes begins its transaction with its first statement, in the same call
to the driver: sqlite3 issues ``BEGIN IMMEDIATE`` itself before a statement that writes (the
writer connection's ``isolation_level``), and the unit of work issues it before any other.
"""

from __future__ import annotations

import re
import sqlite3
from collections.abc import Sequence
from itertools import chain
from typing import Any, Protocol

import aiosqlite
import sqlalchemy as sa
from sqlalchemy.exc import DBAPIError
from sqlalchemy.ext.asyncio import AsyncConnection

from ccweb_store.domain.events import Event
from ccweb_store.store.bulk import id_counter_column
from ccweb_store.store.sqlite import bulk
from ccweb_store.store.sqlite.file_watch import SQLiteFileWatch
from ccweb_store.store.sqlite.one_statement import EVENTS_COLUMN, InstalledBatch, events_json
from ccweb_store.store.statements import Batch, Compiled, Rows
from ccweb_store.store.transaction import CompiledStatements, Transaction

#: Rows per statement when many rows are inserted (``SQLiteTransaction.fetch_many``).
ROWS_PER_INSERT = 100
#: The fewest host parameters any SQLite allows in one statement.
MAX_VARIABLES = 999
_ONE_ROW_VALUES = re.compile(r" VALUES (\(\?(?:, \?)*\))$")
#: How a statement that sqlite3 begins a transaction for starts (its own test, on the first
#: word of the SQL).
_WRITES = ("INSERT", "UPDATE", "DELETE", "REPLACE")


def driver_error(error: sqlite3.Error, sql: str, values: Any) -> DBAPIError:
    """A ``sqlite3`` error as the SQLAlchemy exception SQLAlchemy's execution raises for it
    (``IntegrityError``, ``OperationalError``, …)."""
    wrapped = DBAPIError.instance(sql, values, error, sqlite3.Error)
    assert isinstance(wrapped, DBAPIError)
    return wrapped


class SQLiteConnections(Protocol):
    """What a transaction needs of its database (``driver.SQLiteDatabase``): how the writer
    connection runs what it writes, the file to check before a commit, and where its
    connection goes back when it ends."""

    statements: CompiledStatements
    #: Whether sqlite3 begins the writer's transaction itself before a statement that writes.
    begins_itself: bool
    #: Whether the writer's claims write their own ``run.started`` event (a trigger).
    claim_event_by_trigger: bool
    #: The batches the writer runs as one statement each, and the ``events`` INSERT whose
    #: conversions their events take (``one_statement``).
    batches: dict[Batch, InstalledBatch]
    event_insert: Compiled
    file_watch: SQLiteFileWatch | None

    def committed(self) -> None:
        """A write committed (the checkpoint thread counts it)."""

    async def end_write(self, connection: AsyncConnection, *, failed: bool) -> None:
        """The writer's turn ends."""

    async def keep_reader(
        self, connection: AsyncConnection, driver: aiosqlite.Connection, *, failed: bool
    ) -> None:
        """A reader connection comes back."""


class SQLiteTransaction(Transaction):
    """One unit of work on an aiosqlite connection: the writer's (in ``BEGIN IMMEDIATE``
    when it ``begin``s, from its first statement on; else, ``autocommit``, each statement
    committing by itself) or a reader's (autocommit)."""

    def __init__(
        self,
        database: SQLiteConnections,
        connection: AsyncConnection,
        driver: aiosqlite.Connection,
        *,
        writer: bool,
        begin: bool = False,
        autocommit: bool = False,
    ) -> None:
        super().__init__(database.statements)
        self.database = database
        self.connection = connection
        self.driver = driver
        self.writer = writer
        #: Whether the transaction is still to begin, with the first statement.
        self._to_begin = begin
        #: The writer's statements each commit by themselves (``SQLiteDatabase.begin``).
        self.autocommit = autocommit
        self.events_in_statements = autocommit
        self.claim_event_by_trigger = writer and database.claim_event_by_trigger
        if autocommit:
            driver.isolation_level = None  # no transaction open: nothing to commit first
        self._released = False

    async def _begin_before(self, sql: str) -> None:
        """Begin the transaction before ``sql``, its first statement: sqlite3 does, in the
        same call, when ``sql`` writes; else ``BEGIN IMMEDIATE``, a call of its own."""
        self._to_begin = False
        if self.database.begins_itself and sql.lstrip()[:7].upper().startswith(_WRITES):
            return
        try:
            await self.driver.execute("BEGIN IMMEDIATE")
        except sqlite3.Error as error:
            raise driver_error(error, "BEGIN IMMEDIATE", ()) from error

    async def fetch(
        self, sql: str, values: Sequence[Any], returns_rows: bool | None
    ) -> tuple[list[Any], int]:
        if self._to_begin:
            await self._begin_before(sql)
        try:
            if returns_rows:
                rows = list(await self.driver.execute_fetchall(sql, values))
                return rows, len(rows)
            cursor = await self.driver.execute(sql, values)
            if returns_rows is None:
                rows = list(await cursor.fetchall())
                return rows, cursor.rowcount if cursor.rowcount >= 0 else len(rows)
            return [], cursor.rowcount
        except sqlite3.Error as error:
            raise driver_error(error, sql, values) from error

    async def execute_batch(
        self, batch: Batch, values: dict[str, Any], events: Sequence[Event] = ()
    ) -> tuple[Rows, bool]:
        """The writer runs ``batch`` as one INSERT into its view (``one_statement``), which writes
        ``events`` too; a reader, or a batch made after the writer connected, step by step."""
        installed = self.database.batches.get(batch) if self.writer else None
        if installed is None:
            return await super().execute_batch(batch, values, events)
        params = {**values, EVENTS_COLUMN: events_json(events, self.database.event_insert)}
        compiled = self.statements.get(installed.insert, ())
        raw, count = await self.fetch(compiled.sql, compiled.values(params), compiled.returns_rows)
        return Rows(compiled.rows(raw), count, compiled.keys), bool(events)

    async def fetch_many(self, sql: str, values: list[Sequence[Any]]) -> None:
        """``executemany``; a one-row ``INSERT … VALUES (?, …)`` runs as statements of
        ``ROWS_PER_INSERT`` rows each (SQLite steps one statement per row otherwise), the rows
        left over one by one. Either way the rows go in in order, and an error rolls back the
        statement that failed."""
        one_row = _ONE_ROW_VALUES.search(sql)
        per_statement = (
            min(ROWS_PER_INSERT, MAX_VARIABLES // max(1, len(values[0]))) if values else 0
        )
        grouped = len(values) - len(values) % per_statement if per_statement > 1 else 0
        if one_row is not None and grouped:
            group_sql = sql + f", {one_row.group(1)}" * (per_statement - 1)
            groups = [
                list(chain.from_iterable(values[start : start + per_statement]))
                for start in range(0, grouped, per_statement)
            ]
            await self._many(group_sql, groups)
            values = values[grouped:]
        if values:
            await self._many(sql, values)

    async def keep_issued_ids(self, table: sa.Table, highest: int) -> None:
        """An ``AUTOINCREMENT`` table's ``sqlite_sequence`` raised to ``highest``; any other id
        column counts on from its highest row by itself."""
        if highest <= 0 or id_counter_column(table) is None:
            return
        if bulk.counts_in_sqlite_sequence(table):
            values = {"name": table.name, "seq": highest}
            await self.execute(bulk.RAISE_SEQUENCE, values)
            await self.execute(bulk.ADD_SEQUENCE, values)

    async def _many(self, sql: str, values: Sequence[Sequence[Any]]) -> None:
        if self._to_begin:
            await self._begin_before(sql)
        try:
            await self.driver.executemany(sql, values)
        except sqlite3.Error as error:
            raise driver_error(error, sql, values) from error

    async def commit(self) -> None:
        """COMMIT, unless the file's path no longer names the file the store opened: a write
        committed there would be answered as done and gone at the next start."""
        self.ended = True
        if self.database.file_watch is not None and self.writer:
            try:
                self.database.file_watch.check()
            except BaseException:
                await self._release(rollback=True)
                raise
        try:
            if self.driver.in_transaction:
                await self.driver.execute("COMMIT")
        except sqlite3.Error as error:
            await self._release(rollback=True)
            raise driver_error(error, "COMMIT", ()) from error
        self.database.committed()
        await self._release(rollback=False)

    async def rollback(self) -> None:
        self.ended = True
        await self._release(rollback=True)

    async def close(self) -> None:
        self.ended = True
        await self._release(rollback=True)

    async def _release(self, *, rollback: bool) -> None:
        if self._released:
            return
        self._released = True
        failed = False
        try:
            if rollback and self.driver.in_transaction:
                await self.driver.execute("ROLLBACK")
        except Exception:
            failed = True
            raise
        finally:
            if self.autocommit:
                self.driver.isolation_level = "IMMEDIATE"
            if self.writer:
                await self.database.end_write(self.connection, failed=failed)
            else:
                await self.database.keep_reader(self.connection, self.driver, failed=failed)
