"""``POST /rpc`` and ``POST /mcp`` as Starlette routes, called as an ASGI server calls the app:
each request gets the status it is owed; with a token set, a request without it (or with a
wrong one) is refused, and one with it gets exactly the answer a server without a token
gives; every JSON answer carries the headers Starlette's ``JSONResponse`` writes, then the
security headers every answer carries."""

from __future__ import annotations

from typing import Any

import orjson
import pytest

from ccweb_store.config import Settings
from ccweb_store.http.app import create_app
from ccweb_store.http.headers import SECURITY_HEADERS
from ccweb_store.http.payloads import JSONResponse
from ccweb_store.http.throttle import LoginThrottle
from ccweb_store.store.uow import Store
from tests.http_client import asgi_scope

Answer = tuple[int, list[tuple[bytes, bytes]], bytes]


async def _asgi(
    app: Any, path: str, body: bytes, headers: dict[str, str], query: str, method: str = "POST"
) -> Answer:
    """One HTTP request through the app as an ASGI server makes it; what it sent back."""
    raw_headers = [(k.lower().encode(), v.encode()) for k, v in headers.items()]
    scope = asgi_scope(path, raw_headers, query.encode(), method)
    chunks = [{"type": "http.request", "body": body, "more_body": False}]
    sent: list[dict[str, Any]] = []

    async def receive() -> dict[str, Any]:
        return chunks.pop(0) if chunks else {"type": "http.disconnect"}

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    await app(scope, receive, send)
    start = next(m for m in sent if m["type"] == "http.response.start")
    body_out = b"".join(m.get("body", b"") for m in sent if m["type"] == "http.response.body")
    return start["status"], list(start["headers"]), body_out


JSON = {"content-type": "application/json", "accept": "application/json, text/event-stream"}
#: (path, body, headers, query, the status owed without a token)
REQUESTS: list[tuple[str, bytes, dict[str, str], str, int]] = [
    ("/rpc", b'{"jsonrpc":"2.0","id":1,"method":"tools.list"}', JSON, "", 200),
    (
        "/rpc",
        b'{"jsonrpc":"2.0","id":2,"method":"session.get","params":{"id":"s1"}}',
        JSON,
        "",
        200,
    ),
    ("/rpc", b'{"jsonrpc":"2.0","id":3,"method":"no.such"}', JSON, "", 200),
    ("/rpc", b'{"jsonrpc":"2.0","method":"tools.list"}', JSON, "", 204),  # a notification
    ("/rpc", b"{not json", JSON, "", 200),
    ("/rpc", b"[]", JSON, "", 200),
    (
        "/rpc",
        b'{"jsonrpc":"2.0","id":4,"method":"tools.list"}',
        {**JSON, "origin": "https://evil.example"},
        "",
        403,
    ),
    ("/rpc", b"x" * 5000, JSON, "", 413),  # over the body limit
    ("/mcp", b'{"jsonrpc":"2.0","id":1,"method":"ping"}', JSON, "", 200),
    (
        "/mcp",
        b'{"jsonrpc":"2.0","id":1,"method":"tools/list"}',
        {**JSON, "accept": "text/event-stream"},
        "",
        200,
    ),
    ("/mcp", b'{"jsonrpc":"2.0","id":1,"method":"ping"}', {**JSON, "accept": "text/html"}, "", 406),
    ("/mcp", b'{"jsonrpc":"2.0","method":"notifications/initialized"}', JSON, "", 202),
    (
        "/mcp",
        b'{"jsonrpc":"2.0","id":1,"method":"ping"}',
        {**JSON, "mcp-protocol-version": "1999-01-01"},
        "",
        400,
    ),
    ("/mcp", b'{"jsonrpc":"2.0","id":1,"method":"ping"}', JSON, "sourceHopCount=x", 400),
    (
        "/mcp",
        b'{"jsonrpc":"2.0","id":1,"method":"ping"}',
        JSON,
        "credential=ccw1.not.a.real.one",
        401,
    ),
    (
        "/rpc",
        b'{"jsonrpc":"2.0","id":1,"method":"tools.list"}',
        JSON,
        "credential=ccw1.not.real",
        200,
    ),
    (
        "/mcp",
        b'{"jsonrpc":"2.0","id":5,"method":"tools/call","params":{"name":"ccweb_list_user_inputs",'
        b'"arguments":{}}}',
        JSON,
        "sourceSessionId=s1",
        200,
    ),
]


async def test_the_json_rpc_routes_answer_what_each_request_is_owed_with_or_without_a_token(
    store: Store,
) -> None:
    async with store.uow() as uow:
        await uow.sessions.create("s1", title="One")
        await uow.commit()
    token = "sekrit-busy-route-token"
    base = {**store.settings.model_dump(), "max_body_bytes": 4096}
    open_app = create_app(Settings(**{**base, "token": None}), store=store, migrate_on_start=False)
    # Every request below sends a wrong token too: more than the login throttle's default.
    guarded = create_app(
        Settings(**{**base, "token": token}),
        store=store,
        migrate_on_start=False,
        login_throttle=LoginThrottle(limit=1000),
    )
    for path, body, headers, query, owed in REQUESTS:
        request = (path, body, headers, query)
        status, raw_headers, answer = await _asgi(open_app, *request)
        assert status == owed, request
        if status == 200 and (b"content-type", b"application/json") in raw_headers:
            written = JSONResponse(orjson.loads(answer), status).raw_headers
            security = [(k.lower().encode(), v.encode()) for k, v in SECURITY_HEADERS.items()]
            assert raw_headers == written + security
        for wrong in ({}, {"authorization": "Bearer wrong"}):
            refused = await _asgi(guarded, path, body, {**headers, **wrong}, query)
            assert refused[0] == 401, request
        let_in = {**headers, "authorization": f"Bearer {token}"}
        assert await _asgi(guarded, path, body, let_in, query) == (status, raw_headers, answer)


@pytest.mark.parametrize("path", ["/rpc", "/mcp"])
async def test_any_method_but_post_is_a_json_rpc_405(store: Store, path: str) -> None:
    app = create_app(store=store, migrate_on_start=False)
    for method in ("GET", "PUT", "DELETE"):
        status, headers, body = await _asgi(app, path, b"", {}, "", method)
        assert status == 405
        assert (b"allow", b"POST") in headers
        error = orjson.loads(body)["error"]
        assert error["message"].startswith(f"{method} {path} is not supported: ")
        assert error["message"].endswith("send JSON-RPC with POST")
