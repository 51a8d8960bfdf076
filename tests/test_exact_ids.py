"""A conversation id is matched whole: ``"abc\\n"`` is not ``abc`` and not a valid id.

``$`` in a pattern used with ``re.match`` also matches before a trailing newline, so an id
pattern written ``^…$`` let ``"abc\\n"`` through. Every place a conversation id enters is
checked here over HTTP on the real app (SQLite and PostgreSQL), and the legacy importer
reports such an id instead of importing it.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from ccweb_store.domain.ids import SESSION_ID_PATTERN
from ccweb_store.importer.load import import_state
from ccweb_store.services import credentials
from ccweb_store.store.uow import Store
from tests.http_client import call_tool, rpc, rpc_result
from tests.lifecycle_support import planner_and_tester

#: Ids of conversations that exist, with a line ending after them.
TRAILING = ["planner\n", "planner\r\n", "planner\n\n", "tester\n"]


@pytest.fixture
async def client(store: Store) -> AsyncIterator[httpx.AsyncClient]:
    """The real app with ``planner`` (the source) and ``tester`` (the target)."""
    async with planner_and_tester(store) as http:
        yield http


async def refused_code(client: httpx.AsyncClient, method: str, params: dict[str, Any]) -> str:
    answer = await rpc(client, method, params)
    assert "result" not in answer, answer
    assert answer["error"]["code"] == -32000, answer
    code: str = answer["error"]["data"]["code"]
    return code


async def everything(client: httpx.AsyncClient) -> tuple[list[str], int, int, int]:
    """Conversation ids, and how many messages, runs and reply requests exist."""
    sessions = (await rpc_result(client, "session.list", {"limit": 500}))["sessions"]
    ids = sorted(session["id"] for session in sessions)
    message_count = 0
    for session_id in ids:
        listed = await rpc_result(client, "message.list", {"sessionId": session_id})
        message_count += len(listed["messages"])
    run_count = len((await rpc_result(client, "run.list", {"limit": 500}))["runs"])
    reply_count = len((await rpc_result(client, "reply.list", {"limit": 500}))["replies"])
    return ids, message_count, run_count, reply_count


@pytest.mark.parametrize("bad", ["abc\n", "abc\r\n", "a-b_c\n", "abc\n\n"])
def test_the_conversation_id_pattern_refuses_a_trailing_newline(bad: str) -> None:
    assert SESSION_ID_PATTERN.fullmatch(bad) is None
    assert SESSION_ID_PATTERN.match(bad) is None  # anchored at the very end, whatever the call
    assert SESSION_ID_PATTERN.fullmatch(bad.rstrip()) is not None


@pytest.mark.parametrize("bad", ["abc\n", "new-one\n", "x\r\n"])
async def test_session_create_refuses_an_id_with_a_trailing_newline(
    client: httpx.AsyncClient, bad: str
) -> None:
    before = await everything(client)
    assert await refused_code(client, "session.create", {"id": bad}) == "invalid_conversation_id"
    assert await everything(client) == before


@pytest.mark.parametrize("bad", TRAILING)
async def test_every_host_method_refuses_a_conversation_id_with_a_trailing_newline(
    client: httpx.AsyncClient, bad: str
) -> None:
    before = await everything(client)
    calls: list[tuple[str, dict[str, Any]]] = [
        ("message.append", {"sessionId": bad, "role": "user", "content": "hello"}),
        ("message.list", {"sessionId": bad}),
        ("run.start", {"sessionId": bad}),
        ("run.enqueue", {"sessionId": bad}),
        ("run.list", {"sessionId": bad}),
        ("reply.list", {"sessionId": bad}),
        ("credential.mint", {"sessionId": bad}),
        ("credential.list", {"sessionId": bad}),
    ]
    for method, params in calls:
        code = await refused_code(client, method, params)
        assert (method, code) == (method, "invalid_conversation_id")
    assert await everything(client) == before


@pytest.mark.parametrize("bad", TRAILING)
async def test_a_tool_refuses_a_target_or_conversation_id_with_a_trailing_newline(
    client: httpx.AsyncClient, bad: str
) -> None:
    before = await everything(client)
    arguments = {"targetConversationId": bad, "content": "hi", "replyMode": "one_way"}
    result = await call_tool(
        client, "ccweb_send_message", arguments, query="?sourceSessionId=planner"
    )
    assert result["isError"] is True
    assert result["structuredContent"]["error"]["code"] == "invalid_conversation_id"
    inputs = await call_tool(
        client, "ccweb_list_user_inputs", {"conversationId": bad}, query="?sourceSessionId=tester"
    )
    assert inputs["isError"] is True
    assert inputs["structuredContent"]["error"]["code"] == "invalid_conversation_id"
    assert await everything(client) == before


@pytest.mark.parametrize("encoded", ["planner%0A", "planner%0D%0A", "tester%0A"])
async def test_a_source_id_with_a_trailing_newline_in_the_query_string_is_refused(
    client: httpx.AsyncClient, encoded: str
) -> None:
    before = await everything(client)
    target = "planner" if encoded.startswith("tester") else "tester"
    arguments = {"targetConversationId": target, "content": "hi", "replyMode": "one_way"}
    result = await call_tool(
        client, "ccweb_send_message", arguments, query=f"?sourceSessionId={encoded}"
    )
    assert result["isError"] is True
    assert result["structuredContent"]["error"]["code"] == "invalid_conversation_id"
    assert await everything(client) == before


@pytest.mark.parametrize("bad", TRAILING)
async def test_tools_call_refuses_a_source_id_with_a_trailing_newline(
    client: httpx.AsyncClient, bad: str
) -> None:
    before = await everything(client)
    params = {
        "tool": "ccweb_send_message",
        "args": {"targetConversationId": "tester", "content": "hi", "replyMode": "one_way"},
        "sourceSessionId": bad,
    }
    assert await refused_code(client, "tools.call", params) == "invalid_conversation_id"
    assert await everything(client) == before


def test_a_credential_naming_a_conversation_with_a_trailing_newline_is_malformed() -> None:
    key = b"k" * 32
    claims = credentials.Claims("planner\n", "cred1", 0, 0)
    token = credentials.sign(key, claims)  # signed right: only the id is wrong
    with pytest.raises(credentials.CredentialRefused, match="malformed"):
        credentials.read_token(key, token)
    good = credentials.Claims("planner", "cred1", 0, 0)
    assert credentials.read_token(key, credentials.sign(key, good)) == good


async def test_the_importer_reports_a_legacy_session_id_with_a_trailing_newline(
    store: Store, tmp_path: Path
) -> None:
    sessions = tmp_path / "state" / "sessions"
    sessions.mkdir(parents=True)
    (sessions / "good.json").write_text(json.dumps({"id": "good", "messages": []}))
    (sessions / "newline.json").write_text(json.dumps({"id": "abc\n", "messages": []}))

    summary = await import_state(store, tmp_path / "state")

    assert summary.sessions.imported == 1
    [skipped] = summary.skipped
    assert Path(skipped.path).name == "newline.json"
    assert "invalid conversation id 'abc\\n'" in skipped.reason
    async with store.read_uow() as uow:
        assert await uow.sessions.get("good") is not None
        assert await uow.sessions.get("abc\n") is None
        assert await uow.sessions.get("abc") is None
