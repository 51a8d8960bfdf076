"""A team's year: the console, the debugging views and the host API on a database of a
team's year, each as a ratio to the same on a small database measured in the same run, on
SQLite and PostgreSQL.

Builds both databases (``bench/team_data.py``: 10,000 conversations, 1,010,000 messages,
50,000 reply requests of which 550 open, 100,000 finished runs, 500 queued; the small one
100 conversations) in SQLite files with ``sqlite3.executemany``, and copies each to a scratch
PostgreSQL database with ``copy`` (which analyzes what it wrote). Then, per engine:

- in process, rounds that measure each read on the big database then on the small one: the
  console's overview, a filtered list (``?state=ready``, ``?conversation=``), a conversation
  page (``LONG`` messages, in both), the debugging views, ``operator.conversations``,
  ``session.list`` and ``run.claim`` (each claimed run put back by SQL, unmeasured);
- through a server process and the bundled worker (``--command 'sleep 1'``, 64 at once):
  64 runs queued at once until the last has finished, with and without an open console tab
  (a client that follows ``/events`` and reads the overview again as ``console.js`` does: at
  most once a second);
- on PostgreSQL, the CPU an idle server costs (the server process and its database
  backends) over ``--idle-seconds``, big against small.

    CCWEB_BENCH_POSTGRES_URL=postgresql+asyncpg://root@127.0.0.1:5432/test \\
        .venv/bin/python bench/team_year.py                  # both engines, ~15 minutes
    .venv/bin/python bench/team_year.py --quick              # checks that it runs
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import httpx
import sqlalchemy as sa

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from bench import team_data  # noqa: E402
from bench.harness import ServerProcess, process_cpu_seconds  # noqa: E402
from bench.scratch_databases import create_database, drop_database  # noqa: E402
from ccweb_store.config import Settings  # noqa: E402
from ccweb_store.contract.operator import OperatorConversations  # noqa: E402
from ccweb_store.contract.runs import ClaimRun  # noqa: E402
from ccweb_store.contract.sessions import ListSessions  # noqa: E402
from ccweb_store.http.app import create_app  # noqa: E402
from ccweb_store.mobility.copy import copy_database  # noqa: E402
from ccweb_store.services import operator  # noqa: E402
from ccweb_store.services.conversations import list_sessions  # noqa: E402
from ccweb_store.services.runs import claim_run  # noqa: E402
from ccweb_store.store.db import create_engine, migrate  # noqa: E402
from ccweb_store.store.uow import Store  # noqa: E402

HTML = {"Accept": "text/html"}
#: The goals (ratios, big over small, one run).
READ_GOAL, TAB_GOAL, IDLE_GOAL = 1.5, 1.2, 1.5
#: Runs queued at once for the worker, and its slots (``--quick``: fewer).
CONCURRENT_RUNS, QUICK_RUNS = 64, 8
PUT_BACK = sa.text(
    "UPDATE runs SET status = 'queued', worker_id = NULL, lease_expires_at = NULL, "
    "started_at = NULL, attempts = 0 WHERE id = :id"
)


# --- the reads, in process --------------------------------------------------------------------


Call = Callable[[], Awaitable[float | None]]


def timed(call: Callable[[], Awaitable[Any]]) -> Call:
    async def run() -> float | None:
        await call()
        return None

    return run


async def facts(store: Store) -> dict[str, Any]:
    """What the reads need to name: a conversation with an open request, the session.list
    cursor of a page from the middle."""
    async with store.engine.connect() as connection:
        target = (
            await connection.execute(
                sa.text(
                    "SELECT target_conversation_id FROM reply_requests WHERE status = 'waiting' "
                    "ORDER BY created_at LIMIT 1"
                )
            )
        ).scalar_one()
        count = (await connection.execute(sa.text("SELECT COUNT(*) FROM sessions"))).scalar_one()
    page = await list_sessions(store, ListSessions(limit=max(1, count // 2)))
    return {"target": target, "middle": page.next_cursor}


@asynccontextmanager
async def console(store: Store) -> AsyncIterator[httpx.AsyncClient]:
    """The app in process over ``store`` (no token: every page shows its data)."""
    app = create_app(store.settings, store=store, migrate_on_start=False)
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://127.0.0.1:8787") as client:
        yield client


def reads(store: Store, client: httpx.AsyncClient, named: dict[str, Any]) -> dict[str, Call]:
    async def page(path: str) -> None:
        answer = await client.get(path, headers=HTML)
        assert answer.status_code == 200, (path, answer.text[:300])

    async def sql(text: str) -> None:
        async with store.engine.connect() as connection:
            (await connection.execute(sa.text(text))).all()

    async def claim() -> float:
        start = time.perf_counter()
        claimed = await claim_run(store, ClaimRun(worker_id="bench", kinds=["user_turn"]))
        elapsed = time.perf_counter() - start
        assert claimed.run is not None
        async with store.engine.begin() as connection:
            await connection.execute(PUT_BACK, {"id": claimed.run.id})
        return elapsed

    target = named["target"]
    return {
        "console overview `/`": timed(lambda: page("/")),
        "console filtered list `/?state=ready`": timed(lambda: page("/?state=ready")),
        "console filtered list `/?conversation=ID`": timed(
            lambda: page(f"/?conversation={target}")
        ),
        f"console conversation page ({team_data.LONG:,} messages)": timed(
            lambda: page("/console/conversations/long")
        ),
        "`conversation_activity`, 20 most recently active": timed(
            lambda: sql(
                "SELECT * FROM conversation_activity ORDER BY last_message_at DESC LIMIT 20"
            )
        ),
        "`pending_replies` of one conversation": timed(
            lambda: sql(
                "SELECT * FROM pending_replies WHERE target_conversation_id = "
                f"'{target}' OR source_conversation_id = '{target}'"
            )
        ),
        "`operator.conversations` (100, with their activity)": timed(
            lambda: operator.list_conversations(store, OperatorConversations(limit=100))
        ),
        "`session.list` page from the middle": timed(
            lambda: list_sessions(store, ListSessions(limit=50, cursor=named["middle"]))
        ),
        "`run.claim`": claim,
    }


async def round_ms(call: Call, calls: int) -> float:
    """The median milliseconds of ``calls`` calls (a call may time itself)."""
    samples = []
    for _ in range(calls):
        start = time.perf_counter()
        own = await call()
        samples.append((own if own is not None else time.perf_counter() - start) * 1000)
    return statistics.median(samples)


async def read_rows(big_url: str, small_url: str, rounds: int, calls: int) -> list[Row]:
    stores = [Store.from_settings(Settings(database_url=url)) for url in (big_url, small_url)]
    try:
        named = [await facts(store) for store in stores]
        async with console(stores[0]) as big_client, console(stores[1]) as small_client:
            big = reads(stores[0], big_client, named[0])
            small = reads(stores[1], small_client, named[1])
            for call in (*big.values(), *small.values()):
                await round_ms(call, 3)  # warm-up
            rows = []
            for name in big:
                pairs = []
                for _ in range(rounds):
                    pairs.append(
                        (await round_ms(big[name], calls), await round_ms(small[name], calls))
                    )
                rows.append(Row.of(name, pairs, READ_GOAL))
            overview = [
                len((await client.get("/", headers=HTML)).content)
                for client in (big_client, small_client)
            ]
            rows.append(Row.note("console overview, bytes", overview[0], overview[1]))
            return rows
    finally:
        for store in stores:
            await store.dispose()


# --- the runs, through a server process and the worker ------------------------------------


async def rpc(client: httpx.AsyncClient, method: str, params: dict[str, Any]) -> Any:
    answer = await client.post(
        "/rpc", json={"jsonrpc": "2.0", "id": 1, "method": method, "params": params}
    )
    body = answer.json()
    assert "error" not in body, body
    return body["result"]


async def finished_runs(url: str, ready: asyncio.Event, seen: asyncio.Queue[str]) -> None:
    """Put the id of every run that finishes from now on in ``seen``."""
    async with (
        httpx.AsyncClient(base_url=url, timeout=None) as client,
        client.stream("GET", "/events?types=run.finished") as stream,
    ):
        ready.set()
        async for line in stream.aiter_lines():
            if line.startswith("data:"):
                await seen.put(json.loads(line[5:])["runId"])


async def open_tab(url: str, reads_done: list[int]) -> None:
    """A console tab: follows ``/events`` and reads the overview again at most once a
    second, as ``console.js`` does."""
    stale = asyncio.Event()

    async def follow() -> None:
        async with (
            httpx.AsyncClient(base_url=url, timeout=None) as client,
            client.stream("GET", "/events") as stream,
        ):
            async for line in stream.aiter_lines():
                if line.startswith("data:"):
                    stale.set()

    async def read_again() -> None:
        async with httpx.AsyncClient(base_url=url, timeout=60) as client:
            while True:
                await stale.wait()
                stale.clear()
                started = time.monotonic()
                await client.get("/", headers=HTML)
                reads_done[0] += 1
                await asyncio.sleep(max(0.0, 1.0 - (time.monotonic() - started)))

    await asyncio.gather(follow(), read_again())


async def batch_seconds(url: str, conversations: list[str], with_tab: bool) -> float:
    """Seconds from queueing a run in each of ``conversations`` at once until the last one
    finished (with an open console tab, if ``with_tab``)."""
    seen: asyncio.Queue[str] = asyncio.Queue()
    ready = asyncio.Event()
    reads_done = [0]
    watcher = asyncio.create_task(finished_runs(url, ready, seen))
    tab = asyncio.create_task(open_tab(url, reads_done)) if with_tab else None
    await ready.wait()
    await asyncio.sleep(0.5)  # the tab's first read
    try:
        async with httpx.AsyncClient(base_url=url, timeout=60) as client:
            start = time.perf_counter()
            queued = await asyncio.gather(
                *(
                    rpc(client, "run.enqueue", {"sessionId": sid, "kind": "cross_conversation"})
                    for sid in conversations
                )
            )
            left = {run["id"] for run in queued}
            while left:
                left.discard(await asyncio.wait_for(seen.get(), 120))
            return time.perf_counter() - start
    finally:
        for task in (watcher, tab):
            if task is not None:
                task.cancel()


def start_worker(url: str, seconds: float, slots: int) -> subprocess.Popen[bytes]:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    env.pop("CCWEB_TOKEN", None)
    command = [
        sys.executable, "-m", "ccweb_store", "worker", "--url", url,
        "--command", f"sleep {seconds}; echo done", "--concurrency", str(slots),
        "--kind", "cross_conversation", "--log-level", "warning",
    ]  # fmt: skip
    return subprocess.Popen(
        command, cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )


async def tab_row(
    label: str, database_url: str, conversations: list[str], rounds: int, work: float
) -> Row:
    server = ServerProcess(database_url).start()
    url = f"http://127.0.0.1:{server.port}"
    worker = start_worker(url, work, len(conversations))
    try:
        await batch_seconds(url, conversations, with_tab=False)  # warm-up
        pairs = []
        for _ in range(rounds):
            without = await batch_seconds(url, conversations, with_tab=False)
            with_tab = await batch_seconds(url, conversations, with_tab=True)
            pairs.append((with_tab * 1000, without * 1000))
    finally:
        worker.terminate()
        worker.wait(timeout=60)
        server.stop()
    return Row.of(
        f"{len(conversations)} concurrent runs of {work:g} s, with an open console tab vs without "
        f"(team's year), {label}",
        pairs,
        TAB_GOAL,
        sides=(" with the tab", " without"),
    )


# --- idle CPU on PostgreSQL ---------------------------------------------------------------


async def backends(database_url: str) -> list[int]:
    """The pids of the other connections to the database (the server's)."""
    engine = create_engine(database_url)
    try:
        async with engine.connect() as connection:
            rows = await connection.execute(
                sa.text(
                    "SELECT pid FROM pg_stat_activity WHERE datname = current_database() "
                    "AND pid <> pg_backend_pid()"
                )
            )
            return [int(pid) for (pid,) in rows]
    finally:
        await engine.dispose()


async def idle_cpu(database_url: str, seconds: float, settle: float) -> float:
    """The share of a core an idle server costs: its process and its database backends."""
    server = ServerProcess(database_url).start()
    try:
        await asyncio.sleep(settle)  # the first upkeep passes: what the runs above left
        pids = [server.pid, *await backends(database_url)]
        before = {pid: process_cpu_seconds(pid) or 0.0 for pid in pids}
        await asyncio.sleep(seconds)
        pids = [server.pid, *await backends(database_url)]
        used = sum((process_cpu_seconds(pid) or 0.0) - before.get(pid, 0.0) for pid in pids)
    finally:
        server.stop()
    return used / seconds


# --- the table ----------------------------------------------------------------------------


def _ratio(ours: float, peer: float) -> float:
    """``ours / peer``; a peer measured as nothing (an idle process in a short run) compares
    as even when ours is nothing too, and as unbounded otherwise."""
    if peer > 0:
        return ours / peer
    return 1.0 if ours <= 0 else math.inf


class Row:
    def __init__(self, name: str, big: str, small: str, ratio: str, goal: str, verdict: str):
        self.cells = (name, big, small, ratio, goal, verdict)

    @classmethod
    def of(
        cls,
        name: str,
        pairs: list[tuple[float, float]],
        goal: float,
        unit: str = "ms",
        sides: tuple[str, str] = ("", ""),
    ) -> Row:
        """A ratio row: ``pairs`` of (measured, peer), one a round; ``sides`` name them when
        they are not the two databases."""
        ratios = [_ratio(ours, peer) for ours, peer in pairs]
        ratio = statistics.median(ratios)
        ours = statistics.median(ours for ours, _ in pairs)
        peer = statistics.median(peer for _, peer in pairs)
        shown = f"{ratio:.2f} ({min(ratios):.2f}–{max(ratios):.2f})"
        verdict = "met" if ratio <= goal else "**not met**"
        cells = (f"{ours:,.1f} {unit}{sides[0]}", f"{peer:,.1f} {unit}{sides[1]}")
        return cls(name, *cells, shown, f"≤ {goal}×", verdict)

    @classmethod
    def note(cls, name: str, big: float, small: float) -> Row:
        return cls(name, f"{big:,.0f}", f"{small:,.0f}", f"{big / small:.2f}", "—", "")

    def line(self) -> str:
        return "| " + " | ".join(self.cells) + " |"


async def build(
    work: Path, server: str | None, sizes: dict[str, team_data.Size]
) -> dict[str, dict[str, str]]:
    """Each database, per engine: ``{"SQLite": {"big": url, …}, "PostgreSQL": {…}}``."""
    urls: dict[str, dict[str, str]] = {"SQLite": {}, "PostgreSQL": {}}
    for name, size in sizes.items():
        url = f"sqlite+aiosqlite:///{work / f'{name}.db'}"
        engine = create_engine(url)
        await migrate(engine)
        await engine.dispose()
        start = time.perf_counter()
        team_data.generate(work / f"{name}.db", size)
        print(f"{name}: {size.shown()}; SQLite in {time.perf_counter() - start:.0f} s", flush=True)
        urls["SQLite"][name] = url
        if server is not None:
            target = await create_database(server, f"ccweb_team_{uuid.uuid4().hex[:8]}_{name}")
            start = time.perf_counter()
            source, copy = (Store.from_settings(Settings(database_url=u)) for u in (url, target))
            try:
                report = await copy_database(source, copy)
            finally:
                await source.dispose()
                await copy.dispose()
            assert report.ok, report.as_json()
            print(
                f"{name}: copied to PostgreSQL in {time.perf_counter() - start:.0f} s", flush=True
            )
            urls["PostgreSQL"][name] = target
    return urls


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--calls", type=int, default=20, help="calls per read per round")
    parser.add_argument("--idle-seconds", type=float, default=20)
    parser.add_argument("--quick", action="store_true", help="tiny sizes: checks that it runs")
    args = parser.parse_args()
    sizes = {"big": team_data.TEAM_YEAR, "small": team_data.SMALL}
    work_seconds, concurrent, settle = 1.0, CONCURRENT_RUNS, 3.0
    if args.quick:
        sizes = {"big": team_data.QUICK_BIG, "small": team_data.QUICK_SMALL}
        args.rounds, args.calls, args.idle_seconds = 1, 3, 1
        work_seconds, concurrent, settle = 0.1, QUICK_RUNS, 1.0
    server = os.environ.get("CCWEB_BENCH_POSTGRES_URL")
    work = Path(tempfile.mkdtemp(prefix="ccweb-team-"))
    urls: dict[str, dict[str, str]] = {}
    try:
        urls = await build(work, server, sizes)
        rows: list[Row] = []
        for engine, by_size in urls.items():
            if not by_size:
                continue
            for row in await read_rows(by_size["big"], by_size["small"], args.rounds, args.calls):
                row.cells = (f"{row.cells[0]}, {engine}", *row.cells[1:])
                rows.append(row)
            idle = [team_data.conversation_id(n) for n in range(sizes["big"].conversations)]
            conversations = idle[sizes["big"].queued_runs :][:concurrent]
            rows.append(
                await tab_row(engine, by_size["big"], conversations, args.rounds, work_seconds)
            )
        if urls["PostgreSQL"]:
            big = await idle_cpu(urls["PostgreSQL"]["big"], args.idle_seconds, settle)
            small = await idle_cpu(urls["PostgreSQL"]["small"], args.idle_seconds, settle)
            row = Row.of(
                "idle server CPU (its process and backends), PostgreSQL",
                [(big * 100, small * 100)],
                IDLE_GOAL,
                unit="% of a core",
            )
            rows.append(row)
        print("\n| row | team's year | small | ratio (min–max) | goal | |")
        print("|---|---|---|---|---|---|")
        for row in rows:
            print(row.line())
    finally:
        for name in urls.get("PostgreSQL", {}).values():
            assert server is not None
            await drop_database(server, name.rsplit("/", 1)[1])
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    asyncio.run(main())
