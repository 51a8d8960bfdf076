"""Whole-database work on PostgreSQL: a consistent snapshot to read from, the sequences of its
id columns, and the command that backs it up.

A snapshot is a ``REPEATABLE READ READ ONLY`` transaction: from its first statement on, every
read sees the database as it was then, whatever other sessions commit meanwhile, and it takes
no lock that would hold a writer up.
"""

from __future__ import annotations

import json
import shlex
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import orjson
import sqlalchemy as sa
from sqlalchemy.engine import URL, make_url
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from ccweb_store.store.bulk import id_counter_column

#: The sequence behind a serial or identity column (NULL: none).
SERIAL_SEQUENCE = sa.text("SELECT pg_get_serial_sequence(:table, :column)")
#: A sequence set so that its next value follows ``:value``.
SET_SEQUENCE = sa.text(
    "SELECT setval(CAST(pg_get_serial_sequence(:table, :column) AS regclass), :value)"
)


@asynccontextmanager
async def snapshot(engine: AsyncEngine) -> AsyncIterator[AsyncConnection]:
    """A connection whose reads all see one snapshot of the database; it writes nothing."""
    async with engine.connect() as connection:
        await connection.execution_options(
            isolation_level="REPEATABLE READ", postgresql_readonly=True
        )
        transaction = await connection.begin()
        try:
            await connection.execute(sa.text("SELECT 1"))  # the snapshot is taken here
            yield connection
        finally:
            await transaction.rollback()


def portable_json_text(text: str, loads: Callable[[str], Any]) -> str:
    """A ``jsonb`` value's text written so that any JSON reader reads the numbers the store
    answers: ``jsonb`` writes the float ``1e20`` as ``100000000000000000000``, which the store
    reads (``loads``, orjson) as the float it was but ``json.loads`` as an integer."""
    value = loads(text)
    try:
        return orjson.dumps(value).decode()
    except (orjson.JSONEncodeError, TypeError):
        return json.dumps(value)


def byte_ordered(column: sa.ColumnElement[str]) -> sa.ColumnElement[str]:
    """``column`` ordered by its bytes (collation "C"), as SQLite orders text."""
    if isinstance(column.type, sa.String):
        return column.collate("C")
    return column


async def issued_ids(connection: AsyncConnection, table: sa.Table) -> int:
    """The highest id handed out for ``table``'s serial or identity column (0: none, or no
    such column): its sequence's last value, or the highest id stored if that is higher."""
    column = id_counter_column(table)
    if column is None:
        return 0
    highest = (await connection.execute(sa.select(sa.func.max(column)))).scalar() or 0
    sequence = (
        await connection.execute(SERIAL_SEQUENCE, {"table": table.name, "column": column.name})
    ).scalar()
    if sequence is not None:
        # The name comes from the server, quoted as it must be written.
        last, called = (
            await connection.execute(sa.text(f"SELECT last_value, is_called FROM {sequence}"))
        ).one()
        if called:
            highest = max(highest, last)
    return int(highest)


def pg_dump_command(url: URL, target: Path) -> list[str]:
    """The ``pg_dump`` command that writes the database of ``url`` to ``target`` (custom
    format, restored with ``pg_restore``); the password is left to ``PGPASSWORD`` or
    ``~/.pgpass``."""
    command = ["pg_dump", "--format=custom", "--no-owner", f"--file={target}"]
    if url.host:
        command.append(f"--host={url.host}")
    if url.port:
        command.append(f"--port={url.port}")
    if url.username:
        command.append(f"--username={url.username}")
    command.append(str(url.database or ""))
    return command


def pg_restore_command(database_url: str, source: Path) -> list[str]:
    """The ``pg_restore`` command that replaces the contents of the database of
    ``database_url`` with the ``pg_dump --format=custom`` file ``source``, in one
    transaction."""
    url = make_url(database_url)
    command = ["pg_restore", "--no-owner", "--clean", "--if-exists", "--single-transaction"]
    if url.host:
        command.append(f"--host={url.host}")
    if url.port:
        command.append(f"--port={url.port}")
    if url.username:
        command.append(f"--username={url.username}")
    command += [f"--dbname={url.database or ''}", str(source)]
    return command


def shell_line(command: list[str]) -> str:
    return shlex.join(command)
