"""Round trips per second through a real server, against a bare Starlette ceiling.

A round trip is what one cross-conversation request costs the service:
``ccweb_send_message`` (``return_and_continue``) over ``/mcp`` → ``run.claim`` →
``run.complete`` over ``/rpc``, which delivers the reply to the source and queues its auto-run.

In the same run the script serves a bare Starlette JSON endpoint with the same uvicorn
settings and measures plain requests per second with the same client concurrency: the
ceiling that HTTP and the client alone allow on this machine. A round trip is three requests,
so the ratio compares round trips/s with a third of the ceiling.

    python bench/roundtrip.py [--seconds 10] [--clients 8]
    CCWEB_BENCH_POSTGRES_URL=postgresql+asyncpg://root@127.0.0.1:5432/test python bench/roundtrip.py
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import os
import socket
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

import httpx

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from ccweb_store.db import create_database, drop_database  # noqa: E402

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


class Rpc:
    def __init__(self, client: httpx.AsyncClient) -> None:
        self.client = client
        self.ids = itertools.count(1)

    async def call(self, path: str, method: str, params: dict[str, Any]) -> Any:
        response = await self.client.post(
            path, json={"jsonrpc": "2.0", "id": next(self.ids), "method": method, "params": params}
        )
        body = response.json()
        if "error" in body:
            raise RuntimeError(f"{method}: {body['error']}")
        return body["result"]


TARGETS_PER_CLIENT = 4


async def round_trips(base_url: str, seconds: float, clients: int) -> tuple[int, int, float]:
    """Run ``clients`` concurrent loops of send → claim → complete.

    Workers claim the oldest queued run, which is not necessarily the one their own loop
    just sent, so each loop rotates over a few targets of its own: a target whose run is still
    queued or running refuses the send (``target_busy``, counted) and the loop moves on.
    Returns (round trips, refused sends, elapsed seconds).
    """
    limits = httpx.Limits(max_connections=clients * 2, max_keepalive_connections=clients * 2)
    async with httpx.AsyncClient(base_url=base_url, limits=limits, timeout=30) as client:
        rpc = Rpc(client)
        loops = []
        for i in range(clients):
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
            loops.append((source["id"], targets))

        done = refused = 0
        deadline = time.perf_counter() + seconds

        async def loop(worker: int, source: str, targets: list[str]) -> None:
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

        started = time.perf_counter()
        await asyncio.gather(*(loop(i, s, t) for i, (s, t) in enumerate(loops)))
        return done, refused, time.perf_counter() - started


async def ceiling(base_url: str, seconds: float, clients: int) -> tuple[int, float]:
    limits = httpx.Limits(max_connections=clients * 2, max_keepalive_connections=clients * 2)
    async with httpx.AsyncClient(base_url=base_url, limits=limits, timeout=30) as client:
        rpc = Rpc(client)
        done = 0
        deadline = time.perf_counter() + seconds

        async def loop() -> None:
            nonlocal done
            while time.perf_counter() < deadline:
                await rpc.call("/rpc", "ping", {})
                done += 1

        started = time.perf_counter()
        await asyncio.gather(*(loop() for _ in range(clients)))
        return done, time.perf_counter() - started


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


def postgres_database(server_url: str) -> tuple[str, Any]:
    """A scratch database on the server, and a function that drops it."""
    name = f"ccweb_bench_{uuid.uuid4().hex[:8]}"
    url = asyncio.run(create_database(server_url, name))
    return url, lambda: asyncio.run(drop_database(server_url, name))


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--seconds", type=float, default=10.0, help="measuring time per backend")
    parser.add_argument("--clients", type=int, default=8, help="concurrent client loops")
    options = parser.parse_args()

    results: list[tuple[str, float]] = []
    with tempfile.TemporaryDirectory() as tmp:
        backends: list[tuple[str, str, Any]] = [
            ("SQLite", f"sqlite+aiosqlite:///{tmp}/bench.db", None)
        ]
        pg = os.environ.get("CCWEB_BENCH_POSTGRES_URL")
        if pg:
            url, drop = postgres_database(pg)
            backends.append(("PostgreSQL", url, drop))
        for name, url, drop in backends:
            port = free_port()
            server = serve_ccweb(url, port)
            try:
                count, refused, elapsed = asyncio.run(
                    round_trips(f"http://127.0.0.1:{port}", options.seconds, options.clients)
                )
            finally:
                stop(server)
                if drop:
                    drop()
            results.append((name, count / elapsed, refused))

        app_file = Path(tmp) / "ceiling_app.py"
        app_file.write_text(CEILING_APP)
        port = free_port()
        server = start_server(
            [
                sys.executable,
                "-m",
                "uvicorn",
                "ceiling_app:app",
                "--port",
                str(port),
                "--log-level",
                "warning",
                "--app-dir",
                tmp,
            ],
            dict(os.environ),
            port,
        )
        try:
            count, elapsed = asyncio.run(
                ceiling(f"http://127.0.0.1:{port}", options.seconds, options.clients)
            )
        finally:
            stop(server)
    ceiling_rps = count / elapsed

    print(
        f"clients: {options.clients}, {options.seconds:g} s per measurement, {os.cpu_count()} cores"
    )
    print(
        f"bare Starlette JSON endpoint (ceiling): {ceiling_rps:,.0f} requests/s"
        f" = {ceiling_rps / 3:,.0f} three-request round trips/s"
    )
    for name, rate, refused in results:
        print(
            f"{name}: {rate:,.0f} round trips/s"
            f" ({rate * 3:,.0f} requests/s, {rate / (ceiling_rps / 3):.0%} of the ceiling;"
            f" {refused} sends refused as target_busy)"
        )


if __name__ == "__main__":
    main()
