"""MCP over stdio bridged to a running server: each newline-delimited JSON-RPC message read on
stdin is posted to the server's ``/mcp`` with the source context (or a conversation credential,
sent as ``Authorization: Bearer``), and the answer written back on stdout; logs go to stderr.

It loads no tool, service or store, so an agent's client that starts it (``mcp-stdio --url``)
has its tools at once: Claude Code and Codex wait only a few seconds for a stdio server.
"""

from __future__ import annotations

import asyncio
import logging
import sys
from collections.abc import Awaitable, Callable
from typing import Any, BinaryIO

import httpx

from ccweb_store.domain.context import Source
from ccweb_store.protocol import jsonrpc
from ccweb_store.protocol.mcp_wire import (
    NAMED_PARAMS,
    PROTOCOL_VERSION_KEY,
    encode_header_value,
    is_header_safe,
    is_modern,
)

log = logging.getLogger("ccweb_store.stdio")

#: Answers one decoded payload (and the line it was read from): the response, or its JSON
#: text as it is to be written; ``None`` when no response is due.
Answer = Callable[[Any, bytes], Awaitable[Any | None]]


async def serve_lines(answer: Answer, stdin: BinaryIO, stdout: BinaryIO) -> None:
    """Read one JSON-RPC payload per line until EOF, writing one response line for each."""
    while True:
        line = await asyncio.to_thread(stdin.readline)
        if not line:
            return
        if not line.strip():
            continue
        try:
            payload = jsonrpc.parse(line)
        except jsonrpc.RpcError as error:
            response: Any = jsonrpc.error_response(None, error)
        else:
            response = await answer(payload, line)
        if response is not None:
            text = response if isinstance(response, bytes) else jsonrpc.dumps(response)
            stdout.write(text.rstrip(b"\n") + b"\n")
            stdout.flush()


def mcp_url(url: str) -> str:
    """The server's ``/mcp`` endpoint, whether ``url`` names the server or the endpoint."""
    url = url.rstrip("/")
    return url if url.endswith("/mcp") else f"{url}/mcp"


async def serve_bridge(
    url: str, token: str | None, source: Source, *, credential: str | None = None
) -> None:
    """Forward every message to a running server's ``/mcp`` with the source context, or
    with a conversation ``credential`` (which names the conversation itself)."""
    headers = {"Accept": "application/json", "Content-Type": "application/json"}
    query: dict[str, str | int] = {}
    if credential:
        # The credential names the conversation and its hop count itself.
        headers["Authorization"] = f"Bearer {credential}"
    else:
        if token:
            headers["Authorization"] = f"Bearer {token}"
        query["sourceHopCount"] = source.hop_count
        if source.session_id:
            query["sourceSessionId"] = source.session_id
    endpoint = mcp_url(url)
    async with httpx.AsyncClient(headers=headers, timeout=httpx.Timeout(60.0)) as client:

        async def answer(payload: Any, line: bytes) -> Any | None:
            return await forward(client, endpoint, query, payload, line)

        log.info("mcp-stdio bridging to %s for source %s", endpoint, source.session_id)
        await serve_lines(answer, sys.stdin.buffer, sys.stdout.buffer)


async def forward(
    client: httpx.AsyncClient,
    endpoint: str,
    query: dict[str, str | int],
    payload: Any,
    line: bytes,
) -> Any | None:
    """POST one line as it was read (``payload`` is what it holds); the server's JSON-RPC
    answer as the server wrote it, or an error naming what went wrong. The server reads the
    very text the client wrote and its answer goes back untouched, so every id and number
    travels exactly."""
    request_id = payload.get("id") if isinstance(payload, dict) else None
    try:
        response = await client.post(
            endpoint, params=query, content=line, headers=routing_headers_for(payload)
        )
    except httpx.HTTPError as exc:
        log.error("cannot reach %s: %s", endpoint, exc)
        return _unanswered(payload, request_id, f"cannot reach the ccweb-store server: {exc}")
    if response.status_code == 202 or not response.content:
        return None
    try:
        body = response.json()
    except ValueError:
        return _unanswered(
            payload, request_id, f"the server answered HTTP {response.status_code} without JSON"
        )
    if isinstance(body, dict) and "error" in body and body.get("id") is None:
        body["id"] = request_id  # HTTP-level errors carry no id; pair them with the request
        return body
    return response.content


def routing_headers_for(payload: Any) -> dict[str, str]:
    """The headers a 2026-07-28 request must carry over HTTP, repeating its body (none for a
    legacy message or a batch, which the server takes for 2025-03-26)."""
    if not isinstance(payload, dict) or not is_modern(payload, None):
        return {}
    method, params = str(payload.get("method")), payload["params"]
    headers = {
        "MCP-Protocol-Version": str(params["_meta"][PROTOCOL_VERSION_KEY]),
        "Mcp-Method": method,
    }
    named = NAMED_PARAMS.get(method)
    if named is not None and isinstance(params.get(named), str):
        headers["Mcp-Name"] = encode_header_value(params[named])
    # A value no header can carry stays out: the server then names the missing header.
    return {name: value for name, value in headers.items() if is_header_safe(value)}


def _unanswered(payload: Any, request_id: Any, message: str) -> dict[str, Any] | None:
    if not isinstance(payload, dict) or "id" not in payload:
        return None  # a notification (or batch) expects no answer we could pair
    return jsonrpc.error_response(request_id, jsonrpc.RpcError(jsonrpc.INTERNAL_ERROR, message))
