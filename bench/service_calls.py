"""The service layer alone: round trips as direct calls, no HTTP, on a fresh SQLite file.

One source conversation and four targets; each round trip is ``ccweb_send_message``
(``return_and_continue``) → ``run.claim`` → ``run.complete`` called in process, one after the
other, and checked to have returned the reply. After a warm-up, prints the mean milliseconds
per round trip, the split between the three calls, and the CPU time the process spent per
round trip (its threads included). This is what `bench/roundtrip.py`
measures minus HTTP and concurrency, with less noise, so it is the figure to compare two
versions of the code by (run them interleaved, several times, and compare the minimums).

    python bench/service_calls.py [--round-trips 600] [--database-url URL]
    python bench/service_calls.py --sends 4000 [--clients 8]   # sends alone (below)
    CCWEB_BENCH_POSTGRES_URL=postgresql+asyncpg://root@127.0.0.1:5432/test \\
        python bench/service_calls.py --backend postgres   # a scratch database there

``--sends N`` measures ``ccweb_send_message`` (``return_and_continue``) alone, as
`bench/compare.py`'s send row calls it over HTTP: ``--clients`` concurrent loops (8) on one
event loop, each call from one source to a target that has never been sent to (a busy target
refuses), so SQLite's writer groups their commits as the server does. It prints the process's
CPU per send: the service's share of the send row's server CPU.

On PostgreSQL the figure is the wall time of calls that wait for the server, one after the
other: it includes the server's own work and every network round trip.
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import os
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

import sqlalchemy as sa

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.scratch_databases import create_database, drop_database  # noqa: E402
from ccweb_store.config import Settings  # noqa: E402
from ccweb_store.contract.runs import ClaimRun, CompleteRun  # noqa: E402
from ccweb_store.contract.sessions import CreateSession  # noqa: E402
from ccweb_store.domain.context import Source  # noqa: E402
from ccweb_store.domain.kinds import RunKind, RunStatus  # noqa: E402
from ccweb_store.protocol import registry as tools  # noqa: E402
from ccweb_store.services import conversations, runs  # noqa: E402
from ccweb_store.store.db import migrate  # noqa: E402
from ccweb_store.store.models import SessionRow  # noqa: E402
from ccweb_store.store.uow import Store  # noqa: E402

WARM_UP = 100
TARGETS = 4


async def send(store: Store, source: Source, target: str) -> dict[str, Any]:
    """``ccweb_send_message`` (``return_and_continue``) from ``source`` to ``target``, as the
    benchmarks over HTTP send it."""
    return await tools.call_tool(
        store,
        source,
        "ccweb_send_message",
        {
            "targetConversationId": target,
            "content": "Run the tests and report back.",
            "replyMode": "return_and_continue",
        },
    )


async def measure(url: str, round_trips: int) -> dict[str, float]:
    store = Store.from_settings(Settings(database_url=url))
    try:
        await migrate(store.engine)
        await conversations.create_session(store, CreateSession(id="src", title="Source"))
        targets = [f"tgt-{i}" for i in range(TARGETS)]
        for target in targets:
            await conversations.create_session(store, CreateSession(id=target, title=target))
        source = Source("src", 0)
        spent = {"send": 0.0, "claim": 0.0, "complete": 0.0}

        async def one(target: str) -> None:
            began = time.perf_counter()
            await send(store, source, target)
            sent = time.perf_counter()
            claimed = await runs.claim_run(
                store, ClaimRun(worker_id="w", kinds=[RunKind.CROSS_CONVERSATION])
            )
            leased = time.perf_counter()
            done = await runs.complete_run(
                store,
                CompleteRun(
                    run_id=claimed.run.id,
                    worker_id="w",
                    status=RunStatus.COMPLETED,
                    output="All pass.",
                ),
            )
            finished = time.perf_counter()
            if [reply.status for reply in done.replies] != ["returned"]:
                raise RuntimeError(f"reply not returned: {done.replies}")
            spent["send"] += sent - began
            spent["claim"] += leased - sent
            spent["complete"] += finished - leased

        for target in itertools.islice(itertools.cycle(targets), WARM_UP):
            await one(target)
        spent = dict.fromkeys(spent, 0.0)
        cpu_before = time.process_time()
        for target in itertools.islice(itertools.cycle(targets), round_trips):
            await one(target)
        spent["cpu"] = time.process_time() - cpu_before
    finally:
        await store.dispose()
    return {name: seconds / round_trips * 1000 for name, seconds in spent.items()}


async def measure_sends(url: str, sends: int, clients: int) -> dict[str, float]:
    """``sends`` sends from ``clients`` concurrent loops, after a warm-up, each to a fresh
    target: milliseconds of wall and process CPU per send."""
    store = Store.from_settings(Settings(database_url=url))
    try:
        await migrate(store.engine)
        await conversations.create_session(store, CreateSession(id="src", title="Source"))
        targets = [f"tgt-{i}" for i in range(sends + WARM_UP * clients)]
        async with store.engine.begin() as connection:
            await connection.execute(
                sa.insert(SessionRow), [{"id": t, "title": f"Target {t}"} for t in targets]
            )
        source = Source("src", 0)
        queue = iter(targets)

        async def loop(count: int) -> None:
            for target in itertools.islice(queue, count):
                result = await send(store, source, target)
                if result.get("status") != "waiting":
                    raise RuntimeError(f"send failed: {result}")

        await asyncio.gather(*(loop(WARM_UP) for _ in range(clients)))
        per_client = sends // clients
        wall_before, cpu_before = time.perf_counter(), time.process_time()
        await asyncio.gather(*(loop(per_client) for _ in range(clients)))
        wall, cpu = time.perf_counter() - wall_before, time.process_time() - cpu_before
    finally:
        await store.dispose()
    done = per_client * clients
    return {"wall": wall / done * 1000, "cpu": cpu / done * 1000}


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--round-trips", type=int, default=600, help="measured round trips")
    parser.add_argument(
        "--sends", type=int, help="measure this many sends alone instead of round trips"
    )
    parser.add_argument("--clients", type=int, default=8, help="concurrent loops of --sends")
    parser.add_argument("--database-url", help="default: a SQLite file in a temporary directory")
    parser.add_argument(
        "--backend",
        choices=["sqlite", "postgres"],
        default="sqlite",
        help="postgres: a scratch database on CCWEB_BENCH_POSTGRES_URL's server",
    )
    options = parser.parse_args()
    server = os.environ.get("CCWEB_BENCH_POSTGRES_URL")
    if options.backend == "postgres" and not server:
        parser.error("--backend postgres needs CCWEB_BENCH_POSTGRES_URL")
    with tempfile.TemporaryDirectory() as tmp:
        if options.sends:
            url = options.database_url or f"sqlite+aiosqlite:///{tmp}/service_calls.db"
            if options.backend == "postgres" and server and not options.database_url:
                name = f"ccweb_bench_{uuid.uuid4().hex[:8]}"
                url = asyncio.run(create_database(server, name))
                try:
                    sent = asyncio.run(measure_sends(url, options.sends, options.clients))
                finally:
                    asyncio.run(drop_database(server, name))
            else:
                sent = asyncio.run(measure_sends(url, options.sends, options.clients))
            print(
                f"{options.sends} sends in process, {options.clients} loops: "
                f"{sent['wall']:.3f} ms each; this process's CPU: {sent['cpu']:.3f} ms per send"
            )
            return
        if options.backend == "postgres" and server and not options.database_url:
            name = f"ccweb_bench_{uuid.uuid4().hex[:8]}"
            url = asyncio.run(create_database(server, name))
            try:
                per_call = asyncio.run(measure(url, options.round_trips))
            finally:
                asyncio.run(drop_database(server, name))
        else:
            url = options.database_url or f"sqlite+aiosqlite:///{tmp}/service_calls.db"
            per_call = asyncio.run(measure(url, options.round_trips))
    cpu = per_call.pop("cpu")
    total = sum(per_call.values())
    split = ", ".join(f"{name} {ms:.2f}" for name, ms in per_call.items())
    print(
        f"{options.round_trips} round trips in process: {total:.2f} ms each ({split});"
        f" this process's CPU: {cpu:.2f} ms per round trip"
    )


if __name__ == "__main__":
    main()
