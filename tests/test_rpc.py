"""``POST /rpc``: session, message and tools methods, over HTTP on both backends."""

from __future__ import annotations

from typing import Any

import pytest

from ccweb_store.domain import errors
from ccweb_store.protocol import jsonrpc
from ccweb_store.protocol import registry as tools
from ccweb_store.store.uow import Store
from tests.http_client import app_client, rpc, rpc_result
from tests.lifecycle_support import make_conversation, table_row_counts


def _domain_code(answer: dict[str, Any]) -> str:
    assert answer["error"]["code"] == jsonrpc.DOMAIN_ERROR, answer
    code: str = answer["error"]["data"]["code"]
    return code


async def test_session_create_returns_the_session_shape(store: Store) -> None:
    async with app_client(store) as client:
        session = await rpc_result(
            client, "session.create", {"id": "conv-1", "title": "T", "agent": "codex", "cwd": "/w"}
        )
        assert session == {
            "id": "conv-1",
            "title": "T",
            "agent": "codex",
            "cwd": "/w",
            "createdAt": session["createdAt"],
            "updatedAt": session["createdAt"],
            "archived": False,
            "agentSessionId": None,
            "box": None,
            "running": False,
            "activeRunId": None,
        }
        assert session["createdAt"].endswith("Z")


async def test_a_foreign_origin_is_403_and_says_which_setting_allows_it(store: Store) -> None:
    async with app_client(store) as client:
        message = {"jsonrpc": "2.0", "id": 1, "method": "session.list"}
        response = await client.post(
            "/rpc", json=message, headers={"Origin": "http://evil.example"}
        )
        assert response.status_code == 403
        assert "CCWEB_ALLOWED_ORIGINS" in response.json()["error"]["message"]


async def test_session_create_without_an_id_makes_one(store: Store) -> None:
    async with app_client(store) as client:
        session = await rpc_result(client, "session.create", {})
        assert session["id"].startswith("conv_")


async def test_session_create_refuses_a_taken_or_malformed_id(store: Store) -> None:
    async with app_client(store) as client:
        await rpc_result(client, "session.create", {"id": "dup"})
        assert _domain_code(await rpc(client, "session.create", {"id": "dup"})) == (
            errors.CONVERSATION_EXISTS
        )
        assert _domain_code(await rpc(client, "session.create", {"id": "../etc"})) == (
            errors.INVALID_CONVERSATION_ID
        )
        assert _domain_code(await rpc(client, "session.create", {"title": 5})) == (
            errors.INVALID_ARGUMENTS
        )


async def test_session_get_shows_the_running_run(store: Store) -> None:
    async with app_client(store) as client:
        await rpc_result(client, "session.create", {"id": "s"})
        async with store.uow() as uow:
            run = await uow.runs.start("s", "user_turn")
            await uow.commit()
        session = await rpc_result(client, "session.get", {"id": "s"})
        assert session["running"] is True
        assert session["activeRunId"] == run.id
        assert _domain_code(await rpc(client, "session.get", {"id": "nope"})) == (
            errors.CONVERSATION_NOT_FOUND
        )
        assert _domain_code(await rpc(client, "session.get", {})) == errors.INVALID_ARGUMENTS


async def test_session_list_pages_with_a_cursor(store: Store) -> None:
    async with app_client(store) as client:
        for n in range(5):
            await rpc_result(client, "session.create", {"id": f"s{n}"})
        seen: list[str] = []
        cursor = None
        while True:
            page = await rpc_result(client, "session.list", {"limit": 2, "cursor": cursor})
            seen += [session["id"] for session in page["sessions"]]
            cursor = page["nextCursor"]
            if cursor is None:
                break
        assert seen == ["s4", "s3", "s2", "s1", "s0"]
        bad = await rpc(client, "session.list", {"cursor": "garbage!"})
        assert _domain_code(bad) == errors.INVALID_CURSOR


async def test_message_append_and_list_round_trip(store: Store) -> None:
    async with app_client(store) as client:
        await rpc_result(client, "session.create", {"id": "s"})
        first = await rpc_result(
            client,
            "message.append",
            {"sessionId": "s", "role": "user", "content": "hello", "metadata": {"k": 1}},
        )
        assert first == {
            "id": first["id"],
            "sessionId": "s",
            "seq": 1,
            "role": "user",
            "content": "hello",
            "createdAt": first["createdAt"],
            "metadata": {"k": 1},
        }
        second = await rpc_result(
            client,
            "message.append",
            {"sessionId": "s", "role": "assistant", "content": "hi", "id": "m-2"},
        )
        assert (second["id"], second["seq"]) == ("m-2", 2)
        page = await rpc_result(client, "message.list", {"sessionId": "s"})
        assert [m["content"] for m in page["messages"]] == ["hello", "hi"]
        assert page["nextAfterSeq"] == 2
        later = await rpc_result(client, "message.list", {"sessionId": "s", "afterSeq": 1})
        assert [m["id"] for m in later["messages"]] == ["m-2"]
        empty = await rpc_result(client, "message.list", {"sessionId": "s", "afterSeq": 2})
        assert empty == {"messages": [], "nextAfterSeq": 2}
        limited = await rpc_result(client, "message.list", {"sessionId": "s", "limit": 1})
        assert [m["seq"] for m in limited["messages"]] == [1]
        assert limited["nextAfterSeq"] == 1


async def test_message_append_joins_text_blocks_and_keeps_them(store: Store) -> None:
    blocks = [{"type": "text", "text": "one"}, {"type": "image", "data": "…"}, "two"]
    async with app_client(store) as client:
        await rpc_result(client, "session.create", {"id": "s"})
        message = await rpc_result(
            client, "message.append", {"sessionId": "s", "role": "user", "content": blocks}
        )
        assert message["content"] == "one\ntwo"
        assert message["metadata"]["contentBlocks"] == blocks


@pytest.mark.parametrize(
    ("params", "code"),
    [
        ({"sessionId": "s", "role": "robot", "content": "x"}, errors.INVALID_ROLE),
        ({"sessionId": "s", "role": "user"}, errors.INVALID_ARGUMENTS),
        ({"sessionId": "s", "role": "user", "content": "x", "metadata": []}, "invalid_arguments"),
        ({"sessionId": "ghost", "role": "user", "content": "x"}, errors.CONVERSATION_NOT_FOUND),
        ({"sessionId": "bad id", "role": "user", "content": "x"}, "invalid_conversation_id"),
    ],
)
async def test_message_append_refuses_bad_input(
    store: Store, params: dict[str, Any], code: str
) -> None:
    async with app_client(store) as client:
        await rpc_result(client, "session.create", {"id": "s"})
        assert _domain_code(await rpc(client, "message.append", params)) == code


async def test_message_list_of_a_missing_session_is_not_found(store: Store) -> None:
    async with app_client(store) as client:
        answer = await rpc(client, "message.list", {"sessionId": "ghost"})
        assert _domain_code(answer) == errors.CONVERSATION_NOT_FOUND
        answer = await rpc(client, "message.list", {"sessionId": "ghost", "afterSeq": -1})
        assert _domain_code(answer) == errors.INVALID_ARGUMENTS


async def test_tools_methods_are_derived_from_the_registry(store: Store) -> None:
    async with app_client(store) as client:
        assert await rpc_result(client, "tools.list") == tools.public_tools()
        dynamic = [tools.dumped(tool) for tool in tools.dynamic_tools()]
        assert await rpc_result(client, "tools.dynamic") == dynamic
        items = await rpc_result(client, "tools.composerItems")
        assert items == [tools.dumped(item) for item in tools.composer_items()]
        assert "mcp:ccweb/ccweb_send_message" in [item["id"] for item in items]
        mcp_tools = (
            await client.post("/mcp", json={"jsonrpc": "2.0", "id": 1, "method": "tools/list"})
        ).json()["result"]["tools"]
        assert await rpc_result(client, "tools.list") == mcp_tools


@pytest.mark.parametrize("method", ["tools.call", "tools.callDynamic"])
async def test_tools_call_returns_the_payload_for_the_source(store: Store, method: str) -> None:
    async with app_client(store) as client:
        await rpc_result(client, "session.create", {"id": "me"})
        for params in (
            {"tool": "ccweb_list_conversations", "args": {}, "sourceSessionId": "me"},
            {"name": "ccweb_list_conversations", "arguments": {}, "sourceSessionId": "me"},
        ):
            payload = await rpc_result(client, method, params)
            assert payload["conversations"][0]["conversationId"] == "me"
            assert payload["conversations"][0]["isSource"] is True


@pytest.mark.parametrize("method", ["tools.call", "tools.callDynamic"])
async def test_tools_call_accepts_the_hidden_alias(store: Store, method: str) -> None:
    async with app_client(store) as client:
        answer = await rpc(
            client,
            method,
            {
                "tool": "ccweb_request_reply",
                "args": {"targetConversationId": "t", "content": "x"},
                "sourceSessionId": "me",
                "sourceHopCount": 1,
            },
        )
        # Accepted and dispatched: whatever the send answers, it is never "unknown tool".
        assert answer.get("error", {}).get("code") != jsonrpc.INVALID_PARAMS


async def test_tools_call_errors(store: Store) -> None:
    async with app_client(store) as client:
        unknown = await rpc(client, "tools.call", {"tool": "ccweb_nope", "sourceSessionId": "me"})
        assert unknown["error"]["code"] == jsonrpc.INVALID_PARAMS
        typed = await rpc(
            client, "tools.call", {"tool": "ccweb_list_conversations", "args": {"limit": "x"}}
        )
        assert _domain_code(typed) == errors.INVALID_ARGUMENTS
        nameless = await rpc(client, "tools.call", {"args": {}})
        assert _domain_code(nameless) == errors.INVALID_ARGUMENTS
        hops = await rpc(
            client,
            "tools.call",
            {"tool": "ccweb_list_conversations", "sourceHopCount": -2},
        )
        assert _domain_code(hops) == errors.INVALID_ARGUMENTS


async def test_a_queued_run_is_the_active_run_but_not_running(store: Store) -> None:
    async with app_client(store) as client:
        await rpc_result(client, "session.create", {"id": "q"})
        await rpc_result(client, "session.create", {"id": "idle"})
        async with store.uow() as uow:
            queued = await uow.runs.enqueue("q", "cross_conversation")
            await uow.commit()
        listed = await rpc_result(client, "session.list", {})
        by_id = {session["id"]: session for session in listed["sessions"]}
        assert (by_id["q"]["running"], by_id["q"]["activeRunId"]) == (False, queued.id)
        assert (by_id["idle"]["running"], by_id["idle"]["activeRunId"]) == (False, None)
        async with store.uow() as uow:
            running = await uow.runs.start("q", "user_turn")
            await uow.commit()
        session = await rpc_result(client, "session.get", {"id": "q"})
        assert (session["running"], session["activeRunId"]) == (True, running.id)


async def test_answers_are_compact_utf8_json_with_text_as_written(store: Store) -> None:
    async with app_client(store) as client:
        response = await client.post(
            "/rpc",
            json={
                "jsonrpc": "2.0",
                "id": 7,
                "method": "session.create",
                "params": {"id": "utf8", "title": "Grüße — 会话 ✓"},
            },
        )
    assert response.headers["content-type"] == "application/json"
    assert "Grüße — 会话 ✓".encode() in response.content  # not \\u-escaped
    assert b'"id":7,' in response.content and b", " not in response.content
    assert response.json()["result"]["title"] == "Grüße — 会话 ✓"


async def test_a_body_that_is_not_json_is_a_parse_error(store: Store) -> None:
    async with app_client(store) as client:
        for body in (b'{"jsonrpc": "2.0", "id": 1, "method": ', b"\xff\xfe", b"NaN"):
            response = await client.post(
                "/rpc", content=body, headers={"content-type": "application/json"}
            )
            answer = response.json()
            assert answer["id"] is None and answer["error"]["code"] == jsonrpc.PARSE_ERROR
            assert answer["error"]["message"].startswith("parse error: the body is not valid JSON")


@pytest.mark.parametrize(
    ("method", "params", "named"),
    [
        ("run.claim", {"workerId": "w", "leaseSeconds": 2**63 - 1}, "leaseSeconds"),
        ("run.heartbeat", {"runId": "run_x", "workerId": "w", "leaseSeconds": 10**18}, "lease"),
        ("reply.expire", {"olderThanSeconds": 1e308}, "olderThanSeconds"),
        ("credential.mint", {"sessionId": "conv-a", "expiresInSeconds": 2**63 - 1}, "100 years"),
        ("credential.mint", {"sessionId": "conv-a", "hopCount": 2**31}, "hopCount"),
        ("session.create", {"id": "conv-z", "agent": "a" * 65}, "agent"),
        ("run.claim", {"workerId": "w" * 129}, "workerId"),
        ("run.start", {"sessionId": "conv-a", "workerId": "w" * 129}, "workerId"),
        (
            "message.append",
            {"sessionId": "conv-a", "role": "user", "content": "x", "id": "m" * 129},
            "id",
        ),
        ("message.append", {"sessionId": "conv-a", "role": "user", "content": "a\x00b"}, "NUL"),
        (
            "message.append",
            {"sessionId": "conv-a", "role": "user", "content": "x", "metadata": {"k": ["\x00"]}},
            "NUL",
        ),
        ("session.create", {"id": "conv-z", "title": "\x00"}, "NUL"),
        (
            "tools.call",
            {
                "tool": "ccweb_create_conversation",
                "args": {"cwd": "/\x00"},
                "sourceSessionId": "conv-a",
            },
            "NUL",
        ),
    ],
)
async def test_values_the_database_cannot_hold_are_invalid_arguments_and_write_nothing(
    store: Store, method: str, params: dict[str, Any], named: str
) -> None:
    await make_conversation(store, "conv-a")
    before = await table_row_counts(store)
    async with app_client(store) as client:
        answer = await rpc(client, method, params)
    assert _domain_code(answer) == errors.INVALID_ARGUMENTS
    assert named in answer["error"]["message"]
    assert await table_row_counts(store) == before


async def test_a_lease_of_seven_days_is_the_longest_a_claim_may_ask_for(store: Store) -> None:
    await make_conversation(store, "conv-a")
    async with app_client(store) as client:
        await rpc_result(client, "run.start", {"sessionId": "conv-a"})
        too_long = await rpc(client, "run.claim", {"workerId": "w", "leaseSeconds": 604_801})
        assert "7 days; heartbeat to hold a run longer" in too_long["error"]["message"]
        assert await rpc_result(client, "run.claim", {"workerId": "w", "leaseSeconds": 604_800})


async def test_a_message_id_that_is_taken_is_a_documented_message_exists(store: Store) -> None:
    await make_conversation(store, "conv-a")
    params = {"sessionId": "conv-a", "role": "user", "content": "x", "id": "msg-1"}
    async with app_client(store) as client:
        await rpc_result(client, "message.append", params)
        before = await table_row_counts(store)
        answer = await rpc(client, "message.append", params)
    assert _domain_code(answer) == errors.MESSAGE_EXISTS
    assert "leave id out" in answer["error"]["message"]
    assert await table_row_counts(store) == before
