"""``POST /rpc`` and ``POST /mcp`` skip Starlette's middleware stack (``app.App``) and answer
exactly what the full stack answers: status, headers and body, for good and bad requests,
with and without a token."""

from __future__ import annotations

from typing import Any

import pytest
from starlette.applications import Starlette

from ccweb_store.config import Settings
from ccweb_store.http.app import App, create_app
from ccweb_store.store.uow import Store
from tests.http_client import asgi_scope

Answer = tuple[int, list[tuple[bytes, bytes]], bytes]


async def _asgi(
    call: Any, app: App, path: str, body: bytes, headers: dict[str, str], query: str = ""
) -> Answer:
    """One HTTP request through ``call(app, scope, receive, send)``; what it sent back."""
    raw_headers = [(k.lower().encode(), v.encode()) for k, v in headers.items()]
    scope = asgi_scope(path, raw_headers, query.encode())
    chunks = [{"type": "http.request", "body": body, "more_body": False}]
    sent: list[dict[str, Any]] = []

    async def receive() -> dict[str, Any]:
        return chunks.pop(0) if chunks else {"type": "http.disconnect"}

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    await call(app, scope, receive, send)
    start = next(m for m in sent if m["type"] == "http.response.start")
    body_out = b"".join(m.get("body", b"") for m in sent if m["type"] == "http.response.body")
    return start["status"], list(start["headers"]), body_out


JSON = {"content-type": "application/json", "accept": "application/json, text/event-stream"}
REQUESTS: list[tuple[str, bytes, dict[str, str], str]] = [
    ("/rpc", b'{"jsonrpc":"2.0","id":1,"method":"tools.list"}', JSON, ""),
    ("/rpc", b'{"jsonrpc":"2.0","id":2,"method":"session.get","params":{"id":"s1"}}', JSON, ""),
    ("/rpc", b'{"jsonrpc":"2.0","id":3,"method":"no.such"}', JSON, ""),
    ("/rpc", b'{"jsonrpc":"2.0","method":"tools.list"}', JSON, ""),  # a notification: 204
    ("/rpc", b"{not json", JSON, ""),
    ("/rpc", b"[]", JSON, ""),
    (
        "/rpc",
        b'{"jsonrpc":"2.0","id":4,"method":"tools.list"}',
        {**JSON, "origin": "https://evil.example"},
        "",
    ),
    ("/rpc", b"x" * 5000, JSON, ""),  # over the body limit
    ("/mcp", b'{"jsonrpc":"2.0","id":1,"method":"ping"}', JSON, ""),
    (
        "/mcp",
        b'{"jsonrpc":"2.0","id":1,"method":"tools/list"}',
        {**JSON, "accept": "text/event-stream"},
        "",
    ),
    ("/mcp", b'{"jsonrpc":"2.0","id":1,"method":"ping"}', {**JSON, "accept": "text/html"}, ""),
    ("/mcp", b'{"jsonrpc":"2.0","method":"notifications/initialized"}', JSON, ""),
    (
        "/mcp",
        b'{"jsonrpc":"2.0","id":1,"method":"ping"}',
        {**JSON, "mcp-protocol-version": "1999-01-01"},
        "",
    ),
    ("/mcp", b'{"jsonrpc":"2.0","id":1,"method":"ping"}', JSON, "sourceHopCount=x"),
    ("/mcp", b'{"jsonrpc":"2.0","id":1,"method":"ping"}', JSON, "credential=ccw1.not.a.real.one"),
    ("/rpc", b'{"jsonrpc":"2.0","id":1,"method":"tools.list"}', JSON, "credential=ccw1.not.real"),
    (
        "/mcp",
        b'{"jsonrpc":"2.0","id":5,"method":"tools/call","params":{"name":"ccweb_list_user_inputs",'
        b'"arguments":{}}}',
        JSON,
        "sourceSessionId=s1",
    ),
]


@pytest.mark.parametrize("token", [None, "sekrit-busy-route-token"])
async def test_the_busy_routes_answer_what_the_full_stack_answers(
    store: Store, token: str | None
) -> None:
    async with store.uow() as uow:
        await uow.sessions.create("s1", title="One")
        await uow.commit()
    settings = Settings(**{**store.settings.model_dump(), "token": token, "max_body_bytes": 4096})
    app = create_app(settings, store=store, migrate_on_start=False)
    assert isinstance(app, App)
    auth = [{}] if token is None else [{}, {"authorization": "Bearer wrong"}]
    auth.append({"authorization": f"Bearer {token}"} if token else {})
    requests = [
        (path, body, {**headers, **credentials}, query)
        for path, body, headers, query in REQUESTS
        for credentials in auth
    ]
    fast = [await _asgi(App.__call__, app, *request) for request in requests]
    assert app.middleware_stack is None  # Starlette's stack was never even built
    full = [await _asgi(Starlette.__call__, app, *request) for request in requests]
    for request, fast_answer, full_answer in zip(requests, fast, full, strict=True):
        assert fast_answer == full_answer, request
    statuses = {status for status, _, _ in fast}
    assert {200, 202, 204, 400, 401, 403, 406, 413} <= statuses
