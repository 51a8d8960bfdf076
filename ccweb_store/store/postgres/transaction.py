"""A unit of work's transaction on an asyncpg connection (``driver`` hands out the
connection): each statement run on asyncpg's public ``Connection``, the transaction begun with
the first statement of a unit of work that writes, asyncpg's errors raised as SQLAlchemy's.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, Protocol, TypeVar

import asyncpg
import sqlalchemy as sa
from sqlalchemy import exc
from sqlalchemy.ext.asyncio import AsyncConnection

from ccweb_store.store.bulk import id_counter_column, is_json
from ccweb_store.store.failures import unsent_on_dead_connection
from ccweb_store.store.postgres import bulk
from ccweb_store.store.transaction import CompiledStatements, Transaction

_T = TypeVar("_T")

log = logging.getLogger(__name__)


#: SQLAlchemy's exception for an asyncpg error, by the SQLSTATE class (its first two
#: characters), as SQLAlchemy's own asyncpg adapter sorts them.
_ERROR_CLASSES: dict[str, type[exc.DBAPIError]] = {
    "22": exc.DataError,
    "23": exc.IntegrityError,
    "42": exc.ProgrammingError,
    "08": exc.OperationalError,
    "53": exc.OperationalError,
    "57": exc.OperationalError,
    "40": exc.OperationalError,
}


def _disconnected(error: BaseException, driver: asyncpg.Connection) -> bool:
    return (
        driver.is_closed()
        or isinstance(error, asyncpg.exceptions.ConnectionDoesNotExistError | OSError)
        or unsent_on_dead_connection(error)
    )


class PostgresConnections(Protocol):
    """What a transaction needs of its database (``driver.PostgresDatabase``): a connection,
    given back or dropped when the transaction ends, and the name its event notices carry."""

    statements: CompiledStatements
    #: Names this process in the event notices it sends (``repositories.events``).
    origin: str

    async def connect(self, *, fresh: bool = False) -> tuple[AsyncConnection, asyncpg.Connection]:
        """A connection for a unit of work (``fresh``: never one kept idle)."""

    async def release(self, connection: AsyncConnection, driver: asyncpg.Connection) -> None:
        """Keep the connection for the next unit of work, or give it back to the pool."""

    async def drop(self, connection: AsyncConnection) -> None:
        """Close a connection for good."""


class PostgresTransaction(Transaction):
    """One unit of work on an asyncpg connection."""

    one_statement_batches = True
    locks_rows = True
    json_as_text = "{}::text"
    json_from_text = "CAST({} AS jsonb)"
    json_numbers_are_numeric = True
    orders_events = True

    def __init__(
        self,
        database: PostgresConnections,
        connection: AsyncConnection,
        driver: asyncpg.Connection,
        *,
        atomic: bool,
    ) -> None:
        super().__init__(database.statements)
        self.database = database
        self.event_origin = database.origin
        self.connection = connection
        self.driver = driver
        self.atomic = atomic
        self.events_in_statements = not atomic
        self._transaction: Any = None
        self._first_done = False
        self._released = False

    async def fetch(
        self, sql: str, values: Sequence[Any], returns_rows: bool | None
    ) -> tuple[list[Any], int]:
        if self._first_done:
            return await self._run(sql, values, returns_rows)
        return await self._first(lambda: self._run(sql, values, returns_rows), sql)

    async def fetch_many(self, sql: str, values: list[Sequence[Any]]) -> None:
        if self._first_done:
            await self._run_many(sql, values)
        else:
            await self._first(lambda: self._run_many(sql, values), sql)

    async def _first(self, run: Callable[[], Awaitable[_T]], sql: str) -> _T:
        """Run the statement; the unit of work's first one runs once more on a fresh
        connection if its connection turns out to be dead, when nothing of it can have been
        written: the statement never left, or ran in the unit of work's transaction (lost with
        the connection), or only reads. A write of an autocommit unit of work may have
        committed before the connection died, so its error reaches the caller."""
        self._first_done = True
        try:
            return await run()
        except exc.DBAPIError as error:
            reads = sql.lstrip().upper().startswith("SELECT")
            if not error.connection_invalidated or not (
                unsent_on_dead_connection(error) or self.atomic or reads
            ):
                raise
        await self.database.drop(self.connection)
        self._transaction = None
        self.connection, self.driver = await self.database.connect(fresh=True)
        return await run()

    async def _run(
        self, sql: str, values: Sequence[Any], returns_rows: bool | None
    ) -> tuple[list[Any], int]:
        rows: list[Any] = []
        try:
            if self.atomic and self._transaction is None:
                await self._begin()
            if returns_rows:
                rows = await self.driver.fetch(sql, *values)
                return rows, len(rows)
            if returns_rows is None:  # SQL text: its rows, and its status for the count
                prepared = await self.driver.prepare(sql)
                rows = await prepared.fetch(*values)
                status = prepared.get_statusmsg() or ""
            else:
                status = await self.driver.execute(sql, *values)
        except Exception as error:
            raise await self._error(error, sql, values) from error
        count = status.rsplit(" ", 1)[-1]
        return rows, int(count) if count.isdigit() else len(rows)

    async def _run_many(self, sql: str, values: list[Sequence[Any]]) -> None:
        try:
            if self.atomic and self._transaction is None:
                await self._begin()
            await self.driver.executemany(sql, values)
        except Exception as error:
            raise await self._error(error, sql, values) from error

    async def copy_rows(self, table: sa.Table, rows: Sequence[Sequence[Any]]) -> None:
        """``COPY`` the rows in (asyncpg's ``copy_records_to_table``): PostgreSQL's own bulk
        load, far fewer round trips and less parsing than INSERTs. JSON text goes to ``jsonb``
        as it is; every other value passes its type's bind processor."""
        dialect = self.statements.dialect
        converters = [
            None if is_json(column) else column.type.dialect_impl(dialect).bind_processor(dialect)
            for column in table.columns
        ]
        converting = [(index, convert) for index, convert in enumerate(converters) if convert]
        records: Sequence[Sequence[Any]] = rows
        if converting:
            records = []
            for row in rows:
                values = list(row)
                for index, convert in converting:
                    if values[index] is not None:
                        values[index] = convert(values[index])
                records.append(values)
        columns = [column.name for column in table.columns]

        async def copy() -> None:
            try:
                if self.atomic and self._transaction is None:
                    await self._begin()
                await self.driver.copy_records_to_table(
                    table.name, records=records, columns=columns
                )
            except Exception as error:
                raise await self._error(error, f"COPY {table.name}", ()) from error

        if self._first_done:
            await copy()
        else:
            await self._first(copy, "COPY")

    async def keep_issued_ids(self, table: sa.Table, highest: int) -> None:
        """The sequence of ``table``'s serial or identity column set past ``highest``."""
        column = id_counter_column(table)
        if highest > 0 and column is not None:
            await self.execute(
                bulk.SET_SEQUENCE, {"table": table.name, "column": column.name, "value": highest}
            )

    async def _begin(self) -> None:
        transaction = self.driver.transaction()
        await transaction.start()
        self._transaction = transaction

    async def _error(self, error: Exception, sql: str, values: Any) -> exc.DBAPIError:
        """An asyncpg error as the SQLAlchemy exception SQLAlchemy's execution raises for it;
        a connection the server closed is invalidated, so it is never used again."""
        disconnect = _disconnected(error, self.driver)
        sqlstate = getattr(error, "sqlstate", None) or ""
        error_class = _ERROR_CLASSES.get(sqlstate[:2], exc.DBAPIError)
        if disconnect:
            error_class = exc.OperationalError
        wrapped = error_class(sql, values, error, connection_invalidated=disconnect)
        if disconnect:
            self._transaction = None
            await self.connection.invalidate()
        return wrapped

    async def commit(self) -> None:
        self.ended = True
        transaction, self._transaction = self._transaction, None
        try:
            if transaction is not None:
                await transaction.commit()
        except Exception as error:
            wrapped = await self._error(error, "COMMIT", ())
            await self._release()
            raise wrapped from error
        await self._run_after_commit()
        await self._release()

    async def _run_after_commit(self) -> None:
        """The statements queued to follow the commit (``Transaction.after_commit``), each
        committing by itself. The commit has succeeded whatever they do, so a failure is
        logged, not raised: what they would have done is left for a later one to do."""
        then, self.then = self.then, []
        for stmt, params in then:
            compiled = self.statements.get(stmt, tuple(params))
            sql, values = compiled.statement(params)
            try:
                await self.driver.fetch(sql, *values)
            except Exception as error:
                await self._error(error, sql, values)
                log.warning("a statement after a commit failed, left for later: %s", error)
                return

    async def rollback(self) -> None:
        self.ended = True
        await self._release()

    async def close(self) -> None:
        self.ended = True
        await self._release()

    async def _release(self) -> None:
        """Roll back what is still open and give the connection back for the next unit of
        work (closed for good if it cannot be rolled back)."""
        if self._released:
            return
        self._released = True
        transaction, self._transaction = self._transaction, None
        try:
            if transaction is not None and not self.connection.invalidated:
                await transaction.rollback()
        except Exception:
            await self.database.drop(self.connection)
            return
        await self.database.release(self.connection, self.driver)
