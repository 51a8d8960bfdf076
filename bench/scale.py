"""Scale: the service past 100k messages, on SQLite and PostgreSQL.

Generates in bulk (``sqlite3.executemany`` into a migrated file) ``--conversations``
conversations holding ``--messages`` messages between them, one conversation of ``--big``
messages and one of 1,000, then prints, every figure as a ratio to a peer measured in the
same run:

- ``ccweb_list_user_inputs`` and a ``message.list`` page (100 messages from the middle) at
  ``--big`` vs 1,000 messages in one conversation (goal ≤ 1.3×), per engine;
- database bytes per message, per engine;
- ``copy`` SQLite → PostgreSQL rows/s against PostgreSQL's own ``COPY … FROM`` (binary) of
  the same rows into an empty migrated database (goal ≥ 0.5), with and without the copy's
  verification pass;
- ``import-json`` of a ``--import-messages``-message cc-web state in a process of its own,
  as ``--import-sessions`` files and as one file (a single conversation, which the import
  streams): rows/s and peak RSS (``os.wait4``'s ``ru_maxrss``; goal ≤ 150 MB);
- ``export-json`` rows/s against reading the same rows with ``sqlite3`` and writing each as
  JSON (the floor of any export).

    .venv/bin/python bench/scale.py                                   # 10M + 1M: ~20 minutes
    CCWEB_BENCH_POSTGRES_URL=postgresql+asyncpg://root@127.0.0.1:5432/test \\
        .venv/bin/python bench/scale.py --conversations 1000 --messages 1000000 --big 1000000
    .venv/bin/python bench/scale.py --quick                            # checks that it runs
"""

from __future__ import annotations

import argparse
import asyncio
import io
import json
import os
import shutil
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Awaitable, Callable
from contextlib import closing
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import sqlalchemy as sa

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from bench.legacy_state import generate_state  # noqa: E402
from bench.scratch_databases import create_database, drop_database  # noqa: E402
from bench.user_inputs import WORDS  # noqa: E402
from ccweb_store.config import Settings  # noqa: E402
from ccweb_store.contract.messages import ListMessages  # noqa: E402
from ccweb_store.contract.tools import ListUserInputs  # noqa: E402
from ccweb_store.domain.context import Source  # noqa: E402
from ccweb_store.mobility.copy import copied_tables, copy_database  # noqa: E402
from ccweb_store.mobility.export import export_state  # noqa: E402
from ccweb_store.services.conversations import list_messages  # noqa: E402
from ccweb_store.services.user_inputs import list_user_inputs  # noqa: E402
from ccweb_store.store.db import create_engine, migrate  # noqa: E402
from ccweb_store.store.uow import Store  # noqa: E402

SMALL = 1_000
ROUNDS = 7
CALLS_PER_ROUND = 30
PAGE = 100
START = datetime(2025, 1, 1, tzinfo=UTC)


def sqlite_time(value: datetime) -> str:
    """A UTC time as the store keeps it on SQLite (``column_types``)."""
    return value.strftime("%Y-%m-%d %H:%M:%S.%f")


def text(n: int) -> str:
    return f"#{n} " + " ".join(WORDS[(n + i) % len(WORDS)] for i in range(40))


def generate_sqlite(path: Path, conversations: int, messages: int, big: int) -> int:
    """Fill the migrated SQLite file at ``path`` in bulk; return the messages written."""
    with closing(sqlite3.connect(path)) as db:
        db.execute("PRAGMA journal_mode = WAL")
        db.execute("PRAGMA synchronous = OFF")
        sessions = [(f"c{i:05d}", f"Conversation {i}") for i in range(conversations)]
        sessions += [("big", "Big"), ("small", "Small")]
        now = sqlite_time(START)
        db.executemany(
            "INSERT INTO sessions (id, title, created_at, updated_at) VALUES (?, ?, ?, ?)",
            [(sid, title, now, now) for sid, title in sessions],
        )
        plan = [(f"c{i:05d}", messages // max(conversations, 1)) for i in range(conversations)]
        plan += [("big", big), ("small", SMALL)]
        written = 0
        for sid, count in plan:
            for start in range(0, count, 50_000):
                rows = [
                    (
                        f"{sid}-{seq}",
                        sid,
                        seq,
                        "user" if seq % 2 else "assistant",
                        text(seq),
                        sqlite_time(START + timedelta(seconds=seq)),
                        f'{{"model":"m","turn":{seq}}}' if seq % 10 == 0 else None,
                    )
                    for seq in range(start + 1, min(count, start + 50_000) + 1)
                ]
                db.executemany("INSERT INTO messages VALUES (?, ?, ?, ?, ?, ?, ?)", rows)
                written += len(rows)
            db.commit()
        db.execute("ANALYZE")
        db.commit()
        db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    return written


async def median_ms(run: Callable[[], Awaitable[Any]]) -> list[float]:
    """Per round, the median milliseconds of ``CALLS_PER_ROUND`` calls."""
    samples = []
    for _ in range(CALLS_PER_ROUND):
        start = time.perf_counter()
        await run()
        samples.append((time.perf_counter() - start) * 1000)
    return samples


async def latencies(url: str, big: int) -> dict[str, tuple[float, float, list[float]]]:
    """Per call: (median ms at ``big``, at 1,000, ratio per round)."""
    store = Store.from_settings(Settings(database_url=url, token=None))
    calls: dict[str, Callable[[str, int], Callable[[], Awaitable[Any]]]] = {
        "ccweb_list_user_inputs": lambda sid, n: (
            lambda: list_user_inputs(store, Source(sid), ListUserInputs())
        ),
        "message.list page": lambda sid, n: (
            lambda: list_messages(store, ListMessages(session_id=sid, after_seq=n // 2, limit=PAGE))
        ),
    }
    figures = {}
    try:
        for name, call in calls.items():
            large, small, ratios = [], [], []
            await median_ms(call("big", big))  # warm-up
            await median_ms(call("small", SMALL))
            for _ in range(ROUNDS):
                at_big = statistics.median(await median_ms(call("big", big)))
                at_small = statistics.median(await median_ms(call("small", SMALL)))
                large.append(at_big)
                small.append(at_small)
                ratios.append(at_big / at_small)
            figures[name] = (statistics.median(large), statistics.median(small), ratios)
    finally:
        await store.dispose()
    return figures


async def database_bytes(url: str) -> int:
    engine = create_engine(url)
    try:
        async with engine.connect() as connection:
            if engine.dialect.name == "sqlite":
                pages = (await connection.exec_driver_sql("PRAGMA page_count")).scalar_one()
                size = (await connection.exec_driver_sql("PRAGMA page_size")).scalar_one()
                return int(pages) * int(size)
            return int(
                (
                    await connection.execute(sa.text("SELECT pg_database_size(current_database())"))
                ).scalar_one()
            )
    finally:
        await engine.dispose()


async def analyze(url: str) -> None:
    engine = create_engine(url, isolation_level="AUTOCOMMIT")
    try:
        async with engine.connect() as connection:
            await connection.exec_driver_sql("ANALYZE")
    finally:
        await engine.dispose()


async def copy_to(source_url: str, target_url: str) -> tuple[int, float, float]:
    source = Store.from_settings(Settings(database_url=source_url))
    target = Store.from_settings(Settings(database_url=target_url))
    try:
        report = await copy_database(source, target)
    finally:
        await source.dispose()
        await target.dispose()
    assert report.ok, report.as_json()
    return report.copied, report.copy_seconds, report.verify_seconds


async def postgres_copy_of_the_same_rows(loaded_url: str, empty_url: str) -> float:
    """Seconds PostgreSQL's ``COPY … FROM`` (binary) takes to load every table's rows, as
    read from ``loaded_url``, into the migrated, empty ``empty_url``."""
    import asyncpg

    def dsn(url: str) -> str:
        return url.replace("postgresql+asyncpg://", "postgresql://")

    source = await asyncpg.connect(dsn(loaded_url))
    target = await asyncpg.connect(dsn(empty_url))
    try:
        dumps = {}
        for table in copied_tables():
            buffer = io.BytesIO()
            await source.copy_from_table(table.name, output=buffer, format="binary")
            dumps[table.name] = buffer.getvalue()
        start = time.perf_counter()
        for table in copied_tables():
            async with target.transaction():
                await target.copy_to_table(
                    table.name, source=io.BytesIO(dumps[table.name]), format="binary"
                )
        return time.perf_counter() - start
    finally:
        await source.close()
        await target.close()


#: Runs a command and prints its peak RSS in KiB: ``getrusage(RUSAGE_CHILDREN)`` of a small
#: process, since a child's ``ru_maxrss`` starts at its parent's size at the ``fork``.
RSS_WRAPPER = (
    "import resource, subprocess, sys\n"
    "code = subprocess.call(sys.argv[1:], stdout=subprocess.DEVNULL)\n"
    "print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)\n"
    "sys.exit(code)\n"
)


def import_in_a_process(state: Path, url: str) -> tuple[float, int]:
    """Seconds and peak RSS (bytes) of ``ccweb-store import-json`` in a process of its own."""
    command = [sys.executable, "-m", "ccweb_store", "import-json", str(state), "--json"]
    start = time.perf_counter()
    result = subprocess.run(
        [sys.executable, "-c", RSS_WRAPPER, *command],
        cwd=ROOT,
        env={**os.environ, "CCWEB_DATABASE_URL": url, "PYTHONPATH": str(ROOT)},
        capture_output=True,
        text=True,
        check=True,
    )
    return time.perf_counter() - start, int(result.stdout.split()[-1]) * 1024


async def export_rate(url: str, directory: Path) -> tuple[int, float]:
    store = Store.from_settings(Settings(database_url=url))
    try:
        start = time.perf_counter()
        summary = await export_state(store, directory)
        return summary.messages, time.perf_counter() - start
    finally:
        await store.dispose()


def export_floor(path: Path, out: Path) -> float:
    """Seconds to read every message with ``sqlite3`` and write each as a JSON object."""
    start = time.perf_counter()
    with closing(sqlite3.connect(path)) as db, out.open("w") as handle:
        cursor = db.execute("SELECT * FROM messages ORDER BY session_id, seq")
        names = [d[0] for d in cursor.description]
        while rows := cursor.fetchmany(5000):
            handle.write("\n".join(json.dumps(dict(zip(names, row, strict=True))) for row in rows))
    return time.perf_counter() - start


def skip(*_: object) -> None:
    return None


def row(name: str, ours: str, peer: str, ratio: float, goal: str, met: bool | None) -> None:
    verdict = "—" if met is None else "met" if met else "NOT met"
    print(f"| {name} | {ours} | {peer} | {ratio:.2f} | {goal} | {verdict} |")


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--conversations", type=int, default=10_000)
    parser.add_argument("--messages", type=int, default=10_000_000)
    parser.add_argument("--big", type=int, default=1_000_000)
    parser.add_argument("--import-sessions", type=int, default=1_000)
    parser.add_argument("--import-messages", type=int, default=1_000_000)
    parser.add_argument("--quick", action="store_true", help="tiny sizes: checks that it runs")
    parser.add_argument(
        "--only",
        default="copy,latency,export,import",
        help="the rows to measure, of copy,latency,export,import",
    )
    args = parser.parse_args()
    only = set(args.only.split(","))
    if args.quick:
        args.conversations, args.messages, args.big = 5, 5_000, 5_000
        args.import_sessions, args.import_messages = 5, 2_000
    server = os.environ.get("CCWEB_BENCH_POSTGRES_URL")
    work = Path(tempfile.mkdtemp(prefix="ccweb-scale-"))
    names = [f"ccweb_scale_{uuid.uuid4().hex[:8]}_{n}" for n in ("copy", "load")]
    try:
        sqlite_url = f"sqlite+aiosqlite:///{work / 'scale.db'}"
        total = 0
        if only & {"copy", "latency", "export"}:
            engine = create_engine(sqlite_url)
            await migrate(engine)
            await engine.dispose()
            start = time.perf_counter()
            total = generate_sqlite(work / "scale.db", args.conversations, args.messages, args.big)
            print(f"generated {total:,} messages in {time.perf_counter() - start:.0f}s", flush=True)

        print("\n| row | ours | peer | ratio | goal | |\n|---|---|---|---|---|---|")
        engines = [("SQLite", sqlite_url)]
        copy_url = load_url = None
        if server and only & {"copy", "latency"}:
            copy_url = await create_database(server, names[0])
            load_url = await create_database(server, names[1])
            engine = create_engine(load_url)
            await migrate(engine)
            await engine.dispose()
            copied, copy_s, verify_s = await copy_to(sqlite_url, copy_url)
            await analyze(copy_url)
            baseline_s = await postgres_copy_of_the_same_rows(copy_url, load_url)
            ours, peer = copied / copy_s, copied / baseline_s
            row_if = row if "copy" in only else skip
            row_if(
                f"`copy` SQLite → PostgreSQL ({copied:,} rows) vs PostgreSQL's `COPY`",
                f"{ours:,.0f} rows/s",
                f"{peer:,.0f} rows/s",
                ours / peer,
                "≥ 0.5",
                ours / peer >= 0.5,
            )
            with_verify = copied / (copy_s + verify_s)
            row_if(
                "the same, its verification pass included",
                f"{with_verify:,.0f} rows/s",
                f"{peer:,.0f} rows/s",
                with_verify / peer,
                "—",
                None,
            )
            engines.append(("PostgreSQL", copy_url))
        for label, url in engines if "latency" in only else []:
            for name, (at_big, at_small, ratios) in (await latencies(url, args.big)).items():
                ratio = statistics.median(ratios)
                row(
                    f"{name}, {args.big:,} vs {SMALL:,} messages, {label}",
                    f"{at_big:.3f} ms",
                    f"{at_small:.3f} ms",
                    ratio,
                    "≤ 1.3×",
                    ratio <= 1.3,
                )
            size = await database_bytes(url)
            print(f"| database bytes per message, {label} | {size / total:,.0f} B | — | — | — | |")

        if "export" in only:
            exported, export_s = await export_rate(sqlite_url, work / "export")
            floor_s = export_floor(work / "scale.db", work / "floor.jsonl")
            row(
                f"`export-json` ({exported:,} messages) vs `sqlite3` rows written as JSON",
                f"{exported / export_s:,.0f} rows/s",
                f"{exported / floor_s:,.0f} rows/s",
                floor_s / export_s,
                "—",
                None,
            )
        if "import" not in only:
            return
        # The state as many conversations, then as one conversation of as many messages.
        for files in (args.import_sessions, 1):
            state = work / f"state-{files}"
            imported = generate_state(state, files, args.import_messages // files)
            import_url = f"sqlite+aiosqlite:///{work / f'import-{files}.db'}"
            seconds, peak = import_in_a_process(state, import_url)
            shutil.rmtree(state)
            named = f"{files:,} files" if files > 1 else "1 file, one conversation"
            row(
                f"`import-json` of {imported:,} messages ({named}): peak RSS",
                f"{peak / 2**20:,.0f} MB ({imported / seconds:,.0f} rows/s)",
                "150 MB",
                peak / 2**20 / 150,
                "≤ 1",
                peak <= 150 * 2**20,
            )
    finally:
        if server:
            for name in names:
                await drop_database(server, name)
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    asyncio.run(main())
