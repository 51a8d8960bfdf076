"""``POST /mcp`` conformance, over HTTP against the real app, on both backends."""

from __future__ import annotations

import json
from datetime import timedelta
from typing import Any

import httpx
import pytest

from ccweb_store import __version__
from ccweb_store.domain import errors
from ccweb_store.domain.context import Source
from ccweb_store.domain.timestamps import utcnow
from ccweb_store.http.mcp_http import SourceError, source_from_query
from ccweb_store.protocol import jsonrpc
from ccweb_store.protocol.mcp import UNSUPPORTED_PROTOCOL_VERSION
from ccweb_store.store.uow import Store
from tests.http_client import JSON, app_client, call_tool, mcp
from tests.lifecycle_support import table_row_counts

INIT_PARAMS = {
    "protocolVersion": "2025-06-18",
    "capabilities": {},
    "clientInfo": {"name": "test", "version": "1"},
}


@pytest.mark.parametrize("version", ["2025-03-26", "2025-06-18", "2025-11-25"])
async def test_initialize_echoes_a_supported_version(store: Store, version: str) -> None:
    async with app_client(store) as client:
        response = await mcp(client, "initialize", {**INIT_PARAMS, "protocolVersion": version})
        result = response.json()["result"]
        assert result["protocolVersion"] == version
        assert "tools" in result["capabilities"]
        assert result["serverInfo"] == {
            "name": "ccweb-store",
            "title": "ccweb",
            "version": __version__,
        }
        assert "mcp-session-id" not in response.headers  # stateless: no session is issued


async def test_initialize_answers_the_latest_for_an_unknown_version(store: Store) -> None:
    async with app_client(store) as client:
        response = await mcp(client, "initialize", {**INIT_PARAMS, "protocolVersion": "1999-01-01"})
        assert response.json()["result"]["protocolVersion"] == "2025-11-25"


async def test_notifications_get_202_with_an_empty_body(store: Store) -> None:
    async with app_client(store) as client:
        for method in ("notifications/initialized", "notifications/cancelled", "notifications/x"):
            response = await client.post("/mcp", json={"jsonrpc": "2.0", "method": method})
            assert response.status_code == 202
            assert response.content == b""


async def test_a_client_response_gets_202(store: Store) -> None:
    async with app_client(store) as client:
        response = await client.post("/mcp", json={"jsonrpc": "2.0", "id": 3, "result": {}})
        assert response.status_code == 202


async def test_ping_answers_an_empty_object(store: Store) -> None:
    async with app_client(store) as client:
        response = await mcp(client, "ping")
        assert response.json() == {"jsonrpc": "2.0", "id": 1, "result": {}}


async def test_tools_list_works_without_initialize_and_hides_the_alias(store: Store) -> None:
    async with app_client(store) as client:
        result = (await mcp(client, "tools/list")).json()["result"]
        names = [tool["name"] for tool in result["tools"]]
        assert "ccweb_send_message" in names
        assert "ccweb_request_reply" not in names
        assert "nextCursor" not in result  # one page holds them all today


async def test_tools_list_follows_a_cursor(store: Store) -> None:
    async with app_client(store) as client:
        everything = (await mcp(client, "tools/list")).json()["result"]["tools"]
        rest = (await mcp(client, "tools/list", {"cursor": "2"})).json()["result"]
        assert rest["tools"] == everything[2:]
        bad = (await mcp(client, "tools/list", {"cursor": "bogus"})).json()
        assert bad["error"]["code"] == jsonrpc.INVALID_PARAMS


@pytest.mark.parametrize("method", ["GET", "DELETE"])
async def test_get_and_delete_are_405(store: Store, method: str) -> None:
    async with app_client(store) as client:
        response = await client.request(method, "/mcp")
        assert response.status_code == 405
        assert response.headers["allow"] == "POST"


async def test_json_is_answered_when_accepted_or_when_accept_is_missing(store: Store) -> None:
    async with app_client(store) as client:
        for accept in ("application/json, text/event-stream", "application/json", "*/*"):
            response = await mcp(client, "ping", headers={"Accept": accept})
            assert response.headers["content-type"].startswith("application/json")
        request = client.build_request(
            "POST", "/mcp", json={"jsonrpc": "2.0", "id": 1, "method": "ping"}
        )
        del request.headers["accept"]
        bare = await client.send(request)
        assert bare.headers["content-type"].startswith("application/json")
        assert bare.json()["result"] == {}


async def test_a_single_sse_event_is_answered_when_only_sse_is_accepted(store: Store) -> None:
    async with app_client(store) as client:
        response = await mcp(client, "tools/list", headers={"Accept": "text/event-stream"})
        assert response.headers["content-type"].startswith("text/event-stream")
        events = [block for block in response.text.split("\n\n") if block.strip()]
        assert len(events) == 1
        lines = events[0].splitlines()
        assert lines[0] == "event: message"
        message = json.loads(lines[1].removeprefix("data: "))
        assert message["id"] == 1
        assert len(message["result"]["tools"]) == 6


async def test_an_unsupported_protocol_version_header_is_400_naming_the_supported_ones(
    store: Store,
) -> None:
    async with app_client(store) as client:
        response = await mcp(client, "ping", headers={"MCP-Protocol-Version": "2099-01-01"})
        assert response.status_code == 400
        body = response.json()
        assert body["id"] == 1
        assert body["error"]["code"] == UNSUPPORTED_PROTOCOL_VERSION
        assert "2099-01-01" in body["error"]["message"]
        assert body["error"]["data"] == {
            "supported": ["2026-07-28", "2025-11-25", "2025-06-18", "2025-03-26"],
            "requested": "2099-01-01",
        }
        notification = await client.post(
            "/mcp",
            json={"jsonrpc": "2.0", "method": "notifications/initialized"},
            headers={"MCP-Protocol-Version": "2099-01-01"},
        )
        assert notification.status_code == 400
        ok = await mcp(client, "ping", headers={"MCP-Protocol-Version": "2025-06-18"})
        assert ok.status_code == 200


async def test_initialize_never_negotiates_2026_07_28_which_has_no_handshake(store: Store) -> None:
    async with app_client(store) as client:
        response = await mcp(client, "initialize", {**INIT_PARAMS, "protocolVersion": "2026-07-28"})
        assert response.json()["result"]["protocolVersion"] == "2025-11-25"


@pytest.mark.parametrize("version", [None, "2025-03-26"])
async def test_a_batch_is_answered_in_2025_03_26_and_without_a_version_header(
    store: Store, version: str | None
) -> None:
    async with app_client(store) as client:
        batch = [
            {"jsonrpc": "2.0", "id": 1, "method": "ping"},
            {"jsonrpc": "2.0", "method": "notifications/initialized"},
            {"jsonrpc": "2.0", "id": 2, "method": "tools/list"},
        ]
        headers = {"MCP-Protocol-Version": version} if version else {}
        response = await client.post("/mcp", json=batch, headers=headers)
        assert response.status_code == 200
        answers = response.json()
        assert [answer["id"] for answer in answers] == [1, 2]
        assert len(answers[1]["result"]["tools"]) == 6
        only_notifications = await client.post("/mcp", json=batch[1:2], headers=headers)
        assert only_notifications.status_code == 202


@pytest.mark.parametrize("version", ["2025-06-18", "2025-11-25"])
async def test_a_batch_is_refused_from_2025_06_18_on(store: Store, version: str) -> None:
    async with app_client(store) as client:
        batch = [{"jsonrpc": "2.0", "id": 1, "method": "ping"}]
        response = await client.post("/mcp", json=batch, headers={"MCP-Protocol-Version": version})
        assert response.status_code == 400
        error = response.json()
        assert error["error"]["code"] == jsonrpc.INVALID_REQUEST
        assert f"MCP {version} has no JSON-RPC batches" in error["error"]["message"]


@pytest.mark.parametrize(
    "origin", ["http://evil.example", "null", "http://localhost.evil.example:8787"]
)
async def test_a_foreign_origin_is_403(store: Store, origin: str) -> None:
    async with app_client(store) as client:
        response = await mcp(client, "ping", headers={"Origin": origin})
        assert response.status_code == 403


@pytest.mark.parametrize(
    "origin",
    ["http://localhost:3000", "http://127.0.0.1:8787", "https://localhost", "http://[::1]:5173"],
)
async def test_a_localhost_origin_on_any_port_is_allowed(store: Store, origin: str) -> None:
    async with app_client(store) as client:
        response = await mcp(client, "ping", headers={"Origin": origin})
        assert response.status_code == 200


async def test_configured_origins_replace_the_defaults(store: Store) -> None:
    async with app_client(store, allowed_origins=("https://cc.example.org:8443",)) as client:
        assert (
            await mcp(client, "ping", headers={"Origin": "https://cc.example.org:8443"})
        ).is_success
        assert (
            await mcp(client, "ping", headers={"Origin": "https://cc.example.org"})
        ).status_code == 403
        assert (
            await mcp(client, "ping", headers={"Origin": "http://localhost"})
        ).status_code == 403


# server/discover without the 2026-07-28 envelope is a 2025-03-26 request, which has no such method.
@pytest.mark.parametrize("method", ["server/discover", "resources/list", "prompts/list"])
async def test_unknown_methods_are_method_not_found(store: Store, method: str) -> None:
    async with app_client(store) as client:
        response = await mcp(client, method)
        assert response.status_code == 200
        assert response.json()["error"]["code"] == jsonrpc.METHOD_NOT_FOUND


async def test_malformed_json_is_a_parse_error_and_the_server_keeps_serving(store: Store) -> None:
    async with app_client(store) as client:
        response = await client.post("/mcp", content=b'{"jsonrpc": "2.0", "id": 1,', headers=JSON)
        assert response.status_code == 400
        assert response.json()["error"]["code"] == jsonrpc.PARSE_ERROR
        assert (await mcp(client, "ping")).json()["result"] == {}


@pytest.mark.parametrize(
    "body",
    [
        {"jsonrpc": "2.0", "id": 1},
        {"jsonrpc": "2.0", "id": 1, "method": ["tools/list"]},
        {"id": 1, "method": "ping"},
        [],
        42,
    ],
)
async def test_wrong_json_rpc_shapes_are_invalid_requests(store: Store, body: Any) -> None:
    async with app_client(store) as client:
        response = await client.post("/mcp", json=body)
        assert response.json()["error"]["code"] == jsonrpc.INVALID_REQUEST
        assert (await mcp(client, "ping")).json()["result"] == {}


async def test_an_oversized_body_is_413_before_parsing(store: Store) -> None:
    async with app_client(store, max_body_bytes=1024) as client:
        response = await client.post("/mcp", content=b"{" * 5000, headers=JSON)  # not even JSON
        assert response.status_code == 413
        assert (await mcp(client, "ping")).json()["result"] == {}


async def test_an_unknown_tool_is_invalid_params(store: Store) -> None:
    async with app_client(store) as client:
        response = await mcp(client, "tools/call", {"name": "ccweb_rm_rf", "arguments": {}})
        error = response.json()["error"]
        assert error["code"] == jsonrpc.INVALID_PARAMS
        assert "ccweb_rm_rf" in error["message"]
        assert (await mcp(client, "ping")).json()["result"] == {}


async def test_wrong_argument_types_are_a_tool_error_the_model_can_read(store: Store) -> None:
    async with app_client(store) as client:
        result = await call_tool(client, "ccweb_list_conversations", {"limit": "ten"})
        assert result["isError"] is True
        payload = result["structuredContent"]
        assert payload["error"]["code"] == errors.INVALID_ARGUMENTS
        assert "limit must be an integer" in payload["error"]["message"]
        assert json.loads(result["content"][0]["text"]) == payload
        assert result["content"][0]["type"] == "text"


@pytest.mark.parametrize(
    ("name", "arguments"),
    [
        (
            "ccweb_send_message",
            {"targetConversationId": "b", "content": "x", "replyMode": "one_way"},
        ),
        ("ccweb_request_reply", {"targetConversationId": "b", "content": "x"}),
        ("ccweb_create_conversation", {"title": "new"}),
        ("ccweb_get_pending_reply", {}),
        ("ccweb_list_user_inputs", {}),
        ("ccweb_prompt_user", {"questions": [{"id": "q", "question": "ok?"}]}),
    ],
)
async def test_every_tool_including_the_hidden_alias_is_callable(
    store: Store, name: str, arguments: dict[str, Any]
) -> None:
    async with app_client(store) as client:
        response = await mcp(
            client, "tools/call", {"name": name, "arguments": arguments}, query="?sourceSessionId=a"
        )
        body = response.json()
        assert "error" not in body, body  # a tool result, never a JSON-RPC error
        result = body["result"]
        assert isinstance(result["isError"], bool)
        if result["isError"]:  # behaviour owned by other modules may not exist yet
            assert set(result["structuredContent"]["error"]) == {"code", "message"}


async def test_a_bad_source_hop_count_is_400_with_a_clear_message(store: Store) -> None:
    async with app_client(store) as client:
        for bad in ("-1", "two", "1.5"):
            response = await mcp(client, "ping", query=f"?sourceSessionId=a&sourceHopCount={bad}")
            assert response.status_code == 400
            message = response.json()["error"]["message"]
            assert "sourceHopCount must be a non-negative integer" in message


# ccweb_list_conversations: real behaviour on both backends.


async def _seed(client: httpx.AsyncClient) -> None:
    from tests.http_client import rpc_result

    for sid, title in (("alpha", "Alpha work"), ("beta", "Beta review"), ("gamma", "Gamma")):
        await rpc_result(client, "session.create", {"id": sid, "title": title, "agent": "claude"})
    await rpc_result(
        client, "message.append", {"sessionId": "alpha", "role": "user", "content": "secret"}
    )
    await rpc_result(
        client, "message.append", {"sessionId": "alpha", "role": "assistant", "content": "ok"}
    )


async def test_list_conversations_shows_metadata_newest_activity_first(store: Store) -> None:
    async with app_client(store) as client:
        await _seed(client)
        result = await call_tool(
            client, "ccweb_list_conversations", {}, query="?sourceConversationId=beta"
        )
        assert result["isError"] is False
        payload = result["structuredContent"]
        conversations = payload["conversations"]
        assert [c["conversationId"] for c in conversations] == ["alpha", "gamma", "beta"]
        alpha = conversations[0]
        assert set(alpha) == {
            "conversationId",
            "title",
            "agent",
            "createdAt",
            "updatedAt",
            "running",
            "messageCount",
            "isSource",
        }
        assert alpha["messageCount"] == 2
        assert alpha["running"] is False
        assert [c["isSource"] for c in conversations] == [False, False, True]
        assert payload["hasMore"] is False
        assert "secret" not in result["content"][0]["text"]  # never message text


async def test_list_conversations_limits_filters_and_reports_more(store: Store) -> None:
    async with app_client(store) as client:
        await _seed(client)
        first = (await call_tool(client, "ccweb_list_conversations", {"limit": 1}))[
            "structuredContent"
        ]
        assert len(first["conversations"]) == 1 and first["hasMore"] is True
        found = (await call_tool(client, "ccweb_list_conversations", {"query": "REVIEW"}))[
            "structuredContent"
        ]
        assert [c["conversationId"] for c in found["conversations"]] == ["beta"]
        clamped = (await call_tool(client, "ccweb_list_conversations", {"limit": 1000}))[
            "structuredContent"
        ]
        assert len(clamped["conversations"]) == 3


async def test_list_conversations_hides_archived_unless_asked_and_shows_running(
    store: Store,
) -> None:
    async with app_client(store) as client:
        await _seed(client)
        async with store.uow() as uow:
            await uow.sessions.update_columns(
                "gamma", {"archived_at": utcnow() - timedelta(minutes=1)}
            )
            await uow.runs.start("alpha", "user_turn")
            await uow.commit()
        listed = (await call_tool(client, "ccweb_list_conversations", {}))["structuredContent"]
        assert "gamma" not in [c["conversationId"] for c in listed["conversations"]]
        running = {c["conversationId"]: c["running"] for c in listed["conversations"]}
        assert running == {"alpha": True, "beta": False}
        everything = (
            await call_tool(client, "ccweb_list_conversations", {"includeArchived": True})
        )["structuredContent"]
        assert "gamma" in [c["conversationId"] for c in everything["conversations"]]


def test_the_source_comes_from_the_query_string_with_its_alias_and_hop_count() -> None:
    assert source_from_query({}) == Source(None, 0)
    assert source_from_query({"sourceSessionId": "a", "sourceHopCount": "3"}) == Source("a", 3)
    assert source_from_query({"sourceConversationId": "b"}) == Source("b", 0)
    assert source_from_query({"sourceSessionId": "a", "sourceConversationId": "b"}).session_id == (
        "a"
    )
    with pytest.raises(SourceError, match="non-negative integer"):
        source_from_query({"sourceHopCount": "٣"})  # a non-ASCII digit is not a hop count


async def test_a_hop_count_of_thousands_of_digits_is_a_400_not_a_crash(store: Store) -> None:
    async with app_client(store) as client:
        response = await mcp(client, "ping", query="?sourceHopCount=" + "9" * 5000)
        assert response.status_code == 400
        error = response.json()["error"]
        assert error["code"] == jsonrpc.INVALID_REQUEST
        assert "at most 9 digits" in error["message"]
        assert len(error["message"]) < 300
        assert (await mcp(client, "ping", query="?sourceHopCount=999999999")).status_code == 200


@pytest.mark.parametrize(
    ("tool", "arguments"),
    [
        ("ccweb_send_message", {"targetConversationId": "conv-b", "content": "a\x00b"}),
        ("ccweb_create_conversation", {"title": "x", "content": "hi", "agent": "\x00"}),
        ("ccweb_prompt_user", {"questions": [{"id": "q", "question": "Why\x00?"}]}),
        ("ccweb_list_conversations", {"query": "\x00"}),
    ],
)
async def test_a_tool_argument_holding_a_nul_character_is_refused_and_writes_nothing(
    pair: Store, tool: str, arguments: dict[str, Any]
) -> None:
    before = await table_row_counts(pair)
    async with app_client(pair) as client:
        result = await call_tool(client, tool, arguments, query="?sourceSessionId=conv-a")
    assert result["isError"] is True
    assert result["structuredContent"]["error"]["code"] == errors.INVALID_ARGUMENTS
    assert "NUL character" in result["structuredContent"]["error"]["message"]
    assert await table_row_counts(pair) == before
