"""``asgi.py``: ``/mcp`` and ``/rpc`` read their request straight from the ASGI scope and
answer as Starlette's ``Request`` and ``JSONResponse`` would: the same headers, the first of
a repeated header, the last of a repeated query parameter, a body in several chunks."""

from __future__ import annotations

import socket
from typing import Any

import httpx
import orjson
import pytest

from ccweb_store.config import Settings
from ccweb_store.http.app import create_app
from ccweb_store.http.asgi import CACHED_QUERY_BYTES, parse_query
from ccweb_store.http.headers import SECURITY_HEADERS
from ccweb_store.http.payloads import JSONResponse
from ccweb_store.store.uow import Store
from tests.http_client import asgi_scope
from tests.servers import serving

Headers = list[tuple[bytes, bytes]]
JSON: Headers = [(b"content-type", b"application/json")]
PING = b'{"jsonrpc":"2.0","id":7,"method":"ping"}'


async def exchange(
    store: Store,
    path: str,
    chunks: list[bytes],
    headers: Headers,
    query: bytes = b"",
    *,
    disconnect: bool = False,
    **settings: Any,
) -> tuple[int, Headers, bytes]:
    """One POST through the app as an ASGI server makes it, its body in ``chunks`` (the
    client gone after them when ``disconnect``): the status, headers and body answered."""
    app = create_app(
        Settings(**{**store.settings.model_dump(), **settings}), store=store, migrate_on_start=False
    )
    messages = [
        {"type": "http.request", "body": chunk, "more_body": disconnect or i < len(chunks) - 1}
        for i, chunk in enumerate(chunks)
    ]
    sent: list[dict[str, Any]] = []

    async def receive() -> dict[str, Any]:
        return messages.pop(0) if messages else {"type": "http.disconnect"}

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    await app(asgi_scope(path, headers, query), receive, send)
    body = b"".join(message.get("body", b"") for message in sent[1:])
    return sent[0]["status"], sent[0]["headers"], body


async def test_a_json_answer_carries_the_headers_starlette_writes_then_security_ones(
    store: Store,
) -> None:
    for path, body in (("/mcp", PING), ("/rpc", b'{"jsonrpc":"2.0","id":7,"method":"tools.list"}')):
        status, headers, answer = await exchange(store, path, [body], JSON)
        assert status == 200
        security = [(k.lower().encode(), v.encode()) for k, v in SECURITY_HEADERS.items()]
        assert headers == JSONResponse(orjson.loads(answer)).raw_headers + security


async def test_a_body_sent_in_chunks_is_read_whole(store: Store) -> None:
    chunks = [PING[:5], b"", PING[5:20], PING[20:]]
    status, _, answer = await exchange(store, "/mcp", chunks, JSON)
    assert (status, orjson.loads(answer)) == (200, {"jsonrpc": "2.0", "id": 7, "result": {}})


async def test_chunks_over_the_limit_are_refused_without_a_declared_length(store: Store) -> None:
    chunks = [b" " * 600] * 3
    status, _, answer = await exchange(store, "/rpc", chunks, JSON, max_body_bytes=1024)
    assert status == 413
    assert "CCWEB_MAX_BODY_BYTES" in orjson.loads(answer)["error"]["message"]


@pytest.mark.parametrize("path", ["/mcp", "/rpc"])
def test_a_client_gone_mid_body_gets_no_answer_and_logs_one_debug_line_without_traceback(
    database_url: str, path: str
) -> None:
    with serving(database_url, CCWEB_LOG_LEVEL="debug") as server:
        port = int(server.url.rsplit(":", 1)[1])
        with socket.create_connection(("127.0.0.1", port), timeout=10) as client:
            client.sendall(
                f"POST {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n"
                "Content-Type: application/json\r\nContent-Length: 1000\r\n\r\n".encode()
                + PING[:10]
            )
        # The server goes on serving; stopping it lets the cut request end first.
        assert httpx.get(f"{server.url}/healthz", timeout=10).status_code == 200
        log = server.stop()

    assert "Traceback" not in log and "ClientDisconnect" not in log, log
    said = [line for line in log.splitlines() if "disconnected" in line]
    assert said == [
        f"{said[0][:23]} DEBUG ccweb_store.http: the client of POST {path} disconnected "
        "before its request ended"
    ], log


async def test_the_first_of_a_repeated_header_is_the_one_read(store: Store) -> None:
    sse_first = [*JSON, (b"accept", b"text/event-stream"), (b"accept", b"text/html")]
    status, headers, body = await exchange(store, "/mcp", [PING], sse_first)
    assert status == 200 and (b"content-type", b"text/event-stream; charset=utf-8") in headers
    assert body.startswith(b"event: message\ndata: ")
    html_first = [*JSON, (b"accept", b"text/html"), (b"accept", b"application/json")]
    status, _, _ = await exchange(store, "/mcp", [PING], html_first)
    assert status == 406


LIST_INPUTS = orjson.dumps(
    {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "tools/call",
        "params": {"name": "ccweb_list_user_inputs", "arguments": {}},
    }
)


@pytest.mark.parametrize(
    "query",
    [
        b"sourceSessionId=first&sourceSessionId=second",
        b"pad=" + b"x" * CACHED_QUERY_BYTES + b"&sourceSessionId=first&sourceSessionId=second",
    ],
    ids=["short", "too long to cache"],
)
async def test_the_last_of_a_repeated_query_parameter_is_the_one_read(
    store: Store, query: bytes
) -> None:
    async with store.uow() as uow:
        await uow.sessions.create("second", title="Second")
        await uow.messages.append("second", "user", "hello from the second")
        await uow.commit()
    for _ in range(2):  # the second time from the cache, when there is one
        status, _, answer = await exchange(store, "/mcp", [LIST_INPUTS], JSON, query)
        assert status == 200
        assert orjson.loads(answer)["result"]["structuredContent"]["conversationId"] == "second"


def test_a_parsed_query_string_is_read_only_and_parsed_once_unless_it_is_long() -> None:
    first = parse_query(b"a=1&b=&a=2")
    assert dict(first) == {"a": "2", "b": ""}
    assert parse_query(b"a=1&b=&a=2") is first
    with pytest.raises(TypeError):
        first["a"] = "3"  # type: ignore[index]
    long = b"a=" + b"y" * CACHED_QUERY_BYTES
    assert parse_query(long) == parse_query(long)
    assert parse_query(long) is not parse_query(long)


async def test_a_long_accept_header_is_read_as_a_short_one(store: Store) -> None:
    padding = ", ".join(f"text/x-{i}" for i in range(100))
    for accept, status in (("text/event-stream, " + padding, 200), (padding, 406)):
        for _ in range(2):
            headers = [*JSON, (b"accept", accept.encode())]
            assert (await exchange(store, "/mcp", [PING], headers))[0] == status
