"""Side by side: each figure of ccweb-store as a ratio to a peer measured in the same run.

A ratio measured in one run means something on a noisy machine where a rate alone does not:
whatever slows the machine down slows both sides. HTTP figures come in rounds that
interleave every measurement (``--rounds``), so drift hits all of them alike; each ratio is
the median of its rounds, with their spread. Rows (``--only`` picks some):

  send       ``tools/call`` of ``ccweb_send_message`` (``return_and_continue``) over ``/mcp``,
             requests/s, against a bare Starlette JSON endpoint (goal ≥ 0.30 of it); and
             against the aiosqlite floor (``floor.py``): the same SQL statements run straight
             on aiosqlite by a bare Starlette endpoint (≥ 0.8 of it)
  list       ``tools/call`` of ``ccweb_list_user_inputs`` over ``/mcp``, the same two peers
             (≥ 0.50 of the bare endpoint, ≥ 0.8 of the floor)
  sdk        a trivial tool call on our ``/mcp`` against the official MCP Python SDK's
             stateless Streamable HTTP server serving one trivial tool (goal ≥ 2×)
  roundtrip  send → ``run.claim`` → ``run.complete``, round trips/s, against a third of the
             bare endpoint's requests/s, a round trip being three requests (goal
             ``roundtrip.GOALS``: ≥ 0.13 of it on SQLite, ≥ 0.08 on PostgreSQL)
  latency    ``ccweb_list_user_inputs`` latency in process on a 100,000-message conversation
             against a 1,000-message one (≤ 1.3×) and against cc-web's way, loading the
             session's JSON file and filtering it in Python (≥ 1000× faster)
  import     ``import-json`` rows/s against ``sqlite3.executemany`` of the same rows (≥ 0.5),
             with the importer's peak RSS

Every server runs in its own process under uvicorn with the same settings, driven by the
same client (``harness.Client``) at the same concurrency. ``roundtrip`` and ``latency`` run
on SQLite and, when ``CCWEB_BENCH_POSTGRES_URL`` names a PostgreSQL server (a scratch
database is made and dropped there), on PostgreSQL; the other rows are SQLite's, the
embedded default. The floor rows tell what the SQLite driver's thread hand-off costs by
itself: where a bare-endpoint goal is out of reach for it alone, the floor's goal applies.
About three minutes at the defaults; ``--quick`` checks that everything
runs in seconds (its figures mean nothing).

    python bench/compare.py [--seconds 1.5] [--rounds 5] [--only send,list,...] [--quick]
"""

from __future__ import annotations

import argparse
import asyncio
import importlib
import os
import platform
import statistics
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from importlib.metadata import version
from pathlib import Path
from typing import Any

import roundtrip
import sqlalchemy as sa
import user_inputs
from harness import (
    Client,
    Usage,
    free_port,
    ping,
    postgres_database,
    repeat,
    serve_app,
    serve_ccweb,
    serve_ceiling,
    serve_floor,
    stop,
)

from ccweb_store.config import Settings
from ccweb_store.store.db import migrate
from ccweb_store.store.models import Session
from ccweb_store.store.uow import Store

import_bench = importlib.import_module("import")  # bench/import.py ("import" is a keyword)

ROWS = ("send", "list", "sdk", "roundtrip", "latency", "import")
POSTGRES_ENV = "CCWEB_BENCH_POSTGRES_URL"
SKIPPED_POSTGRES = f"skipped: set {POSTGRES_ENV}"

SENDER = "sender"
SENT = "Run the tests and report back."
#: The conversation ``ccweb_list_user_inputs`` reads in the ``list`` row.
LISTED_SIZE = 1_000
#: The trivial call's conversation: one short user message.
TRIVIAL_SIZE = 1
#: The goals against the bare endpoint, and against the aiosqlite floor (both rows).
SEND_GOAL, LIST_GOAL, FLOOR_GOAL = 0.30, 0.50, 0.8
#: A bound on sends per second, to create enough targets (each send needs an idle one).
MAX_SENDS_PER_SECOND = 6_000

#: The official SDK's server with one trivial tool: stateless, JSON answers, logging at
#: WARNING like our server (its default, INFO, logs a line per request). mcp 2.x calls
#: FastMCP ``MCPServer`` and takes the transport options in ``streamable_http_app``.
SDK_APP = """
try:
    from mcp.server.mcpserver import MCPServer
except ImportError:  # mcp 1.x
    from mcp.server.fastmcp import FastMCP

    server = FastMCP("bench", stateless_http=True, json_response=True, log_level="WARNING")
    app_options = {}
else:
    server = MCPServer("bench", log_level="WARNING")
    app_options = {"stateless_http": True, "json_response": True}


@server.tool()
def echo(text: str) -> str:
    \"\"\"Return the text.\"\"\"
    return text


app = server.streamable_http_app(**app_options)
"""


@dataclass
class Row:
    """One line of the table."""

    label: str
    ours: str = ""
    peer: str = ""
    ratios: list[float] = field(default_factory=list)
    goal: str = ""
    #: Whether the goal is met; None when there is no goal, or the row was skipped.
    met: bool | None = None
    skipped: str = ""

    def ratio_text(self) -> str:
        if not self.ratios:
            return ""
        median = statistics.median(self.ratios)
        text = f"{median:.2f}" if median < 10 else f"{median:,.0f}"
        if len(self.ratios) > 1:
            low, high = min(self.ratios), max(self.ratios)
            text += f" ({low:.2f}–{high:.2f})" if high < 10 else f" ({low:,.0f}–{high:,.0f})"
        return text

    def verdict(self) -> str:
        if self.skipped:
            return self.skipped
        if self.met is None:
            return "—"
        return "met" if self.met else "NOT met"


def at_least(row: Row, goal: float, unit: str = "") -> Row:
    """Set the row's goal: the median ratio at least ``goal``."""
    row.goal = f"≥ {goal:g}{unit}"
    row.met = bool(row.ratios) and statistics.median(row.ratios) >= goal
    return row


def print_table(rows: list[Row]) -> None:
    header = ("row", "ours", "peer", "ratio (spread)", "goal", "")
    lines = [(r.label, r.ours, r.peer, r.ratio_text(), r.goal, r.verdict()) for r in rows]
    widths = [max(len(line[i]) for line in [header, *lines]) for i in range(len(header))]
    for line in [header, tuple("-" * w for w in widths), *lines]:
        cells = (cell.ljust(width) for cell, width in zip(line, widths, strict=True))
        print("  ".join(cells).rstrip())


# --- HTTP: /mcp calls, the SDK, round trips ---------------------------------------------------


@dataclass
class Window:
    """One measuring window: requests (or round trips) per second and what they cost."""

    count: int
    usage: Usage

    @property
    def rate(self) -> float:
        return self.count / self.usage.wall

    def server_ms(self) -> float | None:
        cpu = self.usage.server_cpu
        return None if cpu is None else cpu / max(self.count, 1) * 1000


async def prefill(url: str, targets: int) -> None:
    """The ``send``/``list``/``sdk`` rows' database: the conversations they read, a sender
    and ``targets`` idle target conversations (a send to a busy target is refused)."""
    store = Store.from_settings(Settings(database_url=url, token=None))
    try:
        await migrate(store.engine)
        for size in (LISTED_SIZE, TRIVIAL_SIZE):
            await user_inputs.fill(store, size, user_inputs.conversation_messages(size))
        rows = [{"id": SENDER, "title": "Sender"}]
        rows += [{"id": f"target-{i}", "title": f"Target {i}"} for i in range(targets)]
        async with store.engine.begin() as connection:
            await connection.execute(sa.insert(Session), rows)
    finally:
        await store.dispose()


def tool_call(name: str, arguments: dict[str, Any], source: str) -> Callable[[Client], Any]:
    """A request that calls one of our tools over ``/mcp`` and insists it succeeded."""
    path = f"/mcp?sourceSessionId={source}"
    params = {"name": name, "arguments": arguments}

    async def call(client: Client) -> bool:
        result = await client.call(path, "tools/call", params)
        if result.get("isError"):
            raise RuntimeError(f"{name} failed: {result['structuredContent']}")
        return True

    return call


def sends(targets: Iterator[str]) -> Callable[[Client], Any]:
    """``ccweb_send_message`` (``return_and_continue``) to each idle target once; stops when
    they run out (the window then ends early, and its rate is still right)."""

    async def send(client: Client) -> bool:
        target = next(targets, None)
        if target is None:
            return False
        arguments = {
            "targetConversationId": target,
            "content": SENT,
            "replyMode": "return_and_continue",
        }
        result = await client.call(
            f"/mcp?sourceSessionId={SENDER}",
            "tools/call",
            {"name": "ccweb_send_message", "arguments": arguments},
        )
        if result.get("isError"):
            raise RuntimeError(f"send failed: {result['structuredContent']}")
        return True

    return send


def floor_sends(targets: Iterator[str]) -> Callable[[Client], Any]:
    """The floor's send (``floor.Floor.send``) to each idle target once, as ``sends``."""

    async def send(client: Client) -> bool:
        target = next(targets, None)
        if target is None:
            return False
        params = {"source": SENDER, "target": target, "content": SENT}
        await client.call("/send", "send", params)
        return True

    return send


def floor_list(conversation: str) -> Callable[[Client], Any]:
    """The floor's list (``floor.Floor.latest_inputs``) of ``conversation``."""

    async def list_inputs(client: Client) -> bool:
        result = await client.call("/list", "list", {"conversation": conversation})
        if not result["inputs"]:
            raise RuntimeError(f"the floor found no input in {conversation}")
        return True

    return list_inputs


async def sdk_echo(client: Client) -> bool:
    result = await client.call("/mcp", "tools/call", {"name": "echo", "arguments": {"text": "hi"}})
    if result.get("isError"):
        raise RuntimeError(f"the SDK's echo failed: {result}")
    return True


def database_url(backend: str, options: argparse.Namespace, tmp: Path, name: str) -> str:
    """A fresh database for one use: a SQLite file in ``tmp``, or a scratch PostgreSQL
    database that ``options.cleanup`` drops at the end."""
    if backend == "SQLite":
        return f"sqlite+aiosqlite:///{tmp / name}.db"
    url, drop = postgres_database(options.postgres)
    options.cleanup.callback(drop)
    return url


@contextmanager
def servers(
    options: argparse.Namespace, tmp: Path, wanted: set[str]
) -> Iterator[dict[str, tuple[Any, int]]]:
    """Start the servers the wanted rows need: {name: (process, port)}; stopped on exit."""
    started: dict[str, tuple[Any, int]] = {}
    with ExitStack() as stack:

        def start(name: str, serve: Callable[[int], Any]) -> None:
            port = free_port()
            process = serve(port)
            stack.callback(stop, process)
            started[name] = (process, port)

        start("bare", lambda port: serve_ceiling(str(tmp), port))
        if wanted & {"send", "list", "sdk"}:
            url = database_url("SQLite", options, tmp, "mcp")
            asyncio.run(prefill(url, options.targets))
            start("ccweb", lambda port: serve_ccweb(url, port))
        if wanted & {"send", "list"}:
            # A database of its own, filled alike, so that both send to idle targets.
            floor_url = database_url("SQLite", options, tmp, "floor")
            asyncio.run(prefill(floor_url, options.targets))
            start("floor", lambda port: serve_floor(floor_url, port))
        if "sdk" in wanted:
            start("sdk", lambda port: serve_app(SDK_APP, str(tmp), port))
        if "roundtrip" in wanted:
            for backend in options.measured_backends:
                url = database_url(backend, options, tmp, "roundtrip")
                start(f"roundtrip {backend}", lambda port, url=url: serve_ccweb(url, port))
        yield started


def http_measurements(
    options: argparse.Namespace, started: dict[str, tuple[Any, int]], wanted: set[str]
) -> dict[str, list[Window]]:
    """Every round: each wanted measurement once, in the same order; {name: windows}."""
    plan: list[tuple[str, str, Callable[[Client], Any] | None]] = [("bare", "bare", ping)]
    if "send" in wanted:
        targets = iter(f"target-{i}" for i in range(options.targets))
        plan.append(("send", "ccweb", sends(targets)))
        floor_targets = iter(f"target-{i}" for i in range(options.targets))
        plan.append(("floor send", "floor", floor_sends(floor_targets)))
    if "list" in wanted:
        listed = f"bench-{LISTED_SIZE}"
        plan.append(("list", "ccweb", tool_call("ccweb_list_user_inputs", {}, listed)))
        plan.append(("floor list", "floor", floor_list(listed)))
    if "sdk" in wanted:
        trivial = tool_call("ccweb_list_user_inputs", {"limit": 1}, f"bench-{TRIVIAL_SIZE}")
        plan += [("trivial", "ccweb", trivial), ("sdk", "sdk", sdk_echo)]
    if "roundtrip" in wanted:
        plan += [(f"roundtrip {b}", f"roundtrip {b}", None) for b in options.measured_backends]

    windows: dict[str, list[Window]] = {name: [] for name, _, _ in plan}
    for _ in range(options.rounds):
        for name, server, request in plan:
            process, port = started[server]
            if request is None:  # a round trip is three requests: roundtrip.py measures it
                result = asyncio.run(
                    roundtrip.round_trips(port, process.pid, options.seconds, options.clients)
                )
                windows[name].append(Window(result.count, result.usage))
                continue
            count, usage = asyncio.run(
                repeat(port, process.pid, options.seconds, options.clients, request)
            )
            windows[name].append(Window(count, usage))
    return windows


def per_round(ours: list[Window], peer: list[Window], scale: float = 1) -> list[float]:
    return [o.rate / (p.rate * scale) for o, p in zip(ours, peer, strict=True)]


def rate_text(windows: list[Window], unit: str, scale: float = 1) -> str:
    return f"{statistics.median(w.rate * scale for w in windows):,.0f} {unit}"


def mcp_rows(windows: dict[str, list[Window]]) -> list[Row]:
    """The ``send``, ``list`` and ``sdk`` rows that were measured, each of the first two
    against the bare endpoint and against the aiosqlite floor."""
    bare = windows["bare"]
    rows = []
    for name, label, goal in (
        ("send", "send_message (return_and_continue) over /mcp", SEND_GOAL),
        ("list", "list_user_inputs over /mcp", LIST_GOAL),
    ):
        if name not in windows:
            continue
        ours = rate_text(windows[name], "req/s")
        row = Row(f"{label} vs bare Starlette", ours, rate_text(bare, "req/s"))
        row.ratios = per_round(windows[name], bare)
        rows.append(at_least(row, goal))
        peer = windows[f"floor {name}"]
        row = Row(f"{name} vs aiosqlite floor", ours, rate_text(peer, "req/s"))
        row.ratios = per_round(windows[name], peer)
        rows.append(at_least(row, FLOOR_GOAL))
    if "sdk" in windows:
        row = Row(
            "trivial tool call over /mcp vs MCP SDK stateless server",
            rate_text(windows["trivial"], "req/s"),
            rate_text(windows["sdk"], "req/s"),
            per_round(windows["trivial"], windows["sdk"]),
        )
        rows.append(at_least(row, 2, "×"))
    return rows


def roundtrip_rows(options: argparse.Namespace, windows: dict[str, list[Window]]) -> list[Row]:
    rows = []
    for backend in options.backends:
        row = Row(f"round trip on {backend} vs bare Starlette / 3")
        name = f"roundtrip {backend}"
        if name not in windows:
            row.skipped = SKIPPED_POSTGRES
            rows.append(row)
            continue
        row.ours = rate_text(windows[name], "round trips/s")
        row.peer = rate_text(windows["bare"], "round trips/s", scale=1 / 3)
        row.ratios = per_round(windows[name], windows["bare"], scale=1 / 3)
        rows.append(at_least(row, roundtrip.GOALS[backend]))
    return rows


WINDOW_NAMES = {
    "bare": "bare Starlette endpoint",
    "send": "ccweb_send_message",
    "floor send": "the floor's send (aiosqlite)",
    "list": "ccweb_list_user_inputs",
    "floor list": "the floor's list (aiosqlite)",
    "trivial": "trivial call (ccweb_list_user_inputs, limit 1, 1 message)",
    "sdk": "MCP SDK echo",
}


def print_http_details(windows: dict[str, list[Window]]) -> None:
    print("\nHTTP windows: rate per round; medians of server CPU per request (per round trip)")
    for name, measured in windows.items():
        rates = ", ".join(f"{w.rate:,.0f}" for w in measured)
        wall = statistics.median(w.usage.wall for w in measured)
        client = statistics.median(w.usage.client_cpu for w in measured) / wall
        server = [ms for w in measured if (ms := w.server_ms()) is not None]
        cpu = "server CPU not measured (no /proc)"
        if server:
            share = statistics.median(w.usage.server_cpu or 0 for w in measured) / wall
            cpu = f"server CPU {statistics.median(server):.3f} ms ({share:.0%} of a core)"
        print(f"  {WINDOW_NAMES.get(name, name)}: {rates}/s; {cpu}; client {client:.0%} of a core")


# --- In process: ccweb_list_user_inputs latency ------------------------------------------------


def latency_rows(options: argparse.Namespace, tmp: Path) -> list[Row]:
    small, large = options.latency_sizes
    rows = []
    for backend in options.backends:
        growth = Row(f"list_user_inputs latency, {large:,} vs {small:,} msgs, {backend}")
        versus = Row(f"list_user_inputs at {large:,} msgs vs JSON file, {backend}")
        if backend not in options.measured_backends:
            growth.skipped = versus.skipped = SKIPPED_POSTGRES
            rows += [growth, versus]
            continue
        url = database_url(backend, options, tmp, "latency")
        sql_ms, json_ms = asyncio.run(measure_latency(options, url, tmp))
        growth.ours = f"{statistics.median(sql_ms[large]):.3f} ms"
        growth.peer = f"{statistics.median(sql_ms[small]):.3f} ms"
        growth.ratios = [b / s for b, s in zip(sql_ms[large], sql_ms[small], strict=True)]
        growth.goal = "≤ 1.3×"
        growth.met = statistics.median(growth.ratios) <= 1.3
        versus.ours = growth.ours
        versus.peer = f"{statistics.median(json_ms):.1f} ms"
        versus.ratios = [j / s for j, s in zip(json_ms, sql_ms[large], strict=True)]
        rows += [growth, at_least(versus, user_inputs.TARGET_SPEEDUP, "× faster")]
    return rows


async def measure_latency(
    options: argparse.Namespace, url: str, json_dir: Path
) -> tuple[dict[int, list[float]], list[float]]:
    """Per round: the median latency at each size, and one load-and-filter of the large JSON
    file; the same code as ``user_inputs.py``, in rounds so that each gives a ratio."""
    sizes = options.latency_sizes
    store, sources = await user_inputs.prepare(url, json_dir, sizes)
    sql_ms: dict[int, list[float]] = {size: [] for size in sizes}
    json_ms = []
    try:
        await user_inputs.sql_round(store, sources, options.latency_runs)  # warm up
        for _ in range(options.latency_rounds):
            measured = await user_inputs.sql_round(store, sources, options.latency_runs)
            for size, samples in measured.items():
                sql_ms[size].append(statistics.median(samples))
            json_ms.append(user_inputs.json_sample_ms(json_dir, sizes[-1]))
    finally:
        await store.dispose()
    return sql_ms, json_ms


# --- import-json -----------------------------------------------------------------------------


def import_rows(options: argparse.Namespace, tmp: Path) -> tuple[list[Row], str]:
    """The import row, and a line of details: rounds of the importer (in a process of its
    own, for its peak RSS) then the plain copy of the rows it wrote."""
    sessions, messages = options.import_size
    state = tmp / "state"
    import_bench.generate_state(state, sessions, messages)
    runs, peers = [], []
    for i in range(options.import_rounds):
        imported = tmp / f"importer-{i}.db"
        run = import_bench.import_in_subprocess(imported, state)
        seconds, cpu, rows = import_bench.plain_sqlite_insert(imported, tmp / f"baseline-{i}.db")
        if rows != run.rows:
            raise RuntimeError(f"the importer wrote {run.rows} rows, the copy {rows}")
        runs.append(run)
        peers.append((seconds, cpu))
    rows = runs[0].rows
    row = Row(
        f"import-json ({rows:,} rows) vs sqlite3.executemany",
        f"{statistics.median(rows / run.seconds for run in runs):,.0f} rows/s;"
        f" peak RSS {max(run.peak_rss_mb for run in runs):.0f} MB"
        f" ({max(run.rss_before_mb for run in runs):.0f} before)",
        f"{statistics.median(rows / seconds for seconds, _ in peers):,.0f} rows/s",
        [seconds / run.seconds for run, (seconds, _) in zip(runs, peers, strict=True)],
    )
    by_cpu = [cpu / run.cpu_seconds for run, (_, cpu) in zip(runs, peers, strict=True)]
    details = (
        f"import: {sessions} sessions x {messages} messages; importer CPU"
        f" {', '.join(f'{run.cpu_seconds:.2f}' for run in runs)} s, copy CPU"
        f" {', '.join(f'{cpu:.2f}' for _, cpu in peers)} s: ratio by CPU time"
        f" {statistics.median(by_cpu):.2f}"
    )
    return [at_least(row, 0.5)], details


# --- main ------------------------------------------------------------------------------------


def parse_options(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--seconds", type=float, default=1.5, help="length of each HTTP window")
    parser.add_argument("--rounds", type=int, default=5, help="HTTP rounds (each window once)")
    parser.add_argument("--clients", type=int, default=8, help="concurrent client loops")
    parser.add_argument(
        "--backend",
        choices=["sqlite", "postgres", "all"],
        default="all",
        help=f"for roundtrip and latency; all: SQLite, and PostgreSQL when {POSTGRES_ENV} is set",
    )
    parser.add_argument(
        "--only",
        type=lambda text: [name.strip() for name in text.split(",") if name.strip()],
        default=list(ROWS),
        help=f"comma-separated rows to measure, of: {', '.join(ROWS)}",
    )
    parser.add_argument(
        "--quick", action="store_true", help="tiny sizes and windows: checks it runs, nothing more"
    )
    options = parser.parse_args(argv)
    unknown = set(options.only) - set(ROWS)
    if unknown:
        parser.error(f"unknown rows {sorted(unknown)}; choose among {', '.join(ROWS)}")
    options.postgres = os.environ.get(POSTGRES_ENV)
    if options.backend == "postgres" and not options.postgres:
        parser.error(f"--backend postgres needs {POSTGRES_ENV}")
    options.backends = {
        "sqlite": ["SQLite"],
        "postgres": ["PostgreSQL"],
        "all": ["SQLite", "PostgreSQL"],
    }[options.backend]
    options.measured_backends = [b for b in options.backends if b == "SQLite" or options.postgres]
    options.latency_sizes = (1_000, 100_000)
    options.latency_rounds, options.latency_runs = 7, 50
    options.import_size, options.import_rounds = (100, 1_000), 3
    if options.quick:
        options.seconds, options.rounds = 0.2, 1
        options.latency_sizes, options.latency_rounds, options.latency_runs = (10, 100), 1, 3
        options.import_size, options.import_rounds = (3, 20), 1
    options.targets = int(options.rounds * options.seconds * MAX_SENDS_PER_SECOND) + 100
    return options


def main(argv: list[str] | None = None) -> None:
    options = parse_options(argv)
    wanted = set(options.only)
    began = time.perf_counter()
    load = os.getloadavg()
    rows: list[Row] = []
    windows: dict[str, list[Window]] = {}
    import_details = ""
    with tempfile.TemporaryDirectory(prefix="ccweb-compare-") as scratch, ExitStack() as cleanup:
        options.cleanup = cleanup
        tmp = Path(scratch)
        if wanted & {"send", "list", "sdk", "roundtrip"}:
            with servers(options, tmp, wanted) as started:
                windows = http_measurements(options, started, wanted)
            rows += mcp_rows(windows)
        if "latency" in wanted:
            rows += latency_rows(options, tmp)
        if "import" in wanted:
            imported, import_details = import_rows(options, tmp)
            rows += imported
        if "roundtrip" in wanted:
            rows += roundtrip_rows(options, windows)
    print(
        f"{platform.node()}: {os.cpu_count()} cores, Python {platform.python_version()},"
        f" mcp {version('mcp')}; load average {load[0]:.2f} before, {os.getloadavg()[0]:.2f}"
        f" after; {time.perf_counter() - began:.0f} s"
    )
    print(
        f"HTTP: {options.rounds} rounds of {options.seconds:g} s windows, {options.clients}"
        " clients; ratio = median of the rounds' ratios (min–max)\n"
    )
    print_table(rows)
    if windows:
        print_http_details(windows)
    if import_details:
        print(f"\n{import_details}")


if __name__ == "__main__":
    main()
