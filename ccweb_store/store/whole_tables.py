"""Whole tables read for the data tools (``mobility``: ``copy``, its checks, ``export-json``):
the schema's tables, a table's row count and last key, and a snapshot's rows in batches.

The tools hold a table as the opaque ``Table`` this module hands out and pass it back; the
rows they get are plain tuples (every column in table order, as ``bulk.copy_select`` reads
them) or, for the export, dictionaries by column name. Reading in a table's primary-key order
sorts text keys by their UTF-8 bytes on either engine (``Store.byte_ordered``).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from typing import Any

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncConnection

from ccweb_store.store.bulk import copy_select, is_json
from ccweb_store.store.models import Base
from ccweb_store.store.repositories.whole_tables import count_rows
from ccweb_store.store.uow import Store

#: A table of the schema, as the data tools hold it.
Table = sa.Table

SESSIONS = Base.metadata.tables["sessions"]
MESSAGES = Base.metadata.tables["messages"]
REPLIES = Base.metadata.tables["reply_requests"]


def schema_tables() -> list[Table]:
    """Every table of the schema, each after the tables its foreign keys name."""
    return list(Base.metadata.sorted_tables)


def json_positions(table: Table) -> list[int]:
    """The positions of ``table``'s JSON columns among its columns (read as their text)."""
    return [index for index, column in enumerate(table.columns) if is_json(column)]


def key_positions(table: Table) -> list[int]:
    """The positions of ``table``'s primary-key columns among its columns."""
    names = list(table.columns.keys())
    return [names.index(column.key) for column in table.primary_key.columns]


def _ordered(store: Store, table: Table) -> list[sa.ColumnElement[Any]]:
    return [store.byte_ordered(column) for column in table.primary_key.columns]


async def row_counts(store: Store, tables: Sequence[Table]) -> dict[str, int]:
    """How many rows each of ``tables`` holds, by table name."""
    async with store.read_uow() as uow:
        return await uow.whole_tables.row_counts(tables)


async def last_key(store: Store, table: Table) -> tuple[Any, ...] | None:
    """The greatest primary key ``table`` holds, in the copy's order (None: no rows)."""
    async with store.read_uow() as uow:
        return await uow.whole_tables.last_key(table, _ordered(store, table))


class Snapshot:
    """Reads of one consistent snapshot of a store's database (``Store.snapshot``)."""

    def __init__(self, store: Store, connection: AsyncConnection) -> None:
        self._store = store
        self._connection = connection

    async def row_count(self, table: Table) -> int:
        """How many rows ``table`` holds."""
        return int((await self._connection.execute(count_rows(table))).scalar_one())

    async def issued_ids(self, table: Table) -> int:
        """The highest id the database handed out for ``table`` (``Store.issued_ids``)."""
        return await self._store.issued_ids(self._connection, table)

    async def table_rows(
        self, table: Table, batch_rows: int, *, key_order: bool = False
    ) -> AsyncIterator[list[tuple[Any, ...]]]:
        """Every row of ``table`` as ``bulk.copy_select`` reads it, ``batch_rows`` at a time;
        ``key_order``: in primary-key order."""
        stmt = sa.select(*copy_select(table))
        if key_order:
            stmt = stmt.order_by(*_ordered(self._store, table))
        result = await self._connection.stream(stmt.execution_options(yield_per=batch_rows))
        async for partition in result.partitions(batch_rows):
            yield [tuple(row) for row in partition]

    async def sessions(self, conversation: str | None = None) -> list[dict[str, Any]]:
        """The ``sessions`` rows by id (only ``conversation``'s, when given), by column name."""
        stmt = sa.select(SESSIONS).order_by(SESSIONS.c.id)
        if conversation is not None:
            stmt = stmt.where(SESSIONS.c.id == conversation)
        return [dict(row) for row in (await self._connection.execute(stmt)).mappings()]

    async def replies(self, conversation: str | None = None) -> list[dict[str, Any]]:
        """The ``reply_requests`` rows, oldest first (only those ``conversation`` sent or was
        asked, when given), by column name."""
        stmt = sa.select(REPLIES).order_by(REPLIES.c.created_at, REPLIES.c.request_id)
        if conversation is not None:
            stmt = stmt.where(
                sa.or_(
                    REPLIES.c.source_conversation_id == conversation,
                    REPLIES.c.target_conversation_id == conversation,
                )
            )
        return [dict(row) for row in (await self._connection.execute(stmt)).mappings()]

    async def messages(
        self, session_id: str, batch_rows: int
    ) -> AsyncIterator[list[dict[str, Any]]]:
        """The ``messages`` rows of a session by ``seq``, by column name, ``batch_rows`` at a
        time."""
        stmt = sa.select(MESSAGES).where(MESSAGES.c.session_id == session_id)
        stmt = stmt.order_by(MESSAGES.c.seq).execution_options(yield_per=batch_rows)
        result = await self._connection.stream(stmt)
        async for partition in result.mappings().partitions(batch_rows):
            yield [dict(row) for row in partition]


@asynccontextmanager
async def snapshot(store: Store) -> AsyncIterator[Snapshot]:
    """The reads of one snapshot of ``store``'s database, for as long as the block runs."""
    async with store.snapshot() as connection:
        yield Snapshot(store, connection)
