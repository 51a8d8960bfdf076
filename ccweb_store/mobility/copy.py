"""``ccweb-store copy``: a whole database copied to another, on the same engine or the other
one, with its ids, ``seq`` numbers, timestamps and id counters as they are.

Every table of the schema (``models.Base.metadata``, parents before children) is read in one
consistent snapshot of the source (``Store.snapshot``), in primary-key order (text keys by
their UTF-8 bytes on either engine, ``Store.byte_ordered``), and written to the target in
batches, each batch its own transaction (``UnitOfWork.copy_rows``: PostgreSQL's ``COPY``). So
an interrupted copy leaves, per table, a prefix of the source's rows in that order: ``resume``
skips the rows up to the target's last key and writes the rest. The id counters (a serial or
identity column's sequence, SQLite's ``sqlite_sequence``) are set past the highest id the
source handed out. Last, each table's row count and order-independent checksum
(``checksums``) are compared between the snapshot and the target; any difference fails the
copy.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import sqlalchemy as sa

from ccweb_store.mobility.checksums import TableChecksum
from ccweb_store.store.bulk import copy_select, is_json
from ccweb_store.store.db import current_revision, head_revision, migrate
from ccweb_store.store.models import Base
from ccweb_store.store.uow import Store

#: Rows per batch: each is one read from the source and one transaction on the target.
BATCH_ROWS = 5000

#: Told (table, rows done, rows in all) as a copy or a check goes.
Progress = Callable[[str, int, int], None]


class CopyRefused(Exception):
    """The copy cannot start; ``reason`` says why and what to do."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


@dataclass
class TableReport:
    table: str
    #: Rows in the source's snapshot.
    rows: int = 0
    #: Rows this run wrote (fewer than ``rows`` when resumed).
    copied: int = 0
    checksum: str = ""
    target_rows: int = 0
    target_checksum: str = ""

    @property
    def ok(self) -> bool:
        return self.rows == self.target_rows and self.checksum == self.target_checksum

    def as_json(self) -> dict[str, Any]:
        return {
            "table": self.table,
            "rows": self.rows,
            "copied": self.copied,
            "checksum": self.checksum,
            "targetRows": self.target_rows,
            "targetChecksum": self.target_checksum,
            "ok": self.ok,
        }


@dataclass
class CopyReport:
    resumed: bool
    tables: list[TableReport] = field(default_factory=list)
    copy_seconds: float = 0.0
    verify_seconds: float = 0.0

    @property
    def ok(self) -> bool:
        return all(table.ok for table in self.tables)

    @property
    def copied(self) -> int:
        return sum(table.copied for table in self.tables)

    def as_json(self) -> dict[str, Any]:
        return {
            "ok": self.ok,
            "resumed": self.resumed,
            "rowsCopied": self.copied,
            "copySeconds": round(self.copy_seconds, 3),
            "verifySeconds": round(self.verify_seconds, 3),
            "rowsPerSecond": round(self.copied / self.copy_seconds) if self.copy_seconds else None,
            "tables": [table.as_json() for table in self.tables],
        }


def schema_tables() -> list[sa.Table]:
    """Every table of the schema, each after the tables its foreign keys name."""
    return list(Base.metadata.sorted_tables)


async def copy_database(
    source: Store,
    target: Store,
    *,
    resume: bool = False,
    batch_rows: int = BATCH_ROWS,
    tables: Sequence[sa.Table] | None = None,
    on_progress: Progress | None = None,
) -> CopyReport:
    """Copy every table of ``source`` into ``target`` (migrated to head first) and verify it.

    ``CopyRefused`` when the source is not at the schema's head revision, or the target holds
    rows and ``resume`` is not set.
    """
    tables = list(tables) if tables is not None else schema_tables()
    await _check_source(source)
    await migrate(target.engine)
    counts = await _row_counts(target, tables)
    if any(counts.values()) and not resume:
        held = ", ".join(f"{name} ({rows} rows)" for name, rows in counts.items() if rows)
        raise CopyRefused(
            f"the target database is not empty: {held}. Copy into an empty database, or add "
            "--resume to finish an interrupted copy into this one"
        )
    report = CopyReport(resumed=resume)
    started = time.perf_counter()
    async with source.snapshot() as reading:
        totals = {
            table.name: (
                await reading.execute(sa.select(sa.func.count()).select_from(table))
            ).scalar_one()
            for table in tables
        }
        for table in tables:
            last = await _last_key(target, table) if counts.get(table.name) else None
            copied = TableReport(table.name)
            report.tables.append(copied)
            checksum = await _copy_table(
                source, reading, target, table, last, batch_rows, copied, totals, on_progress
            )
            copied.rows, copied.checksum = checksum.rows, checksum.hexdigest
            issued = await source.issued_ids(reading, table)
            if issued:
                async with target.uow() as uow:
                    await uow.keep_issued_ids(table, issued)
                    await uow.commit()
    report.copy_seconds = time.perf_counter() - started
    started = time.perf_counter()
    for table_report, (rows, digest) in zip(
        report.tables, await table_checksums(target, tables, batch_rows), strict=True
    ):
        table_report.target_rows, table_report.target_checksum = rows, digest
    report.verify_seconds = time.perf_counter() - started
    return report


async def _check_source(source: Store) -> None:
    async with source.engine.connect() as connection:
        revision = await current_revision(connection)
    head = await head_revision()
    if revision != head:
        raise CopyRefused(
            f"the source database is at schema revision {revision or 'none'}, this ccweb-store "
            f"copies revision {head}: migrate it first (ccweb-store migrate --database-url FROM)"
        )


async def _row_counts(store: Store, tables: Sequence[sa.Table]) -> dict[str, int]:
    async with store.read_uow() as uow:
        return {
            table.name: int(
                (await uow.execute(sa.select(sa.func.count()).select_from(table))).scalar()
            )
            for table in tables
        }


def _ordered(store: Store, table: sa.Table) -> list[sa.ColumnElement[Any]]:
    return [store.byte_ordered(column) for column in table.primary_key.columns]


def _key_positions(table: sa.Table) -> list[int]:
    names = list(table.columns.keys())
    return [names.index(column.key) for column in table.primary_key.columns]


async def _last_key(store: Store, table: sa.Table) -> tuple[Any, ...] | None:
    """The greatest primary key the table holds, in the copy's order (None: no rows)."""
    stmt = (
        sa.select(*table.primary_key.columns)
        .order_by(*(column.desc() for column in _ordered(store, table)))
        .limit(1)
    )
    async with store.read_uow() as uow:
        row = (await uow.execute(stmt)).first()
    return None if row is None else tuple(row)


async def _copy_table(
    source: Store,
    reading: Any,
    target: Store,
    table: sa.Table,
    last: tuple[Any, ...] | None,
    batch_rows: int,
    report: TableReport,
    totals: dict[str, int],
    on_progress: Progress | None,
) -> TableChecksum:
    """Read every row of ``table`` from the snapshot, checksum it, and write those after
    ``last`` (all when None) to ``target``; reading the next batch while one is written."""
    checksum = TableChecksum(table)
    keys = _key_positions(table)
    json_positions = [index for index, column in enumerate(table.columns) if is_json(column)]
    stmt = sa.select(*copy_select(table)).order_by(*_ordered(source, table))
    batches: asyncio.Queue[list[Any] | None] = asyncio.Queue(maxsize=2)
    total = totals[table.name]

    async def read() -> None:
        result = await reading.stream(stmt.execution_options(yield_per=batch_rows))
        async for partition in result.partitions(batch_rows):
            await batches.put(partition)
        await batches.put(None)

    reader = asyncio.create_task(read())
    done = 0
    try:
        while (rows := await batches.get()) is not None:
            checksum.add(rows)
            done += len(rows)
            if last is not None:
                rows = [row for row in rows if tuple(row[i] for i in keys) > last]
            if json_positions and rows:
                rows = [_portable(row, json_positions, source.portable_json_text) for row in rows]
            if rows:
                async with target.uow() as uow:
                    await uow.copy_rows(table, rows)
                    await uow.commit()
                report.copied += len(rows)
            if on_progress is not None:
                on_progress(table.name, done, total)
        await reader
    finally:
        if not reader.done():
            reader.cancel()
            await asyncio.gather(reader, return_exceptions=True)
    if on_progress is not None and not total:
        on_progress(table.name, 0, 0)
    return checksum


def _portable(
    row: Sequence[Any], positions: list[int], portable: Callable[[str], str]
) -> list[Any]:
    values = list(row)
    for index in positions:
        if values[index] is not None:
            values[index] = portable(values[index])
    return values


async def table_checksums(
    store: Store, tables: Sequence[sa.Table], batch_rows: int = BATCH_ROWS
) -> list[tuple[int, str]]:
    """Each table's (rows, checksum), all read on one snapshot of ``store``."""
    sums: list[tuple[int, str]] = []
    async with store.snapshot() as reading:
        for table in tables:
            checksum = TableChecksum(table)
            result = await reading.stream(
                sa.select(*copy_select(table)).execution_options(yield_per=batch_rows)
            )
            async for partition in result.partitions(batch_rows):
                checksum.add(partition)
            sums.append((checksum.rows, checksum.hexdigest))
    return sums
