"""Talking HTTP to the real Starlette app in-process (httpx + ASGITransport)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import httpx

from ccweb_store.config import Settings
from ccweb_store.http.app import create_app
from ccweb_store.store.uow import Store

BASE_URL = "http://127.0.0.1:8787"


#: The one ``Content-Type`` ``/mcp`` and ``/rpc`` read, for a test that posts raw bytes.
JSON = {"content-type": "application/json"}


@asynccontextmanager
async def app_client(store: Store, **overrides: Any) -> AsyncIterator[httpx.AsyncClient]:
    """An HTTP client on ``create_app`` over ``store``, with settings ``overrides``."""
    settings = Settings(**{**store.settings.model_dump(), **overrides})
    app = create_app(settings, store=store, migrate_on_start=False)
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url=BASE_URL) as client:
        yield client


async def rpc(client: httpx.AsyncClient, method: str, params: Any = None, **kw: Any) -> Any:
    """One ``/rpc`` request; the full JSON-RPC response object."""
    message: dict[str, Any] = {"jsonrpc": "2.0", "id": 1, "method": method}
    if params is not None:
        message["params"] = params
    response = await client.post("/rpc", json=message, **kw)
    assert response.status_code == 200, response.text
    return response.json()


async def rpc_result(client: httpx.AsyncClient, method: str, params: Any = None) -> Any:
    """The result of a ``/rpc`` call that must succeed."""
    answer = await rpc(client, method, params)
    assert "error" not in answer, answer
    return answer["result"]


async def mcp(
    client: httpx.AsyncClient,
    method: str,
    params: Any = None,
    *,
    query: str = "",
    headers: dict[str, str] | None = None,
) -> httpx.Response:
    """One ``/mcp`` request (id 1); the raw HTTP response."""
    message: dict[str, Any] = {"jsonrpc": "2.0", "id": 1, "method": method}
    if params is not None:
        message["params"] = params
    return await client.post(f"/mcp{query}", json=message, headers=headers)


async def call_tool(
    client: httpx.AsyncClient, name: str, arguments: Any = None, *, query: str = ""
) -> dict[str, Any]:
    """A ``tools/call`` over ``/mcp`` that must be answered with a tool result."""
    response = await mcp(
        client, "tools/call", {"name": name, "arguments": arguments or {}}, query=query
    )
    assert response.status_code == 200, response.text
    body = response.json()
    assert "result" in body, body
    result: dict[str, Any] = body["result"]
    return result


def asgi_scope(
    path: str, headers: list[tuple[bytes, bytes]], query: bytes = b"", method: str = "POST"
) -> dict[str, Any]:
    """The scope an ASGI server (uvicorn) hands the app for one HTTP request."""
    return {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": method,
        "scheme": "http",
        "path": path,
        "raw_path": path.encode(),
        "root_path": "",
        "query_string": query,
        "headers": headers,
        "client": ("127.0.0.1", 50000),
        "server": ("127.0.0.1", 8787),
    }
