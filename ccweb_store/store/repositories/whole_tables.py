"""Whole-table reads of the data tools (``store.whole_tables``): how many rows each table holds,
and a table's greatest primary key, in one unit of work. Everything here only reads."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import sqlalchemy as sa

from ccweb_store.store.repositories.base import Repository


def count_rows(table: sa.Table) -> sa.Select[Any]:
    """``SELECT count(*) FROM table``."""
    return sa.select(sa.func.count()).select_from(table)


class WholeTableRepository(Repository):
    """Row counts and last keys of any table of the schema."""

    async def row_counts(self, tables: Sequence[sa.Table]) -> dict[str, int]:
        """How many rows each of ``tables`` holds, by table name."""
        return {
            table.name: int((await self._execute(count_rows(table))).scalar()) for table in tables
        }

    async def last_key(
        self, table: sa.Table, key_order: Sequence[sa.ColumnElement[Any]]
    ) -> tuple[Any, ...] | None:
        """The primary key of ``table``'s last row when sorted by ``key_order`` (its primary-key
        columns as the caller orders them); None: no rows."""
        stmt = (
            sa.select(*table.primary_key.columns)
            .order_by(*(column.desc() for column in key_order))
            .limit(1)
        )
        row = (await self._execute(stmt)).first()
        return None if row is None else tuple(row)
