"""``compare.py``'s HTTP rows: ``/mcp`` calls against the bare endpoint and the aiosqlite
floor, our trivial call against the MCP SDK, round trips against the bare endpoint (and on
SQLite against the floor); every window measured in rounds."""

from __future__ import annotations

import argparse
import asyncio
import statistics
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import roundtrip
import sqlalchemy as sa
import user_inputs
from compare_rows import SKIPPED_POSTGRES, Row, at_least, database_url
from harness import (
    Client,
    Usage,
    free_port,
    ping,
    repeat,
    serve_app,
    serve_ccweb,
    serve_ceiling,
    serve_floor,
    stop,
)

from ccweb_store.config import Settings
from ccweb_store.store.db import migrate
from ccweb_store.store.models import SessionRow
from ccweb_store.store.uow import Store

SENDER = "sender"
SENT = roundtrip.SENT
#: The conversation ``ccweb_list_user_inputs`` reads in the ``list`` row.
LISTED_SIZE = 1_000
#: The trivial call's conversation: one short user message.
TRIVIAL_SIZE = 1
#: The goals against the bare endpoint, and against the aiosqlite floor (both rows).
SEND_GOAL, LIST_GOAL, FLOOR_GOAL = 0.30, 0.50, 0.8

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


async def migrated(url: str) -> None:
    """Create the schema in the empty database ``url`` (the round trips make their own
    conversations)."""
    store = Store.from_settings(Settings(database_url=url, token=None))
    try:
        await migrate(store.engine)
    finally:
        await store.dispose()


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
            await connection.execute(sa.insert(SessionRow), rows)
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
        result = await roundtrip.send_call(client, SENDER, target)
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
            if "SQLite" in options.measured_backends:
                floor_url = database_url("SQLite", options, tmp, "roundtrip-floor")
                asyncio.run(migrated(floor_url))
                start("roundtrip floor", lambda port: serve_floor(floor_url, port))
        yield started


def http_measurements(
    options: argparse.Namespace, started: dict[str, tuple[Any, int]], wanted: set[str]
) -> dict[str, list[Window]]:
    """Every round: each wanted measurement once, in the same order; {name: windows}."""
    plan: list[tuple[str, str, Callable[[Client], Any] | roundtrip.Service]] = [
        ("bare", "bare", ping)
    ]
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
        for backend in options.measured_backends:
            plan.append((f"roundtrip {backend}", f"roundtrip {backend}", roundtrip.SERVICE))
            if backend == "SQLite":
                plan.append(("roundtrip floor", "roundtrip floor", roundtrip.FLOOR))

    windows: dict[str, list[Window]] = {name: [] for name, _, _ in plan}
    for _ in range(options.rounds):
        for name, server, request in plan:
            process, port = started[server]
            if isinstance(request, roundtrip.Service):  # three requests: roundtrip.py measures it
                result = asyncio.run(
                    roundtrip.round_trips(
                        port, process.pid, options.seconds, options.clients, request
                    )
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


def within_reach(row: Row, goal: float, floor_share: float) -> Row:
    """The goal against the bare endpoint, when meeting the floor's goal reaches it
    (``floor_share``: the aiosqlite floor's ratio to the same peer). Where ``FLOOR_GOAL`` of
    the floor stays below it, the same statements straight on aiosqlite leave no room for
    what the service must do besides: aiosqlite's hand-off puts the goal out of reach, the row
    shows the floor's share and no verdict, and the floor row's goal applies instead."""
    if floor_share * FLOOR_GOAL >= goal:
        return at_least(row, goal)
    row.goal = f"≥ {goal:g} (floor: {floor_share:.2f})"
    row.met = None
    return row


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
        peer = windows[f"floor {name}"]
        rows.append(within_reach(row, goal, statistics.median(per_round(peer, bare))))
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
    """Round trips against a third of the bare endpoint on each backend; on SQLite also
    against the aiosqlite floor's round trips, which decide whether SQLite's bare goal is
    within reach (``within_reach``). PostgreSQL's goal always applies."""
    rows = []
    for backend in options.backends:
        row = Row(f"round trip on {backend} vs bare Starlette / 3")
        name = f"roundtrip {backend}"
        if name not in windows:
            row.skipped = SKIPPED_POSTGRES
            rows.append(row)
            continue
        ours = rate_text(windows[name], "round trips/s")
        row.ours = ours
        row.peer = rate_text(windows["bare"], "round trips/s", scale=1 / 3)
        row.ratios = per_round(windows[name], windows["bare"], scale=1 / 3)
        goal = roundtrip.GOALS[backend]
        if backend != "SQLite":
            rows.append(at_least(row, goal))
            continue
        peer = windows["roundtrip floor"]
        floor_share = statistics.median(per_round(peer, windows["bare"], scale=1 / 3))
        rows.append(within_reach(row, goal, floor_share))
        row = Row(f"round trip on {backend} vs aiosqlite floor", ours)
        row.peer = rate_text(peer, "round trips/s")
        row.ratios = per_round(windows[name], peer)
        rows.append(at_least(row, FLOOR_GOAL))
    return rows


WINDOW_NAMES = {
    "bare": "bare Starlette endpoint",
    "send": "ccweb_send_message",
    "floor send": "the floor's send (aiosqlite)",
    "list": "ccweb_list_user_inputs",
    "floor list": "the floor's list (aiosqlite)",
    "roundtrip SQLite": "round trip on SQLite (per round trip)",
    "roundtrip PostgreSQL": "round trip on PostgreSQL (per round trip)",
    "roundtrip floor": "the floor's round trip (aiosqlite, per round trip)",
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
