"""The JSON columns of the schema, and their stored text read and rewritten by primary key
(``repair-json``).

A JSON column is read as the text the database holds, so a value is seen exactly as it was
stored, and written back from JSON text; how SQL says either is the driver's
(``Transaction.json_as_text``, ``Transaction.json_from_text``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import sqlalchemy as sa

from ccweb_store.store.models import Base
from ccweb_store.store.repositories.base import Repository


@dataclass(frozen=True)
class JsonColumn:
    """A JSON column and the single-column primary key of its table."""

    table: str
    column: str
    key: str

    @property
    def name(self) -> str:
        return f"{self.table}.{self.column}"


def json_columns() -> list[JsonColumn]:
    """Every JSON column of the schema (``models``) whose table is keyed by a text id, with
    that key. (The event outbox, keyed by a number, holds only payloads the service wrote.)"""
    found: list[JsonColumn] = []
    for table in Base.metadata.sorted_tables:
        keys = list(table.primary_key.columns)
        text_key = len(keys) == 1 and isinstance(keys[0].type, sa.String)
        for column in table.columns:
            if isinstance(column.type, sa.JSON) and text_key:
                found.append(JsonColumn(table.name, column.name, keys[0].name))
    return sorted(found, key=lambda found_column: found_column.name)


class JsonColumnRepository(Repository):
    """Stored JSON text of any JSON column whose table has a one-column primary key."""

    @property
    def numbers_are_numeric(self) -> bool:
        """Whether the database keeps every JSON number as a decimal (PostgreSQL's ``jsonb``),
        so that a float such as ``1e20`` reads back written as an integer."""
        return self.transaction.json_numbers_are_numeric

    async def stored_texts(
        self, table: str, column: str, key: str, *, after: str | None, limit: int
    ) -> list[tuple[Any, Any]]:
        """Up to ``limit`` ``(key, stored text)`` of the rows after ``after``, by key."""
        stored = self.transaction.json_as_text.format(column)
        where = f"{column} IS NOT NULL" + ("" if after is None else f" AND {key} > :after")
        select = sa.text(
            f"SELECT {key}, {stored} FROM {table} WHERE {where} ORDER BY {key} LIMIT :limit"
        ).columns(sa.column("key"), sa.column("stored", sa.Text))
        params: dict[str, Any] = {"limit": limit}
        if after is not None:
            params["after"] = after
        return [(row[0], row[1]) for row in await self._execute(select, params)]

    async def rewrite(
        self, table: str, column: str, key: str, row_key: Any, stored: Any, value_text: str
    ) -> bool:
        """Store the JSON ``value_text`` in the row, if it still holds ``stored``; whether it
        did."""
        as_text = self.transaction.json_as_text.format(column)
        value = self.transaction.json_from_text.format(":value")
        update = sa.text(
            f"UPDATE {table} SET {column} = {value} WHERE {key} = :key AND {as_text} = :stored"
        )
        params = {"value": value_text, "key": row_key, "stored": stored}
        return (await self._execute(update, params)).rowcount > 0
