"""Benchmark ``import-json`` against a plain ``sqlite3`` executemany of the same rows.

    python bench/import.py [--sessions 200] [--messages 1000]

Generates a synthetic cc-web state (string and block content, ids and missing ids, epoch and
ISO timestamps, extra keys, a reply file), imports it with the importer into a fresh SQLite
file migrated by Alembic — in a process of its own, which reports its peak RSS — then inserts
the very same rows (sessions, messages, reply requests, read back from that file) with
``sqlite3.executemany`` in one transaction, same pragmas, into a second fresh migrated file,
and prints rows/second for both and their ratio. With ``CCWEB_BENCH_POSTGRES_URL`` (a server
URL, e.g. ``postgresql+asyncpg://root@127.0.0.1:5432/postgres``) it also imports into a fresh
PostgreSQL database.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import resource
import sqlite3
import subprocess
import sys
import tempfile
import time
import uuid
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


from bench.legacy_state import generate_state
from bench.scratch_databases import create_database, drop_database
from ccweb_store.importer.load import import_state
from ccweb_store.store.db import create_engine, migrate
from ccweb_store.store.uow import Store


def cpu_seconds() -> float:
    """CPU time of this process so far, all its threads (SQLite's checkpoint thread too)."""
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


async def run_importer(url: str, state: Path) -> tuple[float, float, int]:
    """Seconds and CPU seconds the importer takes for the whole state (after migrating to
    head), and the rows it wrote (sessions, messages and reply requests)."""
    engine = create_engine(url)
    await migrate(engine)
    store = Store(engine)
    try:
        began, cpu = time.perf_counter(), cpu_seconds()
        summary = await import_state(store, state)
        elapsed, cpu = time.perf_counter() - began, cpu_seconds() - cpu
    finally:
        await store.dispose()
    assert summary.ok and summary.messages.skipped == 0, summary.as_dict()
    rows = summary.sessions.imported + summary.messages.imported + summary.replies.imported
    return elapsed, cpu, rows


def peak_rss_mb() -> float:
    """This process's peak resident set so far, in MiB.

    Linux's ``VmHWM`` where there is one: ``ru_maxrss`` carries over the parent's size at the
    ``fork`` that started this process, which may dwarf the importer's own.
    """
    try:
        status = Path("/proc/self/status").read_text()
    except OSError:
        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # KiB on Linux
    kib = next(line.split()[1] for line in status.splitlines() if line.startswith("VmHWM:"))
    return int(kib) / 1024


@dataclass
class ImportRun:
    seconds: float
    cpu_seconds: float
    rows: int
    rss_before_mb: float  # the process's peak RSS once migrated, before the import began
    peak_rss_mb: float


def import_in_subprocess(database: Path, state: Path) -> ImportRun:
    """Import ``state`` into a fresh SQLite file in a fresh Python process (``--worker``), so
    that its peak RSS is the importer's alone, not this script's."""
    command = [sys.executable, __file__, "--worker", str(database), str(state)]
    out = subprocess.run(command, check=True, capture_output=True, text=True).stdout
    return ImportRun(**json.loads(out))


def worker(database: Path, state: Path) -> None:
    async def run() -> ImportRun:
        engine = create_engine(f"sqlite+aiosqlite:///{database}")
        await migrate(engine)
        await engine.dispose()
        before = peak_rss_mb()
        seconds, cpu, rows = await run_importer(f"sqlite+aiosqlite:///{database}", state)
        return ImportRun(seconds, cpu, rows, before, peak_rss_mb())

    print(json.dumps(asyncio.run(run()).__dict__))


async def migrated_sqlite(path: Path) -> None:
    engine = create_engine(f"sqlite+aiosqlite:///{path}")
    try:
        await migrate(engine)
    finally:
        await engine.dispose()


#: The tables an import writes, parents first.
TABLES = ("sessions", "messages", "reply_requests")


def plain_sqlite_insert(source: Path, target: Path) -> tuple[float, float, int]:
    """Copy every row the importer wrote into a fresh migrated file with ``sqlite3``
    ``executemany``, in one transaction; (seconds and CPU seconds spent inserting and
    committing, rows)."""
    asyncio.run(migrated_sqlite(target))
    reader = sqlite3.connect(source)
    tables = []
    for table in TABLES:
        cursor = reader.execute(f"SELECT * FROM {table}")
        columns = [column[0] for column in cursor.description]
        tables.append((table, columns, cursor.fetchall()))
    reader.close()
    writer = sqlite3.connect(target, isolation_level=None)
    for pragma in (
        "foreign_keys = ON",
        "journal_mode = WAL",
        "synchronous = NORMAL",
        "wal_autocheckpoint = 10000",  # as db.WAL_AUTOCHECKPOINT_PAGES
    ):
        writer.execute(f"PRAGMA {pragma}")
    began, cpu = time.perf_counter(), cpu_seconds()
    writer.execute("BEGIN IMMEDIATE")
    for table, columns, rows in tables:
        marks = ", ".join("?" for _ in columns)
        writer.executemany(f"INSERT INTO {table} ({', '.join(columns)}) VALUES ({marks})", rows)
    writer.execute("COMMIT")
    spent, cpu = time.perf_counter() - began, cpu_seconds() - cpu
    writer.close()
    return spent, cpu, sum(len(rows) for _, _, rows in tables)


def run_postgres(server_url: str, state: Path) -> float:
    name = f"ccweb_bench_{uuid.uuid4().hex[:8]}"
    url = asyncio.run(create_database(server_url, name))
    try:
        return asyncio.run(run_importer(url, state))[0]
    finally:
        asyncio.run(drop_database(server_url, name))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sessions", type=int, default=200)
    parser.add_argument("--messages", type=int, default=1000, help="messages per session")
    parser.add_argument("--worker", nargs=2, metavar=("DB", "STATE"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        worker(Path(args.worker[0]), Path(args.worker[1]))
        return

    with tempfile.TemporaryDirectory(prefix="ccweb-bench-") as scratch:
        root = Path(scratch)
        state = root / "state"
        total = generate_state(state, args.sessions, args.messages)
        size = sum(p.stat().st_size for p in state.rglob("*.json")) / 1e6
        print(
            f"state: {args.sessions} sessions x {args.messages} messages = {total} messages,"
            f" {size:.0f} MB of JSON"
        )

        imported = root / "importer.db"
        run = import_in_subprocess(imported, state)
        importer_rate = run.rows / run.seconds
        print(
            f"importer (SQLite):        {run.seconds:7.2f} s  {importer_rate:10,.0f} rows/s"
            f"  (parse + plan + write; peak RSS {run.peak_rss_mb:.0f} MB,"
            f" {run.rss_before_mb:.0f} MB before the import)"
        )

        baseline_seconds, baseline_cpu, rows = plain_sqlite_insert(imported, root / "baseline.db")
        assert rows == run.rows, (rows, run.rows)
        baseline_rate = rows / baseline_seconds
        print(
            f"sqlite3 executemany:      {baseline_seconds:7.2f} s  {baseline_rate:10,.0f} rows/s"
            "  (the same rows, prebuilt, insert only, one transaction)"
        )
        print(
            f"ratio importer/baseline:  {importer_rate / baseline_rate:.2f}"
            f" (by CPU time: {baseline_cpu / run.cpu_seconds:.2f})"
        )

        server = os.environ.get("CCWEB_BENCH_POSTGRES_URL")
        if server:
            pg_seconds = run_postgres(server, state)
            pg_rate = run.rows / pg_seconds
            print(
                f"importer (PostgreSQL):    {pg_seconds:7.2f} s  {pg_rate:10,.0f} rows/s"
                f"  (ratio to sqlite3 baseline {pg_rate / baseline_rate:.2f})"
            )


if __name__ == "__main__":
    main()
