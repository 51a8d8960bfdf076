"""The one registry: definitions, what is derived from them, and argument checking."""

from __future__ import annotations

from typing import Any

import pytest

from ccweb_store.contract.tool_answers import SendAnswer
from ccweb_store.contract.tools import SendMessage
from ccweb_store.domain import errors
from ccweb_store.domain.context import Source
from ccweb_store.domain.errors import DomainError
from ccweb_store.domain.kinds import ReplyMode
from ccweb_store.domain.rows import Party
from ccweb_store.protocol import registry as tools
from ccweb_store.services import messaging
from ccweb_store.store.uow import Store

PUBLIC = [
    "ccweb_send_message",
    "ccweb_create_conversation",
    "ccweb_list_conversations",
    "ccweb_get_pending_reply",
    "ccweb_list_user_inputs",
    "ccweb_prompt_user",
]


def _send_message() -> dict[str, Any]:
    return next(t for t in tools.public_tools() if t["name"] == "ccweb_send_message")


def test_the_public_tools_are_exactly_the_six_of_the_spec() -> None:
    assert [tool["name"] for tool in tools.public_tools()] == PUBLIC


def test_every_public_tool_has_a_title_description_schema_and_annotations() -> None:
    for tool in tools.public_tools():
        assert tool["title"] and tool["description"]
        assert tool["inputSchema"]["type"] == "object"
        assert tool["annotations"]["title"] == tool["title"]
        assert isinstance(tool["annotations"]["readOnlyHint"], bool)


def test_read_only_tools_say_so_and_writing_tools_do_not() -> None:
    hints = {t["name"]: t["annotations"]["readOnlyHint"] for t in tools.public_tools()}
    assert hints == {
        "ccweb_send_message": False,
        "ccweb_create_conversation": False,
        "ccweb_list_conversations": True,
        "ccweb_get_pending_reply": True,
        "ccweb_list_user_inputs": True,
        "ccweb_prompt_user": False,
    }


def test_send_message_requires_target_content_and_reply_mode() -> None:
    schema = _send_message()["inputSchema"]
    assert sorted(schema["required"]) == ["content", "replyMode", "targetConversationId"]
    assert schema["properties"]["targetConversationId"]["type"] == "string"
    assert schema["properties"]["content"]["type"] == "string"


def test_reply_mode_is_an_enum_of_exactly_the_two_modes_with_no_default() -> None:
    schema = _send_message()["inputSchema"]
    reply_mode = schema["properties"]["replyMode"]
    assert reply_mode["type"] == "string"
    assert reply_mode["enum"] == ["one_way", "return_and_continue"]
    assert "default" not in reply_mode
    assert '"default"' not in str(schema).replace("'", '"')


def test_send_message_description_states_the_selection_rule() -> None:
    description = _send_message()["description"]
    assert "one_way" in description and "return_and_continue" in description
    assert "ONLY when this conversation does not need the target's result" in description
    for need in ("analysis", "implementation", "testing", "acceptance", "report back"):
        assert need in description
    assert "depends on the target's result" in description
    assert "MUST" in description
    assert "returns at once and never waits" in description


def test_the_hidden_alias_appears_in_no_list() -> None:
    listed = [
        *(t["name"] for t in tools.public_tools()),
        *(t["name"] for t in [tools.dumped(t) for t in tools.dynamic_tools()]),
        *(item["name"] for item in [tools.dumped(i) for i in tools.composer_items()]),
        *(item["id"] for item in [tools.dumped(i) for i in tools.composer_items()]),
    ]
    assert not any("ccweb_request_reply" in name for name in listed)
    assert tools.get_tool("ccweb_request_reply").public is False


def test_dynamic_tools_are_the_public_communication_tools_plus_namespace() -> None:
    public = {t["name"]: t for t in tools.public_tools()}
    dynamic = [tools.dumped(t) for t in tools.dynamic_tools()]
    assert [t["name"] for t in dynamic] == [n for n in PUBLIC if n != "ccweb_prompt_user"]
    for tool in dynamic:
        assert tool["namespace"] == "ccweb"
        original = public[tool["name"]]
        assert {k: v for k, v in tool.items() if k != "namespace"} == original
        # Derived, not copied: each from the tool's one row of the registry.
        row = tools.get_tool(tool["name"])
        assert tool["description"] == row.description
        assert tool["inputSchema"] == row.input_schema
        assert tool["outputSchema"] == row.output_schema


def test_composer_items_name_every_public_tool_under_mcp_ccweb() -> None:
    items = [tools.dumped(i) for i in tools.composer_items()]
    assert items == [
        {"id": f"mcp:ccweb/{t['name']}", "name": t["name"], "description": t["description"]}
        for t in tools.public_tools()
    ]


def test_an_unknown_tool_name_is_unknown_tool() -> None:
    with pytest.raises(tools.UnknownTool):
        tools.get_tool("ccweb_delete_everything")
    with pytest.raises(tools.UnknownTool):
        tools.get_tool(42)


@pytest.mark.parametrize(
    ("name", "arguments", "fragment"),
    [
        ("ccweb_send_message", {"content": 5}, "content must be a string, got integer"),
        ("ccweb_send_message", {"replyMode": True}, "replyMode must be a string"),
        ("ccweb_list_conversations", {"limit": "5"}, "limit must be an integer, got string"),
        ("ccweb_list_conversations", {"limit": True}, "limit must be an integer, got boolean"),
        ("ccweb_list_conversations", {"includeArchived": "yes"}, "must be a boolean"),
        ("ccweb_prompt_user", {"questions": "one"}, "questions must be an array"),
        ("ccweb_prompt_user", {"questions": [{"id": 1}]}, "questions[0].id must be a string"),
        ("ccweb_request_reply", {"content": []}, "content must be a string, got array"),
    ],
)
async def test_wrong_argument_types_are_invalid_arguments(
    name: str, arguments: dict[str, Any], fragment: str
) -> None:
    store: Any = None  # refused before any handler touches the database
    with pytest.raises(DomainError) as caught:
        await tools.call_tool(store, Source("a"), name, arguments)
    assert caught.value.code == errors.INVALID_ARGUMENTS
    assert fragment in caught.value.message


async def test_arguments_that_are_not_an_object_are_invalid_arguments() -> None:
    store: Any = None
    with pytest.raises(DomainError) as caught:
        await tools.call_tool(store, Source("a"), "ccweb_list_conversations", ["limit", 5])
    assert caught.value.code == errors.INVALID_ARGUMENTS


async def test_the_hidden_alias_sends_with_return_and_continue(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    seen: dict[str, Any] = {}

    async def fake_send(store: Store, source: Source, args: SendMessage) -> SendAnswer:
        seen.update(args=args, source=source)
        return SendAnswer.of(args.reply_mode, "msg_1", "run_1", Party("t", None), "req_1")

    monkeypatch.setattr(messaging, "send_message", fake_send)
    store: Any = None
    payload = await tools.call_tool(
        store,
        Source("src", 2),
        "ccweb_request_reply",
        {"targetConversationId": "t", "content": "hi", "extra": 1},
    )
    assert payload["ok"] is True and payload["requestId"] == "req_1"
    assert seen == {
        "args": SendMessage(
            target_conversation_id="t", content="hi", reply_mode=ReplyMode.RETURN_AND_CONTINUE
        ),
        "source": Source("src", 2),
    }
