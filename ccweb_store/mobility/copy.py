"""``ccweb-store copy``: a whole database copied to another, on the same engine or the other
one, with its ids, ``seq`` numbers, timestamps and id counters as they are.

Every table of the schema (``models.Base.metadata``, parents before children) is read in one
consistent snapshot of the source (``store.whole_tables``), in primary-key order (text keys
by their UTF-8 bytes on either engine), and written to the target in batches, each batch its
own transaction (``UnitOfWork.copy_rows``: PostgreSQL's ``COPY``). So
an interrupted copy leaves, per table, a prefix of the source's rows in that order: ``resume``
skips the rows up to the target's last key and writes the rest. The id counters (a serial or
identity column's sequence, SQLite's ``sqlite_sequence``) are set past the highest id the
source handed out. Last, each table's row count and order-independent checksum
(``checksums``) are compared between the snapshot and the target; any difference fails the
copy.

Each database keeps its own identity (``database_identity``, a random id) and copy marker
(``copy_marker``); neither is copied. Before its first row the copy marks the target as
receiving the source's copy (the source's id and URL, ``in progress``) and, once verified,
closes the marker (``done``). So ``resume`` continues only an interrupted copy of the same
source, any other target that holds rows is refused before anything is written to it, and
two URLs reaching one database are caught by their id (SQLite files also by resolved path).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from ccweb_store.domain.rows import CopyMarker
from ccweb_store.mobility.checksums import TableChecksum
from ccweb_store.store.db import current_revision, head_revision, known_revisions, migrate
from ccweb_store.store.failures import DatabaseError, connection_problem, driver_words
from ccweb_store.store.models import CopyMarkerRow, DatabaseIdentityRow
from ccweb_store.store.repositories.identity import IN_PROGRESS
from ccweb_store.store.uow import Store
from ccweb_store.store.urls import credential_free_url, masked_url, same_sqlite_file
from ccweb_store.store.whole_tables import (
    Snapshot,
    Table,
    json_positions,
    key_positions,
    last_key,
    row_counts,
    schema_tables,
    snapshot,
)

#: Rows per batch: each is one read from the source and one transaction on the target.
BATCH_ROWS = 5000

#: Told (table, rows done, rows in all) as a copy or a check goes.
Progress = Callable[[str, int, int], None]


#: Tables each database keeps its own of, never copied: its identity and its copy marker.
OWN_TABLES = frozenset({DatabaseIdentityRow.__tablename__, CopyMarkerRow.__tablename__})
_ELSEWHERE = "copy into another database"


class CopyRefused(Exception):
    """The copy cannot start; ``reason`` says why and what to do."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


class DatabaseUnreachable(Exception):
    """The source or the target cannot be connected to or read; ``reason`` names it."""

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


def copied_tables() -> list[Table]:
    """The tables ``copy`` copies, parents first: all but the database's own identity and
    copy marker, which each database keeps its own of."""
    return [table for table in schema_tables() if table.name not in OWN_TABLES]


async def copy_database(
    source: Store,
    target: Store,
    *,
    resume: bool = False,
    batch_rows: int = BATCH_ROWS,
    tables: Sequence[Table] | None = None,
    on_progress: Progress | None = None,
) -> CopyReport:
    """Copy every table of ``source`` into ``target`` (migrated to head first) and verify it.

    ``CopyRefused`` when either database is at another schema revision than this
    ccweb-store's (the target may also be new), both are one database, or the target holds
    rows and is not an interrupted copy of this source being resumed (``resume``).
    ``DatabaseUnreachable`` when either cannot be connected to. The target is marked (its
    ``copy_marker``) as receiving this source's copy before any row is written, and the
    marker closed once the copy is verified.
    """
    tables = list(tables) if tables is not None else copied_tables()
    source_shown, target_shown = _shown(source), _shown(target)
    head = await head_revision()
    known = known_revisions()
    revision = await _revision(source, "--from", source_shown)
    _check_revision(revision, head, known, "--from", source_shown, new_allowed=False)
    if same_sqlite_file(source.url, target.url):
        raise CopyRefused(
            f"--from and --to name the same database, the SQLite file of {source_shown}: "
            f"{_ELSEWHERE}"
        )
    target_revision = await _revision(target, "--to", target_shown)
    _check_revision(target_revision, head, known, "--to", target_shown, new_allowed=True)
    source_id = await _database_id(source)
    async with source.read_uow() as uow:
        unfinished = await uow.identity.copy_marker()
    if unfinished is not None and unfinished.state == IN_PROGRESS:
        raise CopyRefused(
            f"--from {source_shown} holds an unfinished copy of {unfinished.source_url}: "
            "finish that copy first (copy --resume into it)"
        )
    marker: CopyMarker | None = None
    counts: dict[str, int] = {}
    if target_revision is not None:
        async with target.read_uow() as uow:
            target_id = await uow.identity.database_id()
            marker = await uow.identity.copy_marker()
        if target_id == source_id:
            raise CopyRefused(
                f"--from {source_shown} and --to {target_shown} reach the same database "
                f"(its id is {source_id}): {_ELSEWHERE}"
            )
        counts = await row_counts(target, tables)
        if any(counts.values()):
            _check_resumable(resume, marker, source_id, source_shown, counts)
    await migrate(target.engine)
    await _database_id(target)
    if not any(counts.values()):
        async with target.uow() as uow:
            await uow.identity.start_copy(source_id, credential_free_url(source.url))
            await uow.commit()
    report = CopyReport(resumed=resume)
    started = time.perf_counter()
    async with snapshot(source) as reading:
        totals = {table.name: await reading.row_count(table) for table in tables}
        for table in tables:
            last = await last_key(target, table) if counts.get(table.name) else None
            copied = TableReport(table.name)
            report.tables.append(copied)
            checksum = await _copy_table(
                source, reading, target, table, last, batch_rows, copied, totals, on_progress
            )
            copied.rows, copied.checksum = checksum.rows, checksum.hexdigest
            issued = await reading.issued_ids(table)
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
    if report.ok:
        async with target.uow() as uow:
            await uow.identity.finish_copy()
            await uow.commit()
    await target.refresh_statistics()  # the planner's view of the tables just filled
    return report


def _shown(store: Store) -> str:
    return masked_url(store.url)


async def _revision(store: Store, flag: str, shown: str) -> str | None:
    """The schema revision of ``store``'s database; ``DatabaseUnreachable`` naming ``flag``
    when it cannot be read."""
    try:
        async with store.engine.connect() as connection:
            return await current_revision(connection)
    except (DatabaseError, OSError) as exc:
        reason = connection_problem(exc, store.settings.database_url, flag) or (
            f"{driver_words(exc)}. Check that it is reachable and that you may read (and write) it"
        )
        raise DatabaseUnreachable(f"cannot use {flag} {shown}: {reason}") from exc


def _check_revision(
    revision: str | None,
    head: str | None,
    known: set[str],
    flag: str,
    shown: str,
    *,
    new_allowed: bool,
) -> None:
    """``CopyRefused`` unless ``revision`` is the head (or, ``new_allowed``, no schema yet):
    a newer one asks for a newer ccweb-store, an older one (or none) for a migration."""
    if revision == head or (revision is None and new_allowed):
        return
    if revision is not None and revision not in known:
        raise CopyRefused(
            f"{flag} {shown} is at schema revision {revision}, newer than this ccweb-store "
            f"knows (its newest is {head}): upgrade ccweb-store, then copy again"
        )
    where = "FROM" if flag == "--from" else "TO"
    if revision is None:
        raise CopyRefused(
            f"{flag} {shown} holds no ccweb-store schema: migrate it first "
            f"(ccweb-store migrate --database-url {where}), or name the right database"
        )
    advice = "" if flag == "--from" else ", or copy into an empty database"
    raise CopyRefused(
        f"{flag} {shown} is at schema revision {revision}, older than this ccweb-store's "
        f"{head}: migrate it first (ccweb-store migrate --database-url {where}){advice}"
    )


async def _database_id(store: Store) -> str:
    """The database's own id, made when it has none."""
    async with store.read_uow() as uow:
        found = await uow.identity.database_id()
    if found is not None:
        return found
    async with store.uow() as uow:
        found = await uow.identity.database_id()
        if found is None:
            found = await uow.identity.make_database_id()
        await uow.commit()
    return found


def _check_resumable(
    resume: bool,
    marker: CopyMarker | None,
    source_id: str,
    source_shown: str,
    counts: dict[str, int],
) -> None:
    """``CopyRefused`` unless the target, which holds rows, is a copy of this source in
    progress and ``resume`` says to finish it."""
    held = ", ".join(f"{name} ({rows} rows)" for name, rows in counts.items() if rows)
    interrupted = (
        marker is not None and marker.source_id == source_id and marker.state == IN_PROGRESS
    )
    if interrupted and resume:
        return
    if interrupted:
        raise CopyRefused(
            f"the target database is not empty: {held}. It holds an interrupted copy of "
            f"{source_shown}: add --resume to finish it, or copy into an empty database"
        )
    if marker is None:
        what = "rows no copy wrote"
    elif marker.source_id != source_id:
        what = f"a copy of another database ({marker.source_url})"
    else:
        what = f"a finished copy of {source_shown}: there is nothing to resume"
    raise CopyRefused(
        f"the target database is not empty: {held}; it holds {what}. It is left as it was: "
        "copy into an empty database"
    )


async def _copy_table(
    source: Store,
    reading: Snapshot,
    target: Store,
    table: Table,
    last: tuple[Any, ...] | None,
    batch_rows: int,
    report: TableReport,
    totals: dict[str, int],
    on_progress: Progress | None,
) -> TableChecksum:
    """Read every row of ``table`` from the snapshot, checksum it, and write those after
    ``last`` (all when None) to ``target``; reading the next batch while one is written."""
    checksum = TableChecksum(table)
    keys = key_positions(table)
    json_columns = json_positions(table)
    batches: asyncio.Queue[list[Any] | None] = asyncio.Queue(maxsize=2)
    total = totals[table.name]

    async def read() -> None:
        async for partition in reading.table_rows(table, batch_rows, key_order=True):
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
            if json_columns and rows:
                rows = [_portable(row, json_columns, source.portable_json_text) for row in rows]
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
    store: Store, tables: Sequence[Table], batch_rows: int = BATCH_ROWS
) -> list[tuple[int, str]]:
    """Each table's (rows, checksum), all read on one snapshot of ``store``."""
    sums: list[tuple[int, str]] = []
    async with snapshot(store) as reading:
        for table in tables:
            checksum = TableChecksum(table)
            async for partition in reading.table_rows(table, batch_rows):
                checksum.add(partition)
            sums.append((checksum.rows, checksum.hexdigest))
    return sums
