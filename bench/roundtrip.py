"""Round trips per second through a real server, against a bare Starlette ceiling.

A round trip is what one cross-conversation request costs the service:
``ccweb_send_message`` (``return_and_continue``) over ``/mcp`` → ``run.claim`` →
``run.complete`` over ``/rpc``, which delivers the reply to the source and queues its auto-run.

In the same run the script serves a bare Starlette JSON endpoint with the same uvicorn
settings and measures plain requests per second with the same client concurrency: the
ceiling that HTTP and the client allow on this machine. A round trip is three requests,
so the ratio compares round trips/s with a third of the ceiling.

The client is a few lines of HTTP/1.1 on ``asyncio`` streams, one keep-alive connection per
client loop, so that it costs far less CPU than the server it measures. Next to each rate the
script prints the server process's CPU time per round trip (per request for the ceiling),
from ``/proc/<pid>/stat`` (Linux only), and the client's own CPU time per request.

    python bench/roundtrip.py [--seconds 10] [--clients 8] [--backend sqlite|postgres|all]
    CCWEB_BENCH_POSTGRES_URL=postgresql+asyncpg://root@127.0.0.1:5432/test python bench/roundtrip.py
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import json
import os
import resource
import socket
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Coroutine
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from ccweb_store.db import create_database, drop_database  # noqa: E402

TARGET_RATE = 300  # round trips/s on SQLite

CEILING_APP = """
from starlette.applications import Starlette
from starlette.responses import JSONResponse
from starlette.routing import Route

async def echo(request):
    body = await request.json()
    return JSONResponse({"jsonrpc": "2.0", "id": body.get("id"), "result": {"ok": True}})

app = Starlette(routes=[Route("/rpc", echo, methods=["POST"])])
"""


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def start_server(args: list[str], env: dict[str, str], port: int) -> subprocess.Popen[bytes]:
    process = subprocess.Popen(
        args, cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.2):
                return process
        except OSError:
            time.sleep(0.1)
    process.kill()
    raise RuntimeError(f"server on port {port} did not start: {' '.join(args)}")


def stop(process: subprocess.Popen[bytes]) -> None:
    process.terminate()
    try:
        process.wait(timeout=10)
    except subprocess.TimeoutExpired:
        process.kill()


def process_cpu_seconds(pid: int) -> float | None:
    """User + system CPU time of a process so far, or None without Linux's ``/proc``."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    # Fields after the parenthesised command name; utime and stime are fields 14 and 15.
    fields = stat.rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def own_cpu_seconds() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


class Client:
    """JSON-RPC over one HTTP/1.1 keep-alive connection, one request at a time.

    Just what the benchmark needs: POST, then a status 200 answer framed by ``Content-Length``
    (Starlette sets it on every answer of ours, so uvicorn never chunks them).
    Anything else (another status, a closing connection, other framing) raises.
    """

    HEAD = (
        "POST {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
        "Accept: application/json, text/event-stream\r\nContent-Length: {length}\r\n\r\n"
    )

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader, self.writer = reader, writer
        self.ids = itertools.count(1)
        self.requests = 0

    @classmethod
    async def connect(cls, port: int) -> Client:
        return cls(*await asyncio.open_connection("127.0.0.1", port))

    async def call(self, path: str, method: str, params: dict[str, Any]) -> Any:
        payload = {"jsonrpc": "2.0", "id": next(self.ids), "method": method, "params": params}
        body = json.dumps(payload, separators=(",", ":")).encode()
        self.writer.write(self.HEAD.format(path=path, length=len(body)).encode() + body)
        status, content = await self.response()
        self.requests += 1
        if status != 200:
            raise RuntimeError(f"{method}: HTTP {status}: {content[:500]!r}")
        answer = json.loads(content)
        if "error" in answer:
            raise RuntimeError(f"{method}: {answer['error']}")
        return answer["result"]

    async def response(self) -> tuple[int, bytes]:
        lines = (await self.reader.readuntil(b"\r\n\r\n")).decode("latin-1").split("\r\n")
        version, status = lines[0].split(" ", 2)[:2]
        if not version.startswith("HTTP/1."):
            raise RuntimeError(f"not an HTTP/1.x status line: {lines[0]!r}")
        headers = {}
        for line in lines[1:-2]:
            name, _, value = line.partition(":")
            headers[name.strip().lower()] = value.strip().lower()
        if headers.get("connection") == "close":
            raise RuntimeError(f"the server is closing the connection (HTTP {status})")
        if "content-length" not in headers:
            raise RuntimeError(f"an answer without Content-Length: {headers}")
        return int(status), await self.reader.readexactly(int(headers["content-length"]))

    async def close(self) -> None:
        self.writer.close()
        await self.writer.wait_closed()


@dataclass
class Usage:
    """Wall time and CPU seconds of the client (this process) and the server process."""

    wall: float
    client_cpu: float
    server_cpu: float | None  # None without /proc

    @classmethod
    def now(cls, server_pid: int) -> Usage:
        return cls(time.perf_counter(), own_cpu_seconds(), process_cpu_seconds(server_pid))

    def since(self, start: Usage) -> Usage:
        server = None
        if self.server_cpu is not None and start.server_cpu is not None:
            server = self.server_cpu - start.server_cpu
        return Usage(self.wall - start.wall, self.client_cpu - start.client_cpu, server)


@dataclass
class Result:
    count: int  # round trips, or requests for the ceiling
    requests: int
    refused: int
    usage: Usage


async def measure(
    server_pid: int, clients: list[Client], loops: list[Coroutine[Any, Any, None]]
) -> tuple[int, Usage]:
    """Run the client loops; return the requests they made and what the window cost."""
    before = sum(client.requests for client in clients)
    start = Usage.now(server_pid)
    await asyncio.gather(*loops)
    usage = Usage.now(server_pid).since(start)
    return sum(client.requests for client in clients) - before, usage


TARGETS_PER_CLIENT = 4


async def round_trips(port: int, server_pid: int, seconds: float, clients: int) -> Result:
    """Run ``clients`` concurrent loops of send → claim → complete, one connection each.

    Workers claim the oldest queued run, which is not necessarily the one their own loop
    just sent, so each loop rotates over a few targets of its own: a target whose run is still
    queued or running refuses the send (``target_busy``, counted) and the loop moves on.
    """
    connections = [await Client.connect(port) for _ in range(clients)]
    loops = []
    for i, rpc in enumerate(connections):
        tag = uuid.uuid4().hex[:8]
        source = await rpc.call(
            "/rpc", "session.create", {"id": f"src-{i}-{tag}", "title": f"Source {i}"}
        )
        targets = [
            (
                await rpc.call(
                    "/rpc",
                    "session.create",
                    {"id": f"tgt-{i}-{j}-{tag}", "title": f"Target {i}.{j}"},
                )
            )["id"]
            for j in range(TARGETS_PER_CLIENT)
        ]
        loops.append((rpc, source["id"], targets))

    done = refused = 0
    deadline = time.perf_counter() + seconds

    async def loop(worker: int, rpc: Client, source: str, targets: list[str]) -> None:
        nonlocal done, refused
        for target in itertools.cycle(targets):
            if time.perf_counter() >= deadline:
                return
            call = await rpc.call(
                f"/mcp?sourceSessionId={source}",
                "tools/call",
                {
                    "name": "ccweb_send_message",
                    "arguments": {
                        "targetConversationId": target,
                        "content": "Run the tests and report back.",
                        "replyMode": "return_and_continue",
                    },
                },
            )
            if call.get("isError"):
                if call["structuredContent"]["error"]["code"] != "target_busy":
                    raise RuntimeError(f"send failed: {call['structuredContent']}")
                refused += 1
                continue
            claimed = await rpc.call(
                "/rpc", "run.claim", {"workerId": f"w{worker}", "kinds": ["cross_conversation"]}
            )
            run = claimed["run"]
            if run is None:
                continue
            completed = await rpc.call(
                "/rpc",
                "run.complete",
                {"runId": run["id"], "status": "completed", "output": "All 42 tests pass."},
            )
            if [reply["status"] for reply in completed["replies"]] != ["returned"]:
                raise RuntimeError(f"reply not returned: {completed['replies']}")
            done += 1

    requests, usage = await measure(
        server_pid, connections, [loop(i, *arguments) for i, arguments in enumerate(loops)]
    )
    for rpc in connections:
        await rpc.close()
    return Result(done, requests, refused, usage)


async def ceiling(port: int, server_pid: int, seconds: float, clients: int) -> Result:
    connections = [await Client.connect(port) for _ in range(clients)]
    deadline = time.perf_counter() + seconds

    async def loop(rpc: Client) -> None:
        while time.perf_counter() < deadline:
            await rpc.call("/rpc", "ping", {})

    requests, usage = await measure(server_pid, connections, [loop(c) for c in connections])
    for rpc in connections:
        await rpc.close()
    return Result(requests, requests, 0, usage)


def serve_ccweb(database_url: str, port: int) -> subprocess.Popen[bytes]:
    env = {
        **os.environ,
        "CCWEB_DATABASE_URL": database_url,
        "CCWEB_PORT": str(port),
        "CCWEB_LOG_LEVEL": "warning",
        "PYTHONPATH": str(ROOT),
    }
    env.pop("CCWEB_TOKEN", None)
    return start_server([sys.executable, "-m", "ccweb_store", "serve"], env, port)


def serve_ceiling(app_dir: str, port: int) -> subprocess.Popen[bytes]:
    (Path(app_dir) / "ceiling_app.py").write_text(CEILING_APP)
    args = ["-m", "uvicorn", "ceiling_app:app", "--port", str(port), "--log-level", "warning"]
    return start_server([sys.executable, *args, "--app-dir", app_dir], dict(os.environ), port)


def postgres_database(server_url: str) -> tuple[str, Any]:
    """A scratch database on the server, and a function that drops it."""
    name = f"ccweb_bench_{uuid.uuid4().hex[:8]}"
    url = asyncio.run(create_database(server_url, name))
    return url, lambda: asyncio.run(drop_database(server_url, name))


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
        for name, url, drop in backends:
            port = free_port()
            server = serve_ccweb(url, port)
            try:
                result = asyncio.run(
                    round_trips(port, server.pid, options.seconds, options.clients)
                )
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
    sqlite = [result.count / result.usage.wall for name, result in results if name == "SQLite"]
    verdict = "SQLite not measured"
    if sqlite:
        verdict = f"{'met' if sqlite[0] >= TARGET_RATE else 'NOT met'} ({sqlite[0]:,.1f})"
    print(f"target: {TARGET_RATE} round trips/s on SQLite: {verdict}")


if __name__ == "__main__":
    main()
