"""Whole tables read and written as rows, for copying a database to another engine
(``ccweb_store.mobility``): what a copy selects from a table and how it inserts the rows.

A JSON column moves as its JSON text (``CAST(col AS TEXT)``), so a SQL ``NULL`` stays ``NULL``
and a JSON ``null`` stays ``null``, and nothing is decoded only to be encoded again; every other
column moves as the Python value its type reads and writes (aware UTC datetimes, booleans).
What differs between the engines (a snapshot to read from, the order of text keys, how rows
are written fast, id counters) is a method of each engine's database and transaction classes.
"""

from __future__ import annotations

from functools import lru_cache
from typing import Any

import sqlalchemy as sa


def is_json(column: sa.Column[Any]) -> bool:
    """Whether ``column`` holds JSON (moved as its text)."""
    return isinstance(column.type, sa.JSON)


def copy_select(table: sa.Table) -> list[sa.ColumnElement[Any]]:
    """What a copy reads of ``table``: every column in table order, JSON ones as text."""
    return [
        sa.cast(column, sa.Text()).label(column.name) if is_json(column) else column
        for column in table.columns
    ]


@lru_cache(maxsize=64)
def copy_insert(table: sa.Table) -> sa.Insert:
    """An INSERT of every column of ``table`` whose JSON columns take JSON text."""
    return table.insert().values(
        {
            column.key: sa.bindparam(
                column.key, type_=sa.Text() if is_json(column) else column.type
            )
            for column in table.columns
        }
    )


def id_counter_column(table: sa.Table) -> sa.Column[Any] | None:
    """The column whose values the database counts out itself (a serial or identity column
    on PostgreSQL, an ``INTEGER PRIMARY KEY`` on SQLite), None when the table has none."""
    return table.autoincrement_column
