"""Isolation: without the token nothing is answered with data; no public bind without one;
a foreign Origin is refused.

1. Starts a real server with ``CCWEB_TOKEN`` set, seeds a conversation whose id, title and
   message hold marker strings, then sends every HTTP method to every path, and every host
   method and MCP method (each tool too) by POST, with no token and with wrong ones (another
   token, another scheme, the token with a character more, no scheme, a forged conversation
   credential in the header or the query). Each must be a 401 JSON-RPC error naming the fix
   (or, once the wrong tokens pass the login throttle's limit, a 429 with ``Retry-After``
   naming it; a forged credential on ``/mcp``, which checks credentials itself: any 4xx
   error), except
   ``GET /healthz``, which must tell only status, database kind, schema revision and version.
   No answer may hold a marker, the token or the database's location.
2. Starts ``ccweb-store serve`` (and ``python server.py``) on non-loopback hosts without a
   token: each must refuse to start, say why and what to do, and create no database.
3. With the right token, sends requests with foreign ``Origin`` headers to ``/mcp`` and
   ``/rpc``: each must be a 403; an allowed origin must be served.

Exits 1 when any check fails.

    python bench/isolation.py [--backend all]
"""

from __future__ import annotations

import asyncio
import secrets
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import orjson

from bench.harness import (
    JSON_HEADERS,
    ROOT,
    Connection,
    Report,
    ServerProcess,
    command_line,
    finish,
    free_port,
    machine,
    on_each_backend,
)
from ccweb_store.protocol import registry as rpc
from ccweb_store.protocol import registry as tools
from ccweb_store.protocol.jsonrpc import UNAUTHORIZED

MARKERS = ("isolation-secret-conversation", "Secret Title 7f3a", "the secret plan is 42")
HTTP_METHODS = ("GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS")
PATHS = ("/mcp", "/rpc", "/", "/healthz/", "/nope", "/mcp/x", "/rpc?x=1", "/MCP", "/.env")
MCP_METHODS = ("initialize", "ping", "tools/list", "resources/list", "notifications/initialized")
HEALTH_KEYS = {"status", "database", "revision", "version"}
PUBLIC_HOSTS = ("0.0.0.0", "::", "192.168.1.10")
FOREIGN_ORIGINS = (
    "http://evil.example",
    "null",
    "http://localhost.evil.example",
    "https://127.0.0.1.nip.io",
    "http://[::1].evil.example",
)


@dataclass
class Tally:
    tried: int = 0
    refused: int = 0
    with_data: list[str] = field(default_factory=list)
    wrong: list[str] = field(default_factory=list)


#: A conversation credential for the marked conversation, made up: it must open nothing.
FORGED_CREDENTIAL = f"ccw1.{MARKERS[0]}.cred_forged.9999999999.0.AAAAAAAAAAAAAAAAAAAAAAAAAAAA"


def wrong_credentials(token: str) -> list[tuple[dict[str, str], str]]:
    """What must not get through, as (headers, query string): none, another token, another
    scheme, near misses, a forged conversation credential in the header or the query."""
    headers = [
        {},
        {"Authorization": "Bearer not-the-token"},
        {"Authorization": f"Basic {token}"},
        {"Authorization": token},
        {"Authorization": f"Bearer {token}x"},
        {"Authorization": f"Bearer {token[:-1]}"},
        {"Authorization": "Bearer "},
        {"Authorization": f"Token {token}"},
        {"X-Api-Key": token},
        {"Authorization": f"Bearer {FORGED_CREDENTIAL}"},
    ]
    return [(each, "") for each in headers] + [({}, f"credential={FORGED_CREDENTIAL}")]


def post_bodies() -> list[tuple[str, bytes]]:
    """A JSON-RPC request for every host method and MCP method (every tool too)."""
    bodies: list[tuple[str, bytes]] = []
    for method in rpc.METHODS:
        params = {"sessionId": MARKERS[0], "id": MARKERS[0], "limit": 10}
        bodies.append(("/rpc", _message(method, params)))
    for method in MCP_METHODS:
        bodies.append((f"/mcp?sourceSessionId={MARKERS[0]}", _message(method, {})))
    for tool in tools.TOOLS:
        call = {"name": tool.name, "arguments": {"conversationId": MARKERS[0]}}
        bodies.append((f"/mcp?sourceSessionId={MARKERS[0]}", _message("tools/call", call)))
    return bodies


def _message(method: str, params: dict[str, Any]) -> bytes:
    return orjson.dumps({"jsonrpc": "2.0", "id": 1, "method": method, "params": params})


def leaks(body: bytes, token: str, database_url: str) -> list[str]:
    """What of the secrets an answer holds."""
    text = body.decode(errors="replace")
    found = [marker for marker in MARKERS if marker in text]
    location = database_url.split("///")[-1].split("@")[-1]
    return found + [
        name for name, value in (("token", token), ("database", location)) if value in text
    ]


async def seed(port: int, token: str) -> None:
    """A conversation and a message holding the markers, written with the token."""
    connection = Connection(port)
    headers = {**JSON_HEADERS, "Authorization": f"Bearer {token}"}
    for method, params in (
        ("session.create", {"id": MARKERS[0], "title": MARKERS[1]}),
        ("message.append", {"sessionId": MARKERS[0], "role": "user", "content": MARKERS[2]}),
    ):
        answer = await connection.request("POST", "/rpc", _message(method, params), headers)
        if answer.status != 200 or "result" not in answer.json():
            raise RuntimeError(f"seeding with the token failed: {answer.body[:300]!r}")
    # With the token, the data is there to be leaked: the check below is not vacuous.
    answer = await connection.request(
        "POST", "/rpc", _message("session.get", {"id": MARKERS[0]}), headers
    )
    if MARKERS[1] not in answer.body.decode():
        raise RuntimeError("the token did not give access to the seeded conversation")
    await connection.close()


async def without_token(port: int, token: str, database_url: str) -> Tally:
    tally = Tally()
    connection = Connection(port)
    requests: list[tuple[str, str, bytes]] = [
        (method, path, b"") for method in HTTP_METHODS for path in PATHS
    ]
    requests += [("POST", path, body) for path, body in post_bodies()]
    requests.append(("GET", "/healthz", b""))
    for credentials, query in wrong_credentials(token):
        for method, path, body in requests:
            headers = {**JSON_HEADERS, **credentials}
            if query:
                path += ("&" if "?" in path else "?") + query
            answer = await connection.request(method, path, body, headers)
            tally.tried += 1
            label = f"{method} {path[:60]} with {sorted(credentials) or 'no credentials'}"
            found = leaks(answer.body, token, database_url)
            if found:
                tally.with_data.append(f"{label}: the answer holds {found}")
            if path.split("?")[0] == "/healthz":
                keys = set(answer.json()) if answer.status == 200 else set()
                if answer.status != 200 or keys != HEALTH_KEYS:
                    tally.wrong.append(f"{label}: HTTP {answer.status}, keys {sorted(keys)}")
                continue
            if _credential_to_mcp(path, credentials, query):
                # /mcp checks a credential itself, after refusing what it never serves (405).
                expected = 400 <= answer.status < 500 and answer.status != 404
            else:
                expected = _is_unauthorized(method, answer.status, answer.headers, answer.body)
            if not expected:
                tally.wrong.append(f"{label}: HTTP {answer.status} {answer.body[:120]!r}")
                if 200 <= answer.status < 300:
                    tally.with_data.append(f"{label}: answered HTTP {answer.status}")
                continue
            tally.refused += 1
    await connection.close()
    return tally


def _credential_to_mcp(path: str, headers: dict[str, str], query: str) -> bool:
    credential = bool(query) or FORGED_CREDENTIAL in headers.get("Authorization", "")
    return credential and path.split("?")[0] == "/mcp"


def _is_unauthorized(method: str, status: int, headers: dict[str, str], body: bytes) -> bool:
    """A 401 asking for a bearer token, or the login throttle's 429 saying when to try again,
    with a JSON-RPC error saying what to send."""
    if status == 429:
        if not headers.get("retry-after", "").isdigit():
            return False
    elif status != 401 or not headers.get("www-authenticate", "").startswith("Bearer"):
        return False
    if method == "HEAD":
        return not body
    error = orjson.loads(body).get("error", {})
    return error.get("code") == UNAUTHORIZED and "CCWEB_TOKEN" in error.get("message", "")


async def foreign_origins(port: int, token: str) -> Tally:
    tally = Tally()
    connection = Connection(port)
    auth = {**JSON_HEADERS, "Authorization": f"Bearer {token}"}
    for origin in FOREIGN_ORIGINS:
        for path, body in (("/mcp", _message("ping", {})), ("/rpc", _message("tools.list", {}))):
            answer = await connection.request("POST", path, body, {**auth, "Origin": origin})
            tally.tried += 1
            if answer.status == 403 and "CCWEB_ALLOWED_ORIGINS" in answer.body.decode():
                tally.refused += 1
            else:
                tally.wrong.append(f"Origin {origin} on {path}: HTTP {answer.status}")
    allowed = await connection.request(
        "POST", "/mcp", _message("ping", {}), {**auth, "Origin": "http://localhost:5173"}
    )
    if allowed.status != 200:
        tally.wrong.append(f"an allowed origin was refused: HTTP {allowed.status}")
    await connection.close()
    return tally


def public_binds(scratch: Path) -> Tally:
    """Each non-loopback start without a token must refuse, say why, and create nothing."""
    tally = Tally()
    commands: list[tuple[list[str], dict[str, str]]] = [
        (["-m", "ccweb_store", "serve", "--host", host], {}) for host in PUBLIC_HOSTS
    ]
    commands.append((["-m", "ccweb_store", "serve"], {"CCWEB_HOST": "0.0.0.0"}))
    commands.append((["-m", "ccweb_store", "serve", "--host", "0.0.0.0", "--token", ""], {}))
    commands.append(([str(ROOT / "server.py"), "--host", "0.0.0.0"], {}))
    for number, (args, env) in enumerate(commands):
        database = scratch / f"public-{number}.db"
        environment = {
            "PATH": "/usr/bin:/bin",
            "PYTHONPATH": str(ROOT),
            "CCWEB_DATABASE_URL": f"sqlite+aiosqlite:///{database}",
            "CCWEB_PORT": str(free_port()),
            **env,
        }
        tally.tried += 1
        label = " ".join(["python", *args[-3:]]) + (f" with {env}" if env else "")
        try:
            done = subprocess.run(
                [sys.executable, *args],
                cwd=scratch,
                env=environment,
                capture_output=True,
                text=True,
                timeout=30,
            )
        except subprocess.TimeoutExpired:
            tally.wrong.append(f"{label}: still running after 30 s (it started)")
            continue
        said = done.stderr
        if done.returncode == 0 or "CCWEB_TOKEN" not in said or "127.0.0.1" not in said:
            tally.wrong.append(f"{label}: exit {done.returncode}, said {said[-300:]!r}")
        elif database.exists():
            tally.wrong.append(f"{label}: refused, but created {database.name}")
        else:
            tally.refused += 1
    return tally


def isolation_report(title: str, tokenless: Tally, origins: Tally, binds: Tally) -> Report:
    report = Report(title)
    report.add("requests without a valid token", tokenless.tried)
    report.add("  answered with data", len(tokenless.with_data), must=0)
    report.add(
        "  not refused as documented (or /healthz saying more)", len(tokenless.wrong), must=0
    )
    report.add("non-loopback starts without a token refused", binds.refused, must=binds.tried)
    report.add("foreign Origins refused with 403", origins.refused, must=origins.tried)
    report.problems += tokenless.with_data + tokenless.wrong + binds.wrong + origins.wrong
    return report


def check_backend(name: str, database_url: str) -> Report:
    token = secrets.token_urlsafe(24)
    server = ServerProcess(database_url, {"CCWEB_TOKEN": token}).start()
    try:

        async def against_server() -> tuple[Tally, Tally]:
            await seed(server.port, token)
            # The foreign Origins first: they send the right token, which the login throttle
            # refuses (429) for a minute once the wrong ones below have passed its limit.
            origins = await foreign_origins(server.port, token)
            return await without_token(server.port, token, database_url), origins

        tokenless, origins = asyncio.run(against_server())
    finally:
        server.stop()
    with tempfile.TemporaryDirectory(prefix="ccweb-bind-") as scratch:
        binds = public_binds(Path(scratch))
    return isolation_report(
        f"{name}: one server process with CCWEB_TOKEN", tokenless, origins, binds
    )


def main(argv: list[str] | None = None) -> int:
    @dataclass
    class NoOptions:
        pass

    args = command_line(__doc__, NoOptions()).parse_args(argv)
    return finish(on_each_backend(args, "isolation", check_backend), f"isolation; {machine()}")


if __name__ == "__main__":
    sys.exit(main())
