"""Round trips per second through a real server, against a bare Starlette ceiling.

A round trip is what one cross-conversation request costs the service:
``ccweb_send_message`` (``return_and_continue``) over ``/mcp`` → ``run.claim`` →
``run.complete`` over ``/rpc``, which delivers the reply to the source and queues its auto-run.

In the same run the script serves a bare Starlette JSON endpoint with the same uvicorn
settings and measures plain requests per second with the same client concurrency: the
ceiling that HTTP and the client allow on this machine. A round trip is three requests,
so the ratio compares round trips/s with a third of the ceiling, and each backend's goal
(``GOALS``) is a least ratio.

``round_trips`` drives either the service (``SERVICE``) or, for ``compare.py``'s floor row,
the aiosqlite floor (``FLOOR``, ``floor.py``): the same three requests, whose SQL the floor
runs straight on aiosqlite. On SQLite, ``compare.py`` meets ``GOALS`` only where the floor's
own round trips reach it; otherwise it holds the round trip to ≥ 0.8 of the floor.

The client (``harness.Client``) is a few lines of HTTP/1.1 on ``asyncio`` streams, one
keep-alive connection per client loop, so that it costs far less CPU than the server it
measures. Next to each rate the script prints the server process's CPU time per round trip
(per request for the ceiling), from ``/proc/<pid>/stat`` (Linux only), and the client's own
CPU time per request.

With ``--processes 1,2,4``, each backend is also served by that many server processes on
one database, the same client loops shared among them, one measurement per count: what
scaling out gives (a table of round trips/s per count, and each against one process). On a
machine of few cores the processes share them with the client and the database, which is
then the limit; what the table shows is that nothing in the service itself makes the
processes take turns.

    python bench/roundtrip.py [--seconds 10] [--clients 8] [--backend sqlite|postgres|all]
                              [--processes 1,2,4]
    CCWEB_BENCH_POSTGRES_URL=postgresql+asyncpg://root@127.0.0.1:5432/test python bench/roundtrip.py
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import os
import tempfile
import time
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from harness import (
    Client,
    Usage,
    free_port,
    measure,
    ping,
    postgres_database,
    repeat,
    serve_ccweb,
    serve_ceiling,
    servers,
    stop,
)

#: The goals per backend: round trips/s at least this share of the ceiling's three-request
#: round trips/s (a third of its requests/s), measured in the same run. A ratio, since what
#: slows a machine slows both sides, where a rate moves with the machine.
GOALS = {"SQLite": 0.13, "PostgreSQL": 0.08}


@dataclass
class Result:
    count: int  # round trips, or requests for the ceiling
    requests: int
    refused: int
    usage: Usage


TARGETS_PER_CLIENT = 4
SENT = "Run the tests and report back."


async def send_call(client: Client, source: str, target: str) -> dict[str, Any]:
    """``tools/call`` of ``ccweb_send_message`` (``return_and_continue``) from ``source`` to
    ``target``: the tool's result."""
    arguments = {
        "targetConversationId": target,
        "content": SENT,
        "replyMode": "return_and_continue",
    }
    result: dict[str, Any] = await client.call(
        f"/mcp?sourceSessionId={source}",
        "tools/call",
        {"name": "ccweb_send_message", "arguments": arguments},
    )
    return result


OUTPUT = "All 42 tests pass."


class Service:
    """The three requests of a round trip through ccweb-store (and the conversations' setup)."""

    async def create(self, rpc: Client, session_id: str, title: str) -> None:
        await rpc.call("/rpc", "session.create", {"id": session_id, "title": title})

    async def send(self, rpc: Client, source: str, target: str) -> bool:
        """Whether the send went through (False: ``target_busy``)."""
        call = await send_call(rpc, source, target)
        if call.get("isError"):
            if call["structuredContent"]["error"]["code"] != "target_busy":
                raise RuntimeError(f"send failed: {call['structuredContent']}")
            return False
        return True

    async def claim(self, rpc: Client, worker: str) -> str | None:
        claimed = await rpc.call(
            "/rpc", "run.claim", {"workerId": worker, "kinds": ["cross_conversation"]}
        )
        return None if claimed["run"] is None else str(claimed["run"]["id"])

    async def complete(self, rpc: Client, run_id: str, worker: str) -> list[str]:
        """The statuses of the replies the completion moved."""
        params = {"runId": run_id, "workerId": worker, "status": "completed", "output": OUTPUT}
        completed = await rpc.call("/rpc", "run.complete", params)
        return [reply["status"] for reply in completed["replies"]]


class Floor(Service):
    """The same three requests to the aiosqlite floor (``floor.py``): its ``/send``,
    ``/claim`` and ``/complete`` run the statements the service's run on SQLite."""

    async def create(self, rpc: Client, session_id: str, title: str) -> None:
        await rpc.call("/session", "session", {"id": session_id, "title": title})

    async def send(self, rpc: Client, source: str, target: str) -> bool:
        sent = await rpc.call(
            "/send", "send", {"source": source, "target": target, "content": SENT}
        )
        return bool(sent.get("refused") != "target_busy")

    async def claim(self, rpc: Client, worker: str) -> str | None:
        claimed = await rpc.call(
            "/claim", "claim", {"workerId": worker, "kind": "cross_conversation"}
        )
        return None if claimed["run"] is None else str(claimed["run"]["id"])

    async def complete(self, rpc: Client, run_id: str, worker: str) -> list[str]:
        params = {"runId": run_id, "workerId": worker, "output": OUTPUT}
        completed = await rpc.call("/complete", "complete", params)
        return [reply["status"] for reply in completed["replies"]]


SERVICE, FLOOR = Service(), Floor()


async def round_trips(
    port: int | Sequence[int],
    server_pid: int | Sequence[int],
    seconds: float,
    clients: int,
    steps: Service = SERVICE,
) -> Result:
    """Run ``clients`` concurrent loops of send → claim → complete, one connection each,
    through ``steps`` (the service, or the aiosqlite floor). Given several ports (server
    processes on one database), the loops take them in turn, and the server CPU is theirs
    together.

    Workers claim the oldest queued run, which is not necessarily the one their own loop
    just sent, so each loop rotates over a few targets of its own: a target whose run is still
    queued or running refuses the send (``target_busy``, counted) and the loop moves on. The
    source's ``reply_auto_run`` that each completion queues stays queued: workers claim
    ``cross_conversation`` runs only.
    """
    ports = [port] if isinstance(port, int) else list(port)
    connections = [await Client.connect(ports[i % len(ports)]) for i in range(clients)]
    loops = []
    for i, rpc in enumerate(connections):
        tag = uuid.uuid4().hex[:8]
        source = f"src-{i}-{tag}"
        await steps.create(rpc, source, f"Source {i}")
        targets = [f"tgt-{i}-{j}-{tag}" for j in range(TARGETS_PER_CLIENT)]
        for j, target in enumerate(targets):
            await steps.create(rpc, target, f"Target {i}.{j}")
        loops.append((rpc, source, targets))

    done = refused = 0
    deadline = time.perf_counter() + seconds

    async def loop(worker: int, rpc: Client, source: str, targets: list[str]) -> None:
        nonlocal done, refused
        for target in itertools.cycle(targets):
            if time.perf_counter() >= deadline:
                return
            if not await steps.send(rpc, source, target):
                refused += 1
                continue
            run_id = await steps.claim(rpc, f"w{worker}")
            if run_id is None:
                continue
            statuses = await steps.complete(rpc, run_id, f"w{worker}")
            if statuses != ["returned"]:
                raise RuntimeError(f"reply not returned: {statuses}")
            done += 1

    requests, usage = await measure(
        server_pid, connections, [loop(i, *arguments) for i, arguments in enumerate(loops)]
    )
    for rpc in connections:
        await rpc.close()
    return Result(done, requests, refused, usage)


async def ceiling(port: int, server_pid: int, seconds: float, clients: int) -> Result:
    requests, usage = await repeat(port, server_pid, seconds, clients, ping)
    return Result(requests, requests, 0, usage)


def cpu(usage: Usage, per: int, unit: str, requests: int, note: str = "") -> str:
    """The server's CPU time per ``unit`` and the client's per request, as one phrase."""
    if usage.server_cpu is None:
        server = "server CPU not measured (no /proc/<pid>/stat on this system)"
    else:
        server = (
            f"server CPU {usage.server_cpu / max(per, 1) * 1000:.2f} ms/{unit}"
            f" ({usage.server_cpu / usage.wall:.0%} of a core{note})"
        )
    client = (
        f"client CPU {usage.client_cpu / max(requests, 1) * 1000:.2f} ms/request"
        f" ({usage.client_cpu / usage.wall:.0%} of a core)"
    )
    return f"{server}; {client}"


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--seconds", type=float, default=10.0, help="measuring time per backend")
    parser.add_argument("--clients", type=int, default=8, help="concurrent client loops")
    parser.add_argument(
        "--backend",
        choices=["sqlite", "postgres", "all"],
        default="all",
        help="all: SQLite, and PostgreSQL when CCWEB_BENCH_POSTGRES_URL is set",
    )
    parser.add_argument(
        "--processes",
        type=process_counts,
        default=None,
        metavar="N,N,…",
        help="also measure each backend served by N server processes on one database, per N"
        " (e.g. 1,2,4)",
    )
    options = parser.parse_args()
    pg = os.environ.get("CCWEB_BENCH_POSTGRES_URL")
    if options.backend == "postgres" and not pg:
        parser.error("--backend postgres needs CCWEB_BENCH_POSTGRES_URL")

    results: list[tuple[str, Result]] = []
    with tempfile.TemporaryDirectory() as tmp:
        backends: list[tuple[str, str, Any]] = []
        if options.backend in ("sqlite", "all"):
            backends.append(("SQLite", f"sqlite+aiosqlite:///{tmp}/bench.db", None))
        if options.backend in ("postgres", "all") and pg:
            url, drop = postgres_database(pg)
            backends.append(("PostgreSQL", url, drop))
        scaled: list[tuple[str, int, Result]] = []
        for name, url, drop in backends:
            port = free_port()
            server = serve_ccweb(url, port)
            try:
                result = asyncio.run(
                    round_trips(port, server.pid, options.seconds, options.clients)
                )
                for count in options.processes or ():
                    with servers(url, count) as running:
                        measured = asyncio.run(
                            round_trips(
                                [each.port for each in running],
                                [each.pid for each in running],
                                options.seconds,
                                options.clients,
                            )
                        )
                    scaled.append((name, count, measured))
            finally:
                stop(server)
                if drop:
                    drop()
            results.append((name, result))

        port = free_port()
        server = serve_ceiling(tmp, port)
        try:
            bare = asyncio.run(ceiling(port, server.pid, options.seconds, options.clients))
        finally:
            stop(server)
    ceiling_rps = bare.count / bare.usage.wall

    print(
        f"clients: {options.clients}, {options.seconds:g} s per measurement, {os.cpu_count()} cores"
    )
    print(
        f"bare Starlette JSON endpoint (ceiling): {ceiling_rps:,.0f} requests/s"
        f" = {ceiling_rps / 3:,.0f} three-request round trips/s\n"
        f"  {cpu(bare.usage, bare.count, 'request', bare.requests)}"
    )
    for name, result in results:
        rate = result.count / result.usage.wall
        note = "; PostgreSQL's own processes not counted" if name == "PostgreSQL" else ""
        print(
            f"{name}: {rate:,.0f} round trips/s"
            f" ({result.requests / result.usage.wall:,.0f} requests/s,"
            f" {rate / (ceiling_rps / 3):.0%} of the ceiling;"
            f" {result.refused} sends refused as target_busy)\n"
            f"  {cpu(result.usage, result.count, 'round trip', result.requests, note)}"
        )
    print_scaled(scaled, options.clients)
    for name, result in results:
        ratio = result.count / result.usage.wall / (ceiling_rps / 3)
        goal = GOALS[name]
        print(f"goal: ≥ {goal:g} of the ceiling on {name}: {_verdict(ratio >= goal)} ({ratio:.3f})")


def process_counts(text: str) -> list[int]:
    """``--processes``: counts of server processes, comma-separated, each at least 1."""
    try:
        counts = [int(part) for part in text.split(",")]
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r}: give counts like 1,2,4") from None
    if not counts or min(counts) < 1:
        raise argparse.ArgumentTypeError(f"{text!r}: every count must be at least 1")
    return counts


def print_scaled(scaled: list[tuple[str, int, Result]], clients: int) -> None:
    """The scale-out table: round trips/s per backend and count of server processes, each
    against the same backend's first count."""
    if not scaled:
        return
    print(f"scale-out ({clients} client loops shared among the processes):")
    first: dict[str, float] = {}
    for name, count, result in scaled:
        rate = result.count / result.usage.wall
        base = first.setdefault(name, rate)
        server = (
            f"server CPU {result.usage.server_cpu / max(result.count, 1) * 1000:.2f} ms/round trip"
            f" ({result.usage.server_cpu / result.usage.wall:.0%} of a core)"
            if result.usage.server_cpu is not None
            else "server CPU not measured"
        )
        print(
            f"  {name}, {count} process{'es' if count > 1 else ''}: {rate:,.0f} round trips/s"
            f" ({rate / base:.2f}× the first count; {result.refused} refused; {server})"
        )


def _verdict(met: bool) -> str:
    return "met" if met else "NOT met"


if __name__ == "__main__":
    main()
