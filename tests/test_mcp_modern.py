"""``POST /mcp`` in MCP 2026-07-28 (no handshake, a ``_meta`` envelope on every request,
``server/discover``, routing headers), over HTTP against the real app, on both backends."""

from __future__ import annotations

import base64
import json
from typing import Any

import httpx
import pytest

from ccweb_store import __version__
from ccweb_store.domain import errors
from ccweb_store.protocol import jsonrpc
from ccweb_store.protocol.mcp import HEADER_MISMATCH, UNSUPPORTED_PROTOCOL_VERSION
from ccweb_store.protocol.mcp_wire import (
    CLIENT_CAPABILITIES_KEY,
    PROTOCOL_VERSION_KEY,
    SERVER_INFO_KEY,
    encode_header_value,
)
from ccweb_store.store.uow import Store
from tests.http_client import app_client, rpc_result

MODERN = "2026-07-28"
META = {
    PROTOCOL_VERSION_KEY: MODERN,
    CLIENT_CAPABILITIES_KEY: {},
    "io.modelcontextprotocol/clientInfo": {"name": "test", "version": "1"},
}
SUPPORTED = ["2026-07-28", "2025-11-25", "2025-06-18", "2025-03-26"]


async def modern(
    client: httpx.AsyncClient,
    method: str,
    params: dict[str, Any] | None = None,
    *,
    meta: Any = META,
    headers: dict[str, str | None] | None = None,
    query: str = "",
    request_id: Any = 7,
) -> httpx.Response:
    """One 2026-07-28 request with its envelope and routing headers; ``headers`` overrides
    them (``None`` leaves one out)."""
    params = dict(params or {})
    if meta is not None:
        params["_meta"] = meta
    standard: dict[str, str | None] = {"MCP-Protocol-Version": MODERN, "Mcp-Method": method}
    if method == "tools/call":
        standard["Mcp-Name"] = encode_header_value(params["name"])
    standard.update(headers or {})
    sent = {name: value for name, value in standard.items() if value is not None}
    message = {"jsonrpc": "2.0", "id": request_id, "method": method, "params": params}
    return await client.post(f"/mcp{query}", json=message, headers=sent)


def assert_error(response: httpx.Response, status: int, code: int, request_id: Any = 7) -> str:
    """The response is a JSON-RPC error with this HTTP status and code, for ``request_id``."""
    assert response.status_code == status, response.text
    body = response.json()
    assert body["id"] == request_id
    assert body["error"]["code"] == code
    message: str = body["error"]["message"]
    return message


def assert_modern_result(response: httpx.Response) -> dict[str, Any]:
    """A 2026-07-28 result: HTTP 200, resultType complete, the server named in its _meta."""
    assert response.status_code == 200, response.text
    result: dict[str, Any] = response.json()["result"]
    assert result["resultType"] == "complete"
    assert result["_meta"][SERVER_INFO_KEY] == {
        "name": "ccweb-store",
        "title": "ccweb",
        "version": __version__,
    }
    return result


async def test_server_discover_names_every_supported_version(store: Store) -> None:
    async with app_client(store) as client:
        result = assert_modern_result(await modern(client, "server/discover"))
        assert result["supportedVersions"] == SUPPORTED
        assert result["capabilities"] == {"tools": {"listChanged": False}}
        assert "ccweb_send_message" in result["instructions"]
        assert result["ttlMs"] >= 0 and result["cacheScope"] == "private"


async def test_tools_list_carries_caching_hints_and_hides_the_alias(store: Store) -> None:
    async with app_client(store) as client:
        result = assert_modern_result(await modern(client, "tools/list"))
        names = [tool["name"] for tool in result["tools"]]
        assert len(names) == 6 and "ccweb_request_reply" not in names
        assert isinstance(result["ttlMs"], int) and result["ttlMs"] >= 0
        assert result["cacheScope"] == "private"
        again = assert_modern_result(await modern(client, "tools/list"))
        assert [tool["name"] for tool in again["tools"]] == names  # a deterministic order


async def test_client_info_is_optional_in_the_envelope(store: Store) -> None:
    async with app_client(store) as client:
        meta = {PROTOCOL_VERSION_KEY: MODERN, CLIENT_CAPABILITIES_KEY: {}}
        assert_modern_result(await modern(client, "server/discover", meta=meta))


async def test_tools_call_answers_results_and_tool_errors_as_in_the_2025_revisions(
    store: Store,
) -> None:
    async with app_client(store) as client:
        await rpc_result(client, "session.create", {"id": "src", "title": "Source"})
        await rpc_result(client, "session.create", {"id": "dst", "title": "Target"})

        async def call(name: str, arguments: dict[str, Any]) -> dict[str, Any]:
            params = {"name": name, "arguments": arguments}
            response = await modern(client, "tools/call", params, query="?sourceSessionId=src")
            return assert_modern_result(response)

        arguments = {"targetConversationId": "dst", "content": "hi", "replyMode": "one_way"}
        sent = await call("ccweb_send_message", arguments)
        assert sent["isError"] is False
        assert sent["structuredContent"]["deliveryStatus"] == "queued"
        assert json.loads(sent["content"][0]["text"]) == sent["structuredContent"]
        listed = await rpc_result(client, "message.list", {"sessionId": "dst"})
        assert [message["content"] for message in listed["messages"]] == ["hi"]

        busy = await call("ccweb_send_message", arguments)
        assert busy["isError"] is True
        assert busy["structuredContent"]["error"]["code"] == errors.TARGET_BUSY

        alias = await call("ccweb_request_reply", {"content": "x"})
        assert alias["structuredContent"]["error"]["code"] == errors.INVALID_ARGUMENTS


async def test_an_unknown_tool_is_invalid_params_with_http_400(store: Store) -> None:
    async with app_client(store) as client:
        response = await modern(client, "tools/call", {"name": "ccweb_rm_rf", "arguments": {}})
        assert "ccweb_rm_rf" in assert_error(response, 400, jsonrpc.INVALID_PARAMS)


@pytest.mark.parametrize(
    "meta",
    [
        None,
        {CLIENT_CAPABILITIES_KEY: {}},
        {PROTOCOL_VERSION_KEY: MODERN},
        {PROTOCOL_VERSION_KEY: 2026, CLIENT_CAPABILITIES_KEY: {}},
        {PROTOCOL_VERSION_KEY: MODERN, CLIENT_CAPABILITIES_KEY: []},
    ],
)
async def test_a_request_without_a_whole_envelope_is_invalid_params(
    store: Store, meta: Any
) -> None:
    async with app_client(store) as client:
        response = await modern(client, "server/discover", meta=meta)
        assert "_meta" in assert_error(response, 400, jsonrpc.INVALID_PARAMS)


async def test_an_unsupported_version_lists_the_supported_ones(store: Store) -> None:
    async with app_client(store) as client:
        meta = {**META, PROTOCOL_VERSION_KEY: "v999.0.0"}
        response = await modern(
            client, "server/discover", meta=meta, headers={"MCP-Protocol-Version": "v999.0.0"}
        )
        assert "v999.0.0" in assert_error(response, 400, UNSUPPORTED_PROTOCOL_VERSION)
        assert response.json()["error"]["data"] == {"supported": SUPPORTED, "requested": "v999.0.0"}


@pytest.mark.parametrize(
    ("headers", "body_name"),
    [
        ({"MCP-Protocol-Version": None}, "ccweb_list_conversations"),
        ({"MCP-Protocol-Version": "2025-11-25"}, "ccweb_list_conversations"),
        ({"Mcp-Method": None}, "ccweb_list_conversations"),
        ({"Mcp-Method": "tools/list"}, "ccweb_list_conversations"),
        ({"Mcp-Method": "TOOLS/CALL"}, "ccweb_list_conversations"),
        ({"Mcp-Name": None}, "ccweb_list_conversations"),
        ({"Mcp-Name": "ccweb_send_message"}, "ccweb_list_conversations"),
        ({"Mcp-Name": "=?base64?Y2N3ZWI?=", "Mcp-Method": "tools/call"}, "ccweb"),
        ({"Mcp-Name": "=?base64?not*base64?="}, "ccweb_list_conversations"),
    ],
)
async def test_routing_headers_that_disagree_with_the_body_are_a_header_mismatch(
    store: Store, headers: dict[str, str | None], body_name: str
) -> None:
    async with app_client(store) as client:
        response = await modern(
            client,
            "tools/call",
            {"name": body_name, "arguments": {}},
            headers={"Mcp-Name": encode_header_value(body_name), **headers},
        )
        assert "header" in assert_error(response, 400, HEADER_MISMATCH)


async def test_a_repeated_routing_header_is_a_header_mismatch(store: Store) -> None:
    async with app_client(store) as client:
        message = {
            "jsonrpc": "2.0",
            "id": 7,
            "method": "tools/list",
            "params": {"_meta": META},
        }
        response = await client.post(
            "/mcp",
            json=message,
            headers=[
                ("MCP-Protocol-Version", MODERN),
                ("Mcp-Method", "tools/list"),
                ("Mcp-Method", "tools/list"),
            ],
        )
        assert_error(response, 400, HEADER_MISMATCH)


async def test_a_version_header_that_disagrees_with_the_envelope_is_a_header_mismatch(
    store: Store,
) -> None:
    async with app_client(store) as client:
        meta = {**META, PROTOCOL_VERSION_KEY: "v999.0.0"}
        response = await modern(client, "server/discover", meta=meta)
        assert_error(response, 400, HEADER_MISMATCH)


@pytest.mark.parametrize(
    "headers",
    [
        {  # header names in any case
            "MCP-Protocol-Version": None,
            "Mcp-Method": None,
            "mcp-method": "tools/call",
            "MCP-PROTOCOL-VERSION": MODERN,
        },
        {"Mcp-Name": "  ccweb_list_conversations\t"},  # whitespace around a value
        {"Mcp-Name": "=?base64?" + base64.b64encode(b"ccweb_list_conversations").decode() + "?="},
    ],
)
async def test_routing_headers_compare_names_in_any_case_trimmed_and_decoded(
    store: Store, headers: dict[str, str | None]
) -> None:
    async with app_client(store) as client:
        response = await modern(
            client,
            "tools/call",
            {"name": "ccweb_list_conversations", "arguments": {}},
            headers=headers,
        )
        assert assert_modern_result(response)["isError"] is False


def test_header_values_outside_plain_ascii_travel_as_base64() -> None:
    assert encode_header_value("tools_list") == "tools_list"
    for value in ("outil_é", " padded ", "=?base64?literal?="):
        encoded = encode_header_value(value)
        assert encoded.startswith("=?base64?") and encoded.endswith("?=")
        assert base64.b64decode(encoded[9:-2]).decode() == value


@pytest.mark.parametrize(
    "method",
    ["initialize", "ping", "logging/setLevel", "resources/subscribe", "prompts/list", "x/y"],
)
async def test_methods_outside_2026_07_28_are_method_not_found_with_http_404(
    store: Store, method: str
) -> None:
    async with app_client(store) as client:
        response = await modern(client, method, request_id="req-9")
        assert method in assert_error(response, 404, jsonrpc.METHOD_NOT_FOUND, "req-9")


async def test_a_notification_is_accepted_with_202(store: Store) -> None:
    async with app_client(store) as client:
        response = await client.post(
            "/mcp",
            json={"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"_meta": META}},
            headers={"MCP-Protocol-Version": MODERN},
        )
        assert response.status_code == 202
        assert response.content == b""


@pytest.mark.parametrize(
    ("body", "answered_id"),
    [
        ({"jsonrpc": "2.0", "id": 7, "result": {}}, {"id": 7}),
        ([{"jsonrpc": "2.0", "id": 7, "method": "tools/list", "params": {"_meta": META}}], {}),
    ],
)
async def test_a_posted_response_or_a_batch_is_an_invalid_request(
    store: Store, body: Any, answered_id: dict[str, int]
) -> None:
    async with app_client(store) as client:
        response = await client.post(
            "/mcp", json=body, headers={"MCP-Protocol-Version": MODERN, "Mcp-Method": "tools/list"}
        )
        assert response.status_code == 400
        error = response.json()
        assert error["error"]["code"] == jsonrpc.INVALID_REQUEST
        assert {key: error[key] for key in ("id",) if key in error} == answered_id


async def test_an_error_whose_request_id_is_unknown_leaves_the_id_out(store: Store) -> None:
    async with app_client(store) as client:
        response = await client.post(
            "/mcp",
            json={"jsonrpc": "2.0", "id": True, "method": "tools/list", "params": {"_meta": META}},
            headers={"MCP-Protocol-Version": MODERN, "Mcp-Method": "tools/list"},
        )
        assert response.status_code == 400
        assert "id" not in response.json()  # the 2026-07-28 schema has no null id


async def test_a_single_sse_event_is_answered_when_only_sse_is_accepted(store: Store) -> None:
    async with app_client(store) as client:
        response = await modern(client, "tools/list", headers={"Accept": "text/event-stream"})
        assert response.headers["content-type"].startswith("text/event-stream")
        data = response.text.split("data: ", 1)[1].strip()
        assert json.loads(data)["result"]["resultType"] == "complete"
        failed = await modern(client, "ping", headers={"Accept": "text/event-stream"})
        assert failed.status_code == 404  # an error keeps its status, as plain JSON
        assert failed.headers["content-type"].startswith("application/json")


async def test_a_2026_request_inside_a_2025_03_26_batch_is_refused_alone(store: Store) -> None:
    async with app_client(store) as client:
        batch = [
            {"jsonrpc": "2.0", "id": 1, "method": "ping"},
            {"jsonrpc": "2.0", "id": 2, "method": "tools/list", "params": {"_meta": META}},
        ]
        response = await client.post("/mcp", json=batch)
        assert response.status_code == 200
        first, second = response.json()
        assert first == {"jsonrpc": "2.0", "id": 1, "result": {}}
        assert (second["id"], second["error"]["code"]) == (2, jsonrpc.INVALID_REQUEST)


async def test_the_origin_check_and_the_405_hold_in_2026_07_28(store: Store) -> None:
    async with app_client(store) as client:
        foreign = await modern(client, "server/discover", headers={"Origin": "http://evil.example"})
        assert foreign.status_code == 403
        local = await modern(client, "server/discover", headers={"Origin": "http://localhost:3000"})
        assert local.status_code == 200
        get = await client.get("/mcp", headers={"MCP-Protocol-Version": MODERN})
        assert get.status_code == 405
        assert "mcp-session-id" not in local.headers
