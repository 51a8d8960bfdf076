"""What the HTTP benchmarks share: servers in subprocesses, a small client, CPU accounting.

- ``serve_ccweb`` / ``serve_app``: ``ccweb-store serve``, or any ASGI app under uvicorn, in a
  subprocess with the same uvicorn settings (httptools and uvloop, log level warning);
  ``CEILING_APP`` is the bare Starlette JSON endpoint the benchmarks compare against.
- ``Client``: JSON-RPC over one HTTP/1.1 keep-alive connection, a few lines on ``asyncio``
  streams, so that it costs far less CPU than the servers it measures.
- ``repeat`` runs client loops for a while and returns the requests they made and a ``Usage``:
  wall time, the client's CPU (``getrusage``) and the server process's (``/proc/<pid>/stat``,
  Linux only).
"""

from __future__ import annotations

import asyncio
import itertools
import json
import os
import resource
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import Awaitable, Callable, Coroutine
from dataclasses import dataclass
from pathlib import Path
from typing import Any

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
    """Start a server process and wait until its port accepts connections."""
    process = subprocess.Popen(
        args, cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and process.poll() is None:
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


def serve_ccweb(database_url: str, port: int) -> subprocess.Popen[bytes]:
    """``ccweb-store serve`` on ``port`` over ``database_url``, without a token."""
    env = {
        **os.environ,
        "CCWEB_DATABASE_URL": database_url,
        "CCWEB_PORT": str(port),
        "CCWEB_LOG_LEVEL": "warning",
        "PYTHONPATH": str(ROOT),
    }
    env.pop("CCWEB_TOKEN", None)
    return start_server([sys.executable, "-m", "ccweb_store", "serve"], env, port)


def serve_app(source: str, app_dir: str, port: int) -> subprocess.Popen[bytes]:
    """The ASGI ``app`` defined by the Python ``source``, under uvicorn as ``serve`` runs it."""
    module = f"bench_app_{uuid.uuid4().hex[:8]}"
    (Path(app_dir) / f"{module}.py").write_text(source)
    args = ["-m", "uvicorn", f"{module}:app", "--port", str(port), "--log-level", "warning"]
    return start_server([sys.executable, *args, "--app-dir", app_dir], dict(os.environ), port)


def serve_ceiling(app_dir: str, port: int) -> subprocess.Popen[bytes]:
    """The bare Starlette JSON endpoint (``POST /rpc``)."""
    return serve_app(CEILING_APP, app_dir, port)


def postgres_database(server_url: str) -> tuple[str, Callable[[], None]]:
    """A scratch database on the server, and a function that drops it."""
    name = f"ccweb_bench_{uuid.uuid4().hex[:8]}"
    url = asyncio.run(create_database(server_url, name))
    return url, lambda: asyncio.run(drop_database(server_url, name))


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

    Just what the benchmarks need: POST, then a status 200 answer framed by ``Content-Length``
    (Starlette sets it on every JSON answer, so uvicorn never chunks them).
    Anything else (another status, a closing connection, other framing) raises.
    """

    HEAD = (
        "POST {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nContent-Type: application/json\r\n"
        "Accept: application/json, text/event-stream\r\nContent-Length: {length}\r\n\r\n"
    )

    def __init__(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, port: int
    ) -> None:
        self.reader, self.writer, self.port = reader, writer, port
        self.ids = itertools.count(1)
        self.requests = 0

    @classmethod
    async def connect(cls, port: int) -> Client:
        return cls(*await asyncio.open_connection("127.0.0.1", port), port)

    async def call(self, path: str, method: str, params: dict[str, Any]) -> Any:
        payload = {"jsonrpc": "2.0", "id": next(self.ids), "method": method, "params": params}
        body = json.dumps(payload, separators=(",", ":")).encode()
        head = self.HEAD.format(path=path, port=self.port, length=len(body))
        self.writer.write(head.encode() + body)
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


async def measure(
    server_pid: int, clients: list[Client], loops: list[Coroutine[Any, Any, None]]
) -> tuple[int, Usage]:
    """Run the client loops; return the requests they made and what the window cost."""
    before = sum(client.requests for client in clients)
    start = Usage.now(server_pid)
    await asyncio.gather(*loops)
    usage = Usage.now(server_pid).since(start)
    return sum(client.requests for client in clients) - before, usage


async def repeat(
    port: int,
    server_pid: int,
    seconds: float,
    clients: int,
    request: Callable[[Client], Awaitable[bool]],
) -> tuple[int, Usage]:
    """``clients`` loops on connections of their own, each making ``request`` until
    ``seconds`` have passed or it returns False; the requests made and what they cost."""
    connections = [await Client.connect(port) for _ in range(clients)]
    deadline = time.perf_counter() + seconds

    async def loop(client: Client) -> None:
        while time.perf_counter() < deadline and await request(client):
            pass

    try:
        return await measure(server_pid, connections, [loop(c) for c in connections])
    finally:
        for client in connections:
            await client.close()


async def ping(client: Client) -> bool:
    """One request to the bare endpoint (``CEILING_APP``)."""
    await client.call("/rpc", "ping", {})
    return True
