"""Whole-database work on a SQLite file: a consistent snapshot to read from, the counters of
its id columns, and an online backup.

A snapshot is one read transaction: ``BEGIN`` and a first read, after which every read of the
transaction sees the database as it was then, whatever other connections commit meanwhile
(in WAL mode a reader never blocks the writer, nor the writer it). An online backup is
SQLite's backup API in a single step, which reads the whole file in one read transaction: the
same kind of snapshot, copied page by page while the server keeps writing.
"""

from __future__ import annotations

import os
import sqlite3
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager, closing
from pathlib import Path
from typing import Any

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from ccweb_store.store.bulk import id_counter_column


@asynccontextmanager
async def snapshot(engine: AsyncEngine) -> AsyncIterator[AsyncConnection]:
    """A connection whose reads all see one snapshot of the database; it writes nothing."""
    async with engine.connect() as connection:
        transaction = await connection.begin()  # BEGIN (deferred), see create_sqlite_engine
        try:
            # The first read fixes the snapshot for the rest of the transaction.
            await connection.execute(sa.text("SELECT count(*) FROM sqlite_master"))
            yield connection
        finally:
            await transaction.rollback()


def counts_in_sqlite_sequence(table: sa.Table) -> bool:
    """Whether ``table`` was created with ``AUTOINCREMENT``: SQLite then never hands out an id
    again, and keeps the highest it handed out in ``sqlite_sequence``."""
    return bool(table.dialect_options["sqlite"]["autoincrement"])


async def issued_ids(connection: AsyncConnection, table: sa.Table) -> int:
    """The highest id SQLite has handed out for ``table``'s id column (0: none, or no such
    column)."""
    column = id_counter_column(table)
    if column is None:
        return 0
    highest = (await connection.execute(sa.select(sa.func.max(column)))).scalar() or 0
    if counts_in_sqlite_sequence(table):
        counted = (
            await connection.execute(
                sa.text("SELECT seq FROM sqlite_sequence WHERE name = :name"), {"name": table.name}
            )
        ).scalar()
        highest = max(highest, counted or 0)
    return int(highest)


#: ``sqlite_sequence`` raised to a value (its row made when there is none).
RAISE_SEQUENCE = sa.text("UPDATE sqlite_sequence SET seq = :seq WHERE name = :name AND seq < :seq")
ADD_SEQUENCE = sa.text(
    "INSERT INTO sqlite_sequence (name, seq) SELECT :name, :seq "
    "WHERE NOT EXISTS (SELECT 1 FROM sqlite_sequence WHERE name = :name)"
)


#: Test-only: seconds to pause after each page a backup copies (the backup then copies a page
#: per step), so that a test can kill it midway.
BACKUP_PAUSE_ENV = "CCWEB_TEST_BACKUP_PAUSE_S"


def backup_file(source: str, target: Path) -> None:
    """Copy the database file ``source`` over ``target`` (a new file, empty or not there) with
    SQLite's backup API, in one step: one read transaction, so one consistent snapshot."""
    pause = float(os.environ.get(BACKUP_PAUSE_ENV) or 0)
    with (
        closing(sqlite3.connect(f"file:{source}?mode=ro", uri=True)) as reader,
        closing(sqlite3.connect(target)) as writer,
    ):
        reader.execute("PRAGMA busy_timeout = 30000")
        if pause:
            reader.backup(writer, pages=1, progress=lambda *_: time.sleep(pause))
        else:
            reader.backup(writer, pages=-1)
        # The copy is an ordinary file: no WAL beside it to lose when it is moved.
        writer.execute("PRAGMA journal_mode = DELETE").fetchall()


def check_backup(path: Path, tables: list[sa.Table]) -> dict[str, Any]:
    """Open a backup read-only and check it: SQLite's integrity check, its schema revision and
    the rows of each table. ``ValueError`` when it is damaged."""
    with closing(sqlite3.connect(f"file:{path}?mode=ro", uri=True)) as connection:
        verdict = connection.execute("PRAGMA integrity_check").fetchone()
        if verdict is None or verdict[0] != "ok":
            raise ValueError(f"the backup fails SQLite's integrity check: {verdict}")
        revision = connection.execute("SELECT version_num FROM alembic_version").fetchone()
        rows = {
            table.name: connection.execute(f'SELECT count(*) FROM "{table.name}"').fetchone()[0]
            for table in tables
        }
    return {"revision": revision[0] if revision else None, "rows": rows}
