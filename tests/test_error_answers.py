"""Every error answer of the service is JSON: a JSON-RPC error object on ``/mcp`` and
``/rpc``, ``{"error": {"code", "message"}}`` elsewhere (no such path, a method a path does
not serve, an exception escaping an endpoint), through the real app and a real server."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import httpx
import pytest
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from ccweb_store.http import app as app_module
from ccweb_store.http import mcp_http, rpc
from ccweb_store.http.app import create_app
from ccweb_store.protocol.jsonrpc import INTERNAL_ERROR
from ccweb_store.store.uow import Store
from tests.http_client import BASE_URL
from tests.servers import serving

INTERNAL = {
    "jsonrpc": "2.0",
    "id": None,
    "error": {"code": INTERNAL_ERROR, "message": "internal error: the server logged the details"},
}


@asynccontextmanager
async def client_of(store: Store, **settings: Any) -> AsyncIterator[httpx.AsyncClient]:
    """A client of the real app that gets the app's answer even when an endpoint raised
    (Starlette's error middleware answers, then raises for the server to log)."""
    app = create_app(
        store.settings.model_copy(update=settings), store=store, migrate_on_start=False
    )

    async def boom(request: Request) -> Response:
        raise RuntimeError("a bug in an endpoint")

    app.router.routes.append(Route("/boom", boom))
    transport = httpx.ASGITransport(app=app, raise_app_exceptions=False)
    async with httpx.AsyncClient(transport=transport, base_url=BASE_URL) as client:
        yield client


def _json_error(response: httpx.Response, status: int, code: str) -> dict[str, Any]:
    assert response.status_code == status, response.text
    assert response.headers["content-type"] == "application/json"
    body: dict[str, Any] = response.json()
    assert set(body) == {"error"} and set(body["error"]) == {"code", "message"}
    assert body["error"]["code"] == code
    return body


async def test_a_path_that_does_not_exist_is_a_json_404_naming_the_endpoints(
    store: Store,
) -> None:
    async with client_of(store) as client:
        for method in ("GET", "POST", "DELETE"):
            body = _json_error(await client.request(method, "/nope"), 404, "not_found")
            message = body["error"]["message"]
            assert message.startswith(f"{method} /nope: no such endpoint")
            assert "POST /mcp, POST /rpc, GET /events, GET /healthz and GET /metrics" in message


async def test_a_method_healthz_does_not_serve_is_a_json_405_with_allow(store: Store) -> None:
    async with client_of(store) as client:
        for method in ("POST", "PUT", "DELETE", "PATCH"):
            response = await client.request(method, "/healthz")
            body = _json_error(response, 405, "method_not_allowed")
            assert body["error"]["message"] == f"{method} /healthz is not supported: use GET, HEAD"
            assert response.headers["allow"] == "GET, HEAD"


async def test_an_exception_escaping_an_endpoint_is_a_json_500(store: Store) -> None:
    async with client_of(store) as client:
        body = _json_error(await client.get("/boom"), 500, "internal_error")
        assert body["error"]["message"] == "internal error: the server logged the details"


@pytest.mark.parametrize("path", ["/rpc", "/mcp"])
async def test_an_exception_escaping_a_json_rpc_endpoint_is_a_json_rpc_500_and_logged(
    store: Store,
    path: str,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """What escapes ``/rpc`` or ``/mcp`` (an endpoint, or the answer to a method they do not
    serve) is answered a JSON-RPC error, and logged with its traceback."""

    async def broken(*args: Any, **kwargs: Any) -> Any:
        raise RuntimeError("a bug before dispatch")

    def broken_too(*args: Any, **kwargs: Any) -> Any:
        raise RuntimeError("a bug before dispatch")

    monkeypatch.setattr(rpc if path == "/rpc" else mcp_http, "read_payload", broken)
    async with client_of(store) as client:
        response = await client.post(path, json={"jsonrpc": "2.0", "id": 1, "method": "ping"})
        assert response.status_code == 500
        assert response.headers["content-type"] == "application/json"
        assert response.json() == INTERNAL
        # The same when answering a method the path does not serve fails.
        monkeypatch.setattr(app_module, "method_not_allowed", broken_too)
        other = await client.get(path)
        assert (other.status_code, other.json()) == (500, INTERNAL)
    assert any(
        record.exc_info and "a bug before dispatch" in str(record.exc_info[1])
        for record in caplog.records
    )


async def test_an_endpoint_that_fails_after_answering_sends_nothing_more(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The answer has begun: a second one cannot follow; the error goes on to the server,
    which logs it."""
    sent: list[dict[str, Any]] = []

    class AnswersThenFails(Response):
        async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
            await super().__call__(scope, receive, send)
            raise RuntimeError("a bug after answering")

    async def answer(incoming: Any) -> Response:
        return AnswersThenFails(b"{}", media_type="application/json")

    monkeypatch.setattr(rpc, "answer_rpc", answer)
    app = create_app(store=store, migrate_on_start=False)

    async def receive() -> dict[str, Any]:
        return {"type": "http.request", "body": b'{"jsonrpc":"2.0","id":1,"method":"tools.list"}'}

    async def send(message: dict[str, Any]) -> None:
        if sent and sent[-1]["type"] == "http.response.body" and not sent[-1].get("more_body"):
            raise RuntimeError("the response is complete")  # as uvicorn refuses it
        sent.append(message)

    from tests.http_client import asgi_scope

    scope = asgi_scope("/rpc", [(b"content-type", b"application/json")])
    with pytest.raises(RuntimeError, match="a bug after answering"):
        await app(scope, receive, send)
    assert [message["type"] for message in sent] == ["http.response.start", "http.response.body"]
    assert sent[0]["status"] == 200


def test_a_real_server_answers_unknown_paths_and_methods_with_json(tmp_path: Any) -> None:
    with serving(f"sqlite+aiosqlite:///{tmp_path / 'ccweb.db'}") as server:
        missing = httpx.get(f"{server.url}/nope", timeout=10)
        _json_error(missing, 404, "not_found")
        posted = httpx.post(f"{server.url}/healthz", timeout=10)
        _json_error(posted, 405, "method_not_allowed")
        assert posted.headers["allow"] == "GET, HEAD"
