"""What the benchmark and reliability commands share: HTTP clients, servers in subprocesses,
CPU accounting, scratch databases, and figures with the invariants they must meet.

- ``Connection``: HTTP/1.1 on ``asyncio`` streams, one keep-alive connection, a few lines so
  that it costs far less CPU than the servers it measures, and able to send what a library
  would refuse to (any bytes, chunked bodies, odd headers); ``RpcClient`` speaks JSON-RPC on
  it, ``Client`` is the benchmarks' name for it, connected up front.
- ``serve_ccweb`` / ``serve_app``: ``ccweb-store serve``, or any ASGI app under uvicorn, in a
  subprocess with the same uvicorn settings (httptools and uvloop, log level warning);
  ``CEILING_APP`` is the bare Starlette JSON endpoint the benchmarks compare against;
  ``serve_floor`` the aiosqlite floor (``floor.py``).
  ``ServerProcess`` is a server the reliability commands can SIGKILL and start again.
- ``repeat`` runs client loops for a while and returns the requests they made and a ``Usage``:
  wall time, the client's CPU (``getrusage``) and the server process's (``/proc/<pid>/stat``,
  Linux only).
- ``Databases``, ``command_line``, ``Report``: scratch databases per ``--backend``, the
  commands' flags, and the figures they print.

Everything stays on the loopback interface: servers bind 127.0.0.1 and clients connect there.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import dataclasses
import itertools
import os
import resource
import signal
import socket
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import (
    AsyncIterator,
    Awaitable,
    Callable,
    Coroutine,
    Iterable,
    Iterator,
    Mapping,
    Sequence,
)
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any, TypeVar

import orjson
import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncEngine

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from bench.scratch_databases import create_database, drop_database  # noqa: E402
from ccweb_store.store.db import create_engine  # noqa: E402
from ccweb_store.store.models import Base  # noqa: E402

OptionsT = TypeVar("OptionsT")
LOOPBACK = "127.0.0.1"
#: Problems a report prints (CCWEB_BENCH_PROBLEMS overrides).
SHOWN_PROBLEMS = int(os.environ.get("CCWEB_BENCH_PROBLEMS", "20"))
POSTGRES_ENV = "CCWEB_BENCH_POSTGRES_URL"
SERVE = [sys.executable, "-m", "ccweb_store", "serve"]

CEILING_APP = """
from starlette.applications import Starlette
from starlette.responses import JSONResponse
from starlette.routing import Route

async def echo(request):
    body = await request.json()
    return JSONResponse({"jsonrpc": "2.0", "id": body.get("id"), "result": {"ok": True}})

app = Starlette(routes=[Route("/rpc", echo, methods=["POST"])])
"""


# --- HTTP -----------------------------------------------------------------------------------


class ServerGone(ConnectionError):
    """The connection broke before a whole answer arrived (the server died or closed it)."""


class _ClosedBeforeAnswer(ConnectionError):
    """The connection broke before the first byte of an answer."""


@dataclass
class Answer:
    """One HTTP answer."""

    status: int
    headers: dict[str, str]
    body: bytes
    seconds: float

    def json(self) -> Any:
        return orjson.loads(self.body)


class Connection:
    """HTTP/1.1 on ``asyncio`` streams, one request at a time on one keep-alive connection.

    A few lines of client instead of a library, so that it costs far less CPU than the server
    it measures, and so that it can send what a library would refuse to (any bytes, chunked
    bodies, odd headers). It reconnects when the server closed the previous connection.
    """

    def __init__(self, port: int, host: str = LOOPBACK, *, retry_stale: bool = True) -> None:
        self.host, self.port = host, port
        self.retry_stale = retry_stale
        self._reader: asyncio.StreamReader | None = None
        self._writer: asyncio.StreamWriter | None = None
        self.requests = 0

    async def request(
        self,
        method: str,
        path: str,
        body: bytes = b"",
        headers: Mapping[str, str] | None = None,
        *,
        chunked: bool = False,
    ) -> Answer:
        """Send one request and read its answer; ``ServerGone`` when the connection breaks.

        A kept-alive connection that the server had already closed (it said nothing to this
        request) is reopened and the request sent once more, as HTTP clients do, unless
        ``retry_stale`` is off (a crash test must not send a request twice).
        """
        reused = self._writer is not None
        try:
            return await self._request(method, path, body, headers, chunked)
        except _ClosedBeforeAnswer as exc:
            if not reused or not self.retry_stale:
                raise ServerGone(str(exc)) from exc
        try:
            return await self._request(method, path, body, headers, chunked)
        except _ClosedBeforeAnswer as exc:
            raise ServerGone(str(exc)) from exc

    async def _request(
        self,
        method: str,
        path: str,
        body: bytes,
        headers: Mapping[str, str] | None,
        chunked: bool,
    ) -> Answer:
        began = time.perf_counter()
        if self._writer is None:
            await self.open()
        assert self._reader is not None and self._writer is not None
        head = [f"{method} {path} HTTP/1.1", f"Host: {self.host}:{self.port}"]
        head += [f"{name}: {value}" for name, value in (headers or {}).items()]
        if chunked:
            head.append("Transfer-Encoding: chunked")
            payload = _chunked(body)
        else:
            if body or method in ("POST", "PUT", "PATCH"):
                head.append(f"Content-Length: {len(body)}")
            payload = body
        started = False
        try:
            # The body is not drained before reading: a server may answer (413) before it
            # has read it all, and then close the connection.
            self._writer.write(("\r\n".join(head) + "\r\n\r\n").encode("latin-1") + payload)
            raw_head = await self._reader.readuntil(b"\r\n\r\n")
            started = True
            status, answer_headers, content = await self._read_answer(method, raw_head)
        except (OSError, asyncio.IncompleteReadError, asyncio.LimitOverrunError) as exc:
            await self.close()
            problem = f"{method} {path[:200]}: {type(exc).__name__}: {exc}"
            raise (ServerGone if started else _ClosedBeforeAnswer)(problem) from exc
        self.requests += 1
        if answer_headers.get("connection", "").lower() == "close":
            await self.close()
        return Answer(status, answer_headers, content, time.perf_counter() - began)

    async def open(self) -> None:
        """Open the connection now (``request`` opens it when it has none)."""
        try:
            self._reader, self._writer = await asyncio.open_connection(
                self.host, self.port, limit=2**20
            )
        except OSError as exc:
            raise ServerGone(f"cannot connect to {self.host}:{self.port}: {exc}") from exc

    async def _read_answer(self, method: str, raw: bytes) -> tuple[int, dict[str, str], bytes]:
        assert self._reader is not None
        lines = raw.decode("latin-1").split("\r\n")
        version, status, *_ = lines[0].split(" ", 2)
        if not version.startswith("HTTP/1."):
            raise OSError(f"not an HTTP/1.x status line: {lines[0]!r}")
        headers: dict[str, str] = {}
        for line in lines[1:]:
            if line:
                name, _, value = line.partition(":")
                headers[name.strip().lower()] = value.strip()
        code = int(status)
        if method == "HEAD" or code in (204, 304) or 100 <= code < 200:
            return code, headers, b""
        if "content-length" in headers:
            return code, headers, await self._reader.readexactly(int(headers["content-length"]))
        if headers.get("transfer-encoding", "").lower() == "chunked":
            return code, headers, await self._read_chunked()
        headers["connection"] = "close"  # framed by the end of the connection
        return code, headers, await self._reader.read()

    async def _read_chunked(self) -> bytes:
        assert self._reader is not None
        parts: list[bytes] = []
        while True:
            size = int((await self._reader.readuntil(b"\r\n")).split(b";")[0], 16)
            if size == 0:
                await self._reader.readuntil(b"\r\n")
                return b"".join(parts)
            parts.append(await self._reader.readexactly(size))
            await self._reader.readexactly(2)

    async def close(self) -> None:
        writer, self._reader, self._writer = self._writer, None, None
        if writer is not None:
            writer.close()
            with contextlib.suppress(OSError, asyncio.IncompleteReadError):
                await writer.wait_closed()


def _chunked(body: bytes, size: int = 65536) -> bytes:
    chunks = [body[i : i + size] for i in range(0, len(body), size)]
    return b"".join(b"%x\r\n%s\r\n" % (len(c), c) for c in chunks) + b"0\r\n\r\n"


JSON_HEADERS = {"Content-Type": "application/json", "Accept": "application/json, text/event-stream"}


class RpcFailure(RuntimeError):
    """A JSON-RPC call answered with an error or an unexpected HTTP status."""

    def __init__(self, method: str, status: int, error: Any) -> None:
        super().__init__(f"{method}: HTTP {status}: {error}")
        self.status = status
        self.error = error


class RpcClient:
    """JSON-RPC calls on one ``Connection``, recording how long each one took."""

    ids = itertools.count(1)

    def __init__(
        self, port: int, latencies: list[float] | None = None, *, retry_stale: bool = True
    ) -> None:
        self.connection = Connection(port, retry_stale=retry_stale)
        self.latencies = latencies if latencies is not None else []

    async def call(self, path: str, method: str, params: Mapping[str, Any]) -> Any:
        """The result of one call; ``RpcFailure`` for an error, ``ServerGone`` if cut off."""
        message = {"jsonrpc": "2.0", "id": next(self.ids), "method": method, "params": params}
        answer = await self.connection.request("POST", path, orjson.dumps(message), JSON_HEADERS)
        self.latencies.append(answer.seconds)
        if answer.status != 200:
            raise RpcFailure(method, answer.status, answer.body[:500])
        body = answer.json()
        if "error" in body:
            raise RpcFailure(method, answer.status, body["error"])
        return body["result"]

    async def rpc(self, method: str, params: Mapping[str, Any]) -> Any:
        return await self.call("/rpc", method, params)

    async def tool(self, source: str, name: str, arguments: Mapping[str, Any]) -> Any:
        """A ``tools/call`` over ``/mcp`` from ``source``: the tool result (``isError`` and all)."""
        return await self.call(
            f"/mcp?sourceSessionId={source}", "tools/call", {"name": name, "arguments": arguments}
        )

    async def close(self) -> None:
        await self.connection.close()


class Client(RpcClient):
    """The benchmarks' client: an ``RpcClient`` whose connection is open before it is timed;
    ``requests`` counts the requests it made."""

    @classmethod
    async def connect(cls, port: int) -> Client:
        client = cls(port)
        await client.connection.open()
        return client

    @property
    def requests(self) -> int:
        return self.connection.requests


# --- server processes -------------------------------------------------------------------------


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind((LOOPBACK, 0))
        return int(sock.getsockname()[1])


def wait_for_port(port: int, process: subprocess.Popen[bytes], timeout: float = 30) -> None:
    """Wait until something accepts connections on ``port``; raise if ``process`` dies."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"the server exited with status {process.returncode}")
        try:
            with socket.create_connection((LOOPBACK, port), timeout=0.2):
                return
        except OSError:
            time.sleep(0.05)
    raise RuntimeError(f"nothing answered on port {port} within {timeout:g} s")


@dataclass
class ServerProcess:
    """``ccweb-store serve`` on 127.0.0.1 over one database; restartable on the same port.

    Its stderr goes to a file (``log``) so a chatty log never blocks it and a failing run can
    show what the server said.
    """

    database_url: str
    env: Mapping[str, str] = field(default_factory=dict)
    port: int = field(default_factory=free_port)
    process: subprocess.Popen[bytes] | None = None
    log: IO[bytes] = field(default_factory=lambda: tempfile.TemporaryFile())  # noqa: SIM115
    _final_log: str = ""

    @property
    def pid(self) -> int:
        assert self.process is not None
        return self.process.pid

    def start(self, timeout: float = 60) -> ServerProcess:
        env = {
            **os.environ,
            "PYTHONPATH": str(ROOT),
            "CCWEB_DATABASE_URL": self.database_url,
            "CCWEB_HOST": LOOPBACK,
            "CCWEB_PORT": str(self.port),
            "CCWEB_LOG_LEVEL": "warning",
            **self.env,
        }
        if "CCWEB_TOKEN" not in self.env:
            env.pop("CCWEB_TOKEN", None)
        self.process = subprocess.Popen(
            SERVE, cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=self.log
        )
        try:
            wait_for_port(self.port, self.process, timeout)
        except RuntimeError as exc:
            self.stop()
            raise RuntimeError(f"{exc}; its log:\n{self.log_text()[-4000:]}") from None
        return self

    def kill(self) -> None:
        """SIGKILL: no shutdown, no flush, no goodbye."""
        if self.process is not None and self.process.poll() is None:
            self.process.send_signal(signal.SIGKILL)
            self.process.wait()

    def stop(self) -> None:
        """Terminate the server for good: its log is read into memory and its file closed."""
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.kill()
        if not self.log.closed:
            self._final_log = self.log_text()
            self.log.close()

    def log_text(self) -> str:
        """Everything the server wrote to stderr so far."""
        if self.log.closed:
            return self._final_log
        self.log.seek(0)
        text = self.log.read().decode(errors="replace")
        self.log.seek(0, os.SEEK_END)
        return text


@contextlib.contextmanager
def servers(database_url: str, count: int, **env: str) -> Iterator[list[ServerProcess]]:
    """``count`` server processes sharing one database, started one after the other (the
    first migrates it), stopped on exit."""
    started: list[ServerProcess] = []
    try:
        for _ in range(count):
            started.append(ServerProcess(database_url, env).start())
        yield started
    finally:
        for server in started:
            server.stop()


def start_server(args: list[str], env: dict[str, str], port: int) -> subprocess.Popen[bytes]:
    """Start a server process and wait until its port accepts connections."""
    process = subprocess.Popen(
        args, cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    try:
        wait_for_port(port, process)
    except RuntimeError as exc:
        process.kill()
        raise RuntimeError(f"{exc}: {' '.join(args)}") from None
    return process


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


def serve_floor(database_url: str, port: int) -> subprocess.Popen[bytes]:
    """The aiosqlite floor (``bench/floor.py``) on the migrated SQLite database of
    ``database_url``, under uvicorn as ``serve_app`` runs an app."""
    path = sa.make_url(database_url).database
    if not path:
        raise ValueError(f"the floor needs a SQLite file, not {database_url!r}")
    env = {**os.environ, "PYTHONPATH": str(ROOT), "CCWEB_FLOOR_DATABASE": path}
    args = ["-m", "uvicorn", "floor:app", "--port", str(port), "--log-level", "warning"]
    return start_server([sys.executable, *args, "--app-dir", str(ROOT / "bench")], env, port)


async def end_other_connections(database_url: str) -> int:
    """End every connection to the database but the one asking (``pg_terminate_backend``,
    waiting up to 5 s for each to exit): what a restart of PostgreSQL does to a server's
    connections. How many were ended."""
    engine = create_engine(database_url, isolation_level="AUTOCOMMIT")
    try:
        async with engine.connect() as connection:
            ended = await connection.execute(
                sa.text(
                    "SELECT count(*) FILTER (WHERE pg_terminate_backend(pid, 5000))"
                    " FROM pg_stat_activity"
                    " WHERE datname = current_database() AND pid <> pg_backend_pid()"
                )
            )
            return int(ended.scalar_one())
    finally:
        await engine.dispose()


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


@dataclass
class Usage:
    """Wall time and CPU seconds of the client (this process) and the server process."""

    wall: float
    client_cpu: float
    server_cpu: float | None  # None without /proc

    @classmethod
    def now(cls, server_pid: int | Sequence[int]) -> Usage:
        """Now: the wall clock, this process's CPU, and the server's (the sum of several)."""
        pids = [server_pid] if isinstance(server_pid, int) else list(server_pid)
        each = [process_cpu_seconds(pid) for pid in pids]
        server = None if None in each else sum(cpu for cpu in each if cpu is not None)
        return cls(time.perf_counter(), own_cpu_seconds(), server)

    def since(self, start: Usage) -> Usage:
        server = None
        if self.server_cpu is not None and start.server_cpu is not None:
            server = self.server_cpu - start.server_cpu
        return Usage(self.wall - start.wall, self.client_cpu - start.client_cpu, server)


async def measure(
    server_pid: int | Sequence[int],
    clients: list[Client],
    loops: list[Coroutine[Any, Any, None]],
) -> tuple[int, Usage]:
    """Run the client loops; return the requests they made and what the window cost (the
    server's CPU: of every process ``server_pid`` names)."""
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


# --- databases --------------------------------------------------------------------------------


def command_line(
    description: str | None, defaults: Any, helps: Mapping[str, str] | None = None
) -> argparse.ArgumentParser:
    """A parser with a ``--flag`` for each field of the options dataclass ``defaults`` (typed by
    its default value; a boolean gets ``--flag``/``--no-flag``) and the backend flags."""
    parser = argparse.ArgumentParser(
        description=description, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    for item in dataclasses.fields(defaults):
        value = getattr(defaults, item.name)
        flag = "--" + item.name.replace("_", "-")
        help_text = f"{(helps or {}).get(item.name, '')} [default: {value}]".strip()
        if isinstance(value, bool):
            action = argparse.BooleanOptionalAction
            parser.add_argument(flag, action=action, default=value, help=help_text)
        else:
            parser.add_argument(flag, type=type(value), default=value, help=help_text)
    add_backend_arguments(parser)
    return parser


def options_from(args: argparse.Namespace, cls: type[OptionsT]) -> OptionsT:
    """The options dataclass ``cls`` filled from the parsed ``command_line``."""
    return cls(**{item.name: getattr(args, item.name) for item in dataclasses.fields(cls)})  # type: ignore[arg-type]


def on_each_backend(
    args: argparse.Namespace, label: str, check: Callable[[str, str], Report]
) -> list[Report]:
    """``check(backend name, URL of a fresh database)`` on each backend the options ask for."""
    with databases(args) as made:
        return [check(backend, made.new(backend, label)) for backend in made.names]


def add_backend_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--backend",
        choices=["sqlite", "postgres", "all"],
        default="all",
        help=f"all (default): SQLite, and PostgreSQL when {POSTGRES_ENV} or --postgres-url is set",
    )
    parser.add_argument(
        "--postgres-url",
        default=os.environ.get(POSTGRES_ENV),
        help="a PostgreSQL server URL (postgresql+asyncpg://USER@127.0.0.1:5432/DB); a scratch "
        f"database is created on it and dropped afterwards [env: {POSTGRES_ENV}]",
    )


class Databases:
    """Fresh, empty databases on the backends the command line asks for (``--backend``): SQLite
    files in a scratch directory, PostgreSQL databases created on the server and dropped by
    ``close``."""

    def __init__(self, options: argparse.Namespace, scratch: Path) -> None:
        if options.backend == "postgres" and not options.postgres_url:
            raise SystemExit(f"--backend postgres needs --postgres-url or {POSTGRES_ENV}")
        if options.backend == "all" and not options.postgres_url:
            print(f"PostgreSQL not run: set {POSTGRES_ENV} or --postgres-url", file=sys.stderr)
        self.scratch = scratch
        self.postgres_url: str | None = options.postgres_url
        self.names = [
            name
            for name, wanted in (("SQLite", "sqlite"), ("PostgreSQL", "postgres"))
            if options.backend in (wanted, "all") and (name == "SQLite" or self.postgres_url)
        ]
        self._created: list[str] = []

    def new(self, backend: str, label: str) -> str:
        """The URL of a new, empty database on ``backend`` ("SQLite" or "PostgreSQL")."""
        name = f"ccweb_{label}_{uuid.uuid4().hex[:8]}"
        if backend == "SQLite":
            return sqlite_url(self.scratch / f"{name}.db")
        assert self.postgres_url is not None
        self._created.append(name)
        return asyncio.run(create_database(self.postgres_url, name))

    def close(self) -> None:
        for name in self._created:
            assert self.postgres_url is not None
            asyncio.run(drop_database(self.postgres_url, name))
        self._created.clear()


@contextlib.contextmanager
def databases(options: argparse.Namespace) -> Iterator[Databases]:
    """``Databases`` in a scratch directory, all removed on exit."""
    with tempfile.TemporaryDirectory(prefix="ccweb-bench-") as scratch:
        made = Databases(options, Path(scratch))
        try:
            yield made
        finally:
            made.close()


def sqlite_url(path: Path) -> str:
    return f"sqlite+aiosqlite:///{path}"


TABLES = tuple(table.name for table in Base.metadata.sorted_tables)


@contextlib.asynccontextmanager
async def open_engine(url: str) -> AsyncIterator[AsyncEngine]:
    engine = create_engine(url)
    try:
        yield engine
    finally:
        await engine.dispose()


async def row_counts(engine: AsyncEngine) -> dict[str, int]:
    """How many rows each table holds, read in one statement."""
    columns = ", ".join(f"(SELECT count(*) FROM {name}) AS {name}" for name in TABLES)
    async with engine.connect() as connection:
        row = (await connection.execute(sa.text(f"SELECT {columns}"))).one()
    return {name: int(value) for name, value in zip(TABLES, row, strict=True)}


# --- figures ----------------------------------------------------------------------------------


@dataclass
class Figure:
    """One line of a report; ``must`` is the value an invariant requires (None: no invariant)."""

    name: str
    value: Any
    must: Any = None

    @property
    def failed(self) -> bool:
        return self.must is not None and self.value != self.must

    def cell(self) -> str:
        value = _shown(self.value)
        if self.must is None:
            return value
        return f"{value}  (must be {_shown(self.must)}: {'FAILED' if self.failed else 'ok'})"


def _shown(value: Any) -> str:
    return f"{value:,}" if isinstance(value, int) and not isinstance(value, bool) else str(value)


@dataclass
class Report:
    """The figures of one check on one backend."""

    title: str
    figures: list[Figure] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)
    #: How many problems ``render`` shows.
    shown: int = SHOWN_PROBLEMS

    def add(self, name: str, value: Any, must: Any = None) -> None:
        self.figures.append(Figure(name, value, must))

    def value(self, name: str) -> Any:
        return next(figure.value for figure in self.figures if figure.name == name)

    @property
    def ok(self) -> bool:
        return not self.problems and not any(figure.failed for figure in self.figures)

    def failures(self) -> list[str]:
        broken = [f"{f.name} = {f.value}, must be {f.must}" for f in self.figures if f.failed]
        return broken + self.problems

    def render(self) -> str:
        width = max((len(figure.name) for figure in self.figures), default=0)
        lines = [self.title, "-" * len(self.title)]
        lines += [f"  {figure.name:<{width}}  {figure.cell()}" for figure in self.figures]
        lines += [f"  problem: {problem}" for problem in self.problems[: self.shown]]
        if len(self.problems) > self.shown:
            lines.append(f"  … and {len(self.problems) - self.shown} more problems")
        return "\n".join(lines)


def finish(reports: Iterable[Report], header: str) -> int:
    """Print the reports; 0 when every invariant held, else 1 (the command's exit status)."""
    reports = list(reports)
    print(header)
    for report in reports:
        print()
        print(report.render())
    failed = [report for report in reports if not report.ok]
    print()
    if not reports:
        print("nothing was run")
        return 1
    if failed:
        print(f"FAILED: {', '.join(report.title for report in failed)}")
        return 1
    print("every invariant held")
    return 0


def machine() -> str:
    """One line on where the figures were measured."""
    return f"{os.cpu_count()} cores, Python {sys.version.split()[0]}, {sys.platform}"


def percentile(values: list[float], fraction: float) -> float:
    """The nearest-rank percentile of ``values`` (0 for none)."""
    if not values:
        return 0.0
    ordered = sorted(values)
    rank = max(0, min(len(ordered) - 1, round(fraction * len(ordered) + 0.5) - 1))
    return ordered[rank]


def milliseconds(seconds: float) -> str:
    return f"{seconds * 1000:.1f} ms"
