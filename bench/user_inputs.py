"""Benchmark ``ccweb_list_user_inputs`` against cc-web's JSON-file approach.

Builds conversations of 1,000, 10,000 and 100,000 messages (every other one a user input of a
few hundred characters) in one database, then prints the median latency of the tool with its
default arguments at each size, called in process, and — measured in the same run — the
median time of what cc-web does: load the whole session JSON file and filter it. Goals, both
ratios within the run: the 100k latency over the 1k latency (≤ 1.3×) and JSON over SQL at 100k
(≥ 1000×).

    python bench/user_inputs.py                 # SQLite
    CCWEB_BENCH_POSTGRES_URL=postgresql+asyncpg://root@127.0.0.1:5432/postgres \\
        python bench/user_inputs.py             # SQLite, then PostgreSQL
"""

from __future__ import annotations

import asyncio
import gc
import json
import os
import random
import statistics
import sys
import tempfile
import time
import uuid
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import sqlalchemy as sa

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.scratch_databases import create_database, drop_database
from ccweb_store.config import Settings
from ccweb_store.contract.tools import MAX_CHARS_DEFAULT, USER_INPUTS_DEFAULT, ListUserInputs
from ccweb_store.domain.content import text_of
from ccweb_store.domain.context import Source
from ccweb_store.domain.timestamps import utcnow
from ccweb_store.services.user_inputs import apply_budget, list_user_inputs
from ccweb_store.store.db import create_engine, migrate
from ccweb_store.store.models import MessageRow
from ccweb_store.store.uow import Store

SIZES = (1_000, 10_000, 100_000)
#: The goal for JSON over SQL at 100k messages.
TARGET_SPEEDUP = 1000
SQL_ROUNDS = 10
SQL_RUNS_PER_ROUND = 50
JSON_RUNS = 5
WORDS = [
    "the",
    "parser",
    "must",
    "keep",
    "every",
    "input",
    "exact",
    "and",
    "read",
    "only",
    "what",
    "it",
    "needs",
    "from",
    "disk",
]


def message_text(rng: random.Random, seq: int) -> str:
    words = " ".join(rng.choice(WORDS) for _ in range(rng.randint(40, 70)))
    return f"#{seq} {words}"


def conversation_messages(size: int) -> list[dict[str, Any]]:
    """``size`` messages alternating user and assistant, a few hundred characters each."""
    rng = random.Random(size)
    now = utcnow()
    return [
        {
            "id": f"bench-{size}-{seq}",
            "seq": seq,
            "role": "user" if seq % 2 else "assistant",
            "content": message_text(rng, seq),
            "created_at": now,
        }
        for seq in range(1, size + 1)
    ]


async def fill(store: Store, size: int, messages: list[dict[str, Any]]) -> str:
    session_id = f"bench-{size}"
    async with store.uow() as uow:
        await uow.sessions.create(session_id, title=f"{size} messages")
        await uow.commit()
    rows = [{**message, "session_id": session_id} for message in messages]
    async with store.engine.begin() as connection:
        for start in range(0, len(rows), 20_000):
            await connection.execute(sa.insert(MessageRow), rows[start : start + 20_000])
    return session_id


def write_json_session(directory: Path, size: int, messages: list[dict[str, Any]]) -> Path:
    """The conversation as cc-web stores it: one JSON file holding every message."""
    path = directory / f"bench-{size}.json"
    session = {
        "id": f"bench-{size}",
        "title": f"{size} messages",
        "messages": [
            {
                "id": m["id"],
                "role": m["role"],
                "content": m["content"],
                "timestamp": m["created_at"].isoformat(),
            }
            for m in messages
        ],
    }
    path.write_text(json.dumps(session, ensure_ascii=False), encoding="utf-8")
    return path


def list_from_json_file(path: Path) -> list[dict[str, Any]]:
    """cc-web's approach: load the whole file, filter user inputs, keep the newest within budget."""
    with path.open(encoding="utf-8") as handle:
        session = json.load(handle)
    inputs = [
        (m, text)
        for m in session["messages"]
        if m.get("role") == "user" and (text := text_of(m.get("content"))).strip()
    ]
    newest = inputs[-USER_INPUTS_DEFAULT:][::-1]
    kept, _ = apply_budget([text for _, text in newest], MAX_CHARS_DEFAULT)
    return [
        {"messageId": m.get("id"), "content": k.content}
        for (m, _), k in zip(newest, kept, strict=False)
    ][::-1]


async def sample_ms(run: Callable[[], Awaitable[Any]], times: int) -> list[float]:
    samples = []
    for _ in range(times):
        start = time.perf_counter()
        await run()
        samples.append((time.perf_counter() - start) * 1000)
    return samples


async def prepare(
    url: str, json_dir: Path, sizes: tuple[int, ...] = SIZES
) -> tuple[Store, dict[int, Source]]:
    """A migrated store holding one conversation of each size, its JSON files in ``json_dir``
    (written once per size), and the source of each conversation; the caller disposes the store.
    """
    engine = create_engine(url)
    await migrate(engine)
    await engine.dispose()
    store = Store.from_settings(Settings(database_url=url, token=None))
    try:
        sources = {}
        for size in sizes:
            messages = conversation_messages(size)
            sources[size] = Source(await fill(store, size, messages))
            if not (json_dir / f"bench-{size}.json").exists():
                write_json_session(json_dir, size, messages)
            del messages
        async with store.engine.begin() as connection:
            await connection.exec_driver_sql("ANALYZE")
        for size in sizes:
            payload = await list_user_inputs(store, sources[size], ListUserInputs())
            from_json = list_from_json_file(json_dir / f"bench-{size}.json")
            assert [i.message_id for i in payload.inputs] == [i["messageId"] for i in from_json], (
                "the SQL and JSON approaches must agree"
            )
    except BaseException:
        await store.dispose()
        raise
    return store, sources


async def sql_round(store: Store, sources: dict[int, Source], runs: int) -> dict[int, list[float]]:
    """``runs`` timed calls of the tool (default arguments) per conversation, in milliseconds."""
    return {
        size: await sample_ms(lambda s=source: list_user_inputs(store, s, ListUserInputs()), runs)
        for size, source in sources.items()
    }


def json_sample_ms(json_dir: Path, size: int) -> float:
    """Milliseconds cc-web's approach takes once on the conversation of ``size`` messages."""
    path = json_dir / f"bench-{size}.json"
    start = time.perf_counter()
    list_from_json_file(path)
    return (time.perf_counter() - start) * 1000


async def bench_backend(label: str, url: str, json_dir: Path) -> None:
    store, sources = await prepare(url, json_dir)
    sql_samples: dict[int, list[float]] = {size: [] for size in SIZES}
    json_samples: dict[int, list[float]] = {size: [] for size in SIZES}
    try:
        # Rounds interleave the sizes, so drift on a shared machine hits every size alike.
        gc.collect()
        for _ in range(SQL_ROUNDS):
            for size, samples in (await sql_round(store, sources, SQL_RUNS_PER_ROUND)).items():
                sql_samples[size] += samples
        for _ in range(JSON_RUNS):
            for size in SIZES:
                json_samples[size].append(json_sample_ms(json_dir, size))
    finally:
        await store.dispose()
    sql_ms = {size: statistics.median(sql_samples[size]) for size in SIZES}
    json_ms = {size: statistics.median(json_samples[size]) for size in SIZES}

    print(f"\n{label}: median latency of ccweb_list_user_inputs (default arguments)")
    print(f"{'messages':>10} {'SQL (ms)':>10} {'JSON file (ms)':>15} {'JSON / SQL':>11}")
    for size in SIZES:
        ratio = json_ms[size] / sql_ms[size]
        print(f"{size:>10,} {sql_ms[size]:>10.3f} {json_ms[size]:>15.1f} {ratio:>10.0f}×")
    growth = sql_ms[SIZES[-1]] / sql_ms[SIZES[0]]
    speedup = json_ms[SIZES[-1]] / sql_ms[SIZES[-1]]
    print(f"SQL 100k / 1k latency: {growth:.2f}× (target ≤ 1.3×) {_verdict(growth <= 1.3)}")
    print(
        f"JSON / SQL at 100k:    {speedup:.0f}× (target ≥ {TARGET_SPEEDUP}×)"
        f" {_verdict(speedup >= TARGET_SPEEDUP)}"
    )


def _verdict(met: bool) -> str:
    return "met" if met else "MISSED"


async def main() -> None:
    with tempfile.TemporaryDirectory(prefix="ccweb-bench-") as tmp:
        directory = Path(tmp)
        await bench_backend("SQLite", f"sqlite+aiosqlite:///{directory / 'bench.db'}", directory)
        server_url = os.environ.get("CCWEB_BENCH_POSTGRES_URL")
        if not server_url:
            print("\n(PostgreSQL skipped: set CCWEB_BENCH_POSTGRES_URL to a server URL)")
            return
        name = f"ccweb_bench_{uuid.uuid4().hex[:8]}"
        url = await create_database(server_url, name)
        try:
            await bench_backend("PostgreSQL", url, directory)
        finally:
            await drop_database(server_url, name)


if __name__ == "__main__":
    asyncio.run(main())
