"""Benchmark ``import-json`` against a plain ``sqlite3`` executemany of the same rows.

    python bench/import.py [--sessions 200] [--messages 1000]

Generates a synthetic cc-web state (string and block content, ids and missing ids, epoch and
ISO timestamps, extra keys), imports it with the importer into a fresh SQLite file migrated by
Alembic, then inserts the very same message rows with ``sqlite3.executemany`` (one
transaction per session, same pragmas) into a second fresh file, and prints rows/second for
both and their ratio. With ``CCWEB_BENCH_POSTGRES_URL`` (a server URL, e.g.
``postgresql+asyncpg://root@127.0.0.1:5432/postgres``) it also imports into a fresh
PostgreSQL database.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import resource
import sqlite3
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


from ccweb_store.db import create_database, create_engine, drop_database, migrate
from ccweb_store.importer import import_state
from ccweb_store.uow import Store

WORDS = [
    "the",
    "quick",
    "brown",
    "fox",
    "jumps",
    "over",
    "a",
    "lazy",
    "dog",
    "while",
    "agents",
    "trade",
    "work",
    "across",
    "chats",
]


def generate_state(root: Path, sessions: int, messages: int) -> int:
    """Write ``sessions`` files of ``messages`` messages each; return the message count."""
    (root / "sessions").mkdir(parents=True)
    (root / "config").mkdir()
    replies = []
    start = 1_700_000_000_000
    for s in range(sessions):
        session_id = f"bench-{s:05d}"
        rows: list[dict[str, Any]] = []
        for m in range(messages):
            text = " ".join(WORDS[(s + m + i) % len(WORDS)] for i in range(30))
            row: dict[str, Any] = {"role": "user" if m % 2 == 0 else "assistant"}
            if m % 4 == 1:
                row["content"] = [{"type": "text", "text": text}, {"type": "text", "text": "ok"}]
            else:
                row["content"] = text
            if m % 5:
                row["id"] = f"{session_id}-{m}"
            row["timestamp"] = start + s * 10_000_000 + m * 1000
            if m % 10 == 0:
                row["model"] = "claude-sonnet"
            rows.append(row)
        document = {
            "id": session_id,
            "title": f"Session {s}",
            "createdAt": "2023-11-14T22:13:20.000Z",
            "claudeSessionId": str(uuid.UUID(int=s)),
            "messages": rows,
        }
        (root / "sessions" / f"{session_id}.json").write_text(json.dumps(document))
        if s:
            replies.append(
                {
                    "requestId": f"req-{s}",
                    "sourceConversationId": "bench-00000",
                    "targetConversationId": session_id,
                    "status": "returned",
                    "createdAt": start + s,
                }
            )
    (root / "config" / "cross-conversation-replies.json").write_text(json.dumps(replies))
    return sessions * messages


async def run_importer(url: str, state: Path) -> float:
    """Seconds the importer takes for the whole state (after migrating to head)."""
    engine = create_engine(url)
    await migrate(engine)
    store = Store(engine)
    try:
        began = time.perf_counter()
        summary = await import_state(store, state)
        elapsed = time.perf_counter() - began
    finally:
        await store.dispose()
    assert summary.ok and summary.messages.skipped == 0, summary.as_dict()
    return elapsed


async def migrated_sqlite(path: Path) -> None:
    engine = create_engine(f"sqlite+aiosqlite:///{path}")
    try:
        await migrate(engine)
    finally:
        await engine.dispose()


def plain_sqlite_insert(source: Path, target: Path) -> tuple[float, int]:
    """Copy the importer's rows with sqlite3 executemany; (seconds spent inserting, rows)."""
    asyncio.run(migrated_sqlite(target))
    reader = sqlite3.connect(source)
    writer = sqlite3.connect(target, isolation_level=None)
    for pragma in ("foreign_keys = ON", "journal_mode = WAL", "synchronous = NORMAL"):
        writer.execute(f"PRAGMA {pragma}")
    columns = "id, title, agent, cwd, created_at, updated_at, archived_at, extra"
    message_columns = "id, session_id, seq, role, content, created_at, metadata"
    spent = 0.0
    rows = 0
    for (session_id,) in reader.execute("SELECT id FROM sessions ORDER BY id").fetchall():
        session = reader.execute(f"SELECT {columns} FROM sessions WHERE id = ?", (session_id,))
        batch = reader.execute(
            f"SELECT {message_columns} FROM messages WHERE session_id = ? ORDER BY seq",
            (session_id,),
        ).fetchall()
        began = time.perf_counter()
        writer.execute("BEGIN IMMEDIATE")
        writer.execute(
            f"INSERT INTO sessions ({columns}) VALUES (?,?,?,?,?,?,?,?)", session.fetchone()
        )
        writer.executemany(
            f"INSERT INTO messages ({message_columns}) VALUES (?,?,?,?,?,?,?)", batch
        )
        writer.execute("COMMIT")
        spent += time.perf_counter() - began
        rows += len(batch)
    reader.close()
    writer.close()
    return spent, rows


def run_postgres(server_url: str, state: Path) -> float:
    name = f"ccweb_bench_{uuid.uuid4().hex[:8]}"
    url = asyncio.run(create_database(server_url, name))
    try:
        return asyncio.run(run_importer(url, state))
    finally:
        asyncio.run(drop_database(server_url, name))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sessions", type=int, default=200)
    parser.add_argument("--messages", type=int, default=1000, help="messages per session")
    args = parser.parse_args()

    with tempfile.TemporaryDirectory(prefix="ccweb-bench-") as scratch:
        root = Path(scratch)
        state = root / "state"
        total = generate_state(state, args.sessions, args.messages)
        size = sum(p.stat().st_size for p in state.rglob("*.json")) / 1e6
        print(
            f"state: {args.sessions} sessions x {args.messages} messages = {total} rows,"
            f" {size:.0f} MB of JSON"
        )

        imported = root / "importer.db"
        seconds = asyncio.run(run_importer(f"sqlite+aiosqlite:///{imported}", state))
        peak_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
        importer_rate = total / seconds
        print(
            f"importer (SQLite):        {seconds:7.2f} s  {importer_rate:10,.0f} rows/s"
            f"  (parse + plan + write; peak RSS {peak_mb:.0f} MB)"
        )

        baseline_seconds, rows = plain_sqlite_insert(imported, root / "baseline.db")
        assert rows == total, (rows, total)
        baseline_rate = rows / baseline_seconds
        print(
            f"sqlite3 executemany:      {baseline_seconds:7.2f} s  {baseline_rate:10,.0f} rows/s"
            "  (the same rows, prebuilt, insert only)"
        )
        print(f"ratio importer/baseline:  {importer_rate / baseline_rate:.2f}")

        server = os.environ.get("CCWEB_BENCH_POSTGRES_URL")
        if server:
            pg_seconds = run_postgres(server, state)
            print(
                f"importer (PostgreSQL):    {pg_seconds:7.2f} s  {total / pg_seconds:10,.0f} rows/s"
                f"  (ratio to sqlite3 baseline {total / pg_seconds / baseline_rate:.2f})"
            )


if __name__ == "__main__":
    main()
