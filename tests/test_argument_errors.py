"""A tool's arguments are validated once, by the model its published schema comes from: what
the schema says is what is refused, and each refusal names its argument in one sentence."""

from __future__ import annotations

from typing import Any

import pytest

from ccweb_store.domain import errors
from ccweb_store.domain.context import Source
from ccweb_store.domain.errors import DomainError
from ccweb_store.domain.kinds import ReplyMode
from ccweb_store.protocol import registry as tools


async def refusal(name: str, arguments: object) -> DomainError:
    store: Any = None  # refused before any handler touches the database
    with pytest.raises(DomainError) as caught:
        await tools.call_tool(store, Source("a"), name, arguments)
    return caught.value


@pytest.mark.parametrize(
    ("name", "arguments", "message"),
    [
        ("ccweb_prompt_user", {"title": 3}, "title must be a string, got integer"),
        ("ccweb_list_conversations", {"limit": 1.0}, "limit must be an integer, got number"),
        ("ccweb_prompt_user", {"questions": {}}, "questions must be an array, got object"),
        ("ccweb_prompt_user", {"questions": ["q"]}, "questions[0] must be an object, got string"),
        (
            "ccweb_prompt_user",
            {"questions": [{"id": "a", "question": "?"}, {"id": 7}]},
            "questions[1].id must be a string, got integer",
        ),
        (
            "ccweb_prompt_user",
            {"questions": [{"id": "a", "question": "?", "options": "x"}]},
            "questions[0].options must be an array, got string",
        ),
        ("ccweb_send_message", {"content": "hi"}, "targetConversationId is required"),
        (
            "ccweb_send_message",
            {"targetConversationId": "b", "content": None},
            "content is required",
        ),
        (
            "ccweb_create_conversation",
            {"agent": "x" * 65},
            "agent is 65 characters long; the limit is 64",
        ),
    ],
)
async def test_each_refusal_names_its_argument_where_it_is(
    name: str, arguments: dict[str, Any], message: str
) -> None:
    refused = await refusal(name, arguments)
    assert refused.code == errors.INVALID_ARGUMENTS
    assert refused.message == f"{name}: {message}"


async def test_an_argument_given_wrong_is_named_before_one_left_out() -> None:
    refused = await refusal("ccweb_send_message", {"replyMode": 1})
    assert refused.message == "ccweb_send_message: replyMode must be a string, got integer"


async def test_a_check_with_a_code_of_its_own_keeps_it() -> None:
    bad_id = await refusal("ccweb_send_message", {"targetConversationId": "../x", "content": "c"})
    assert bad_id.code == errors.INVALID_CONVERSATION_ID
    bad_mode = await refusal(
        "ccweb_send_message", {"targetConversationId": "b", "content": "c", "replyMode": "later"}
    )
    assert bad_mode.code == errors.INVALID_REPLY_MODE
    assert "'one_way' when you do not need the result" in bad_mode.message


def test_every_argument_the_schema_lists_is_one_the_model_reads() -> None:
    for tool in tools.TOOLS:
        aliases = {field.alias for field in tool.input.model_fields.values()}
        assert set(tool.input_schema["properties"]) <= aliases, tool.name
        assert set(tool.input_schema.get("required", ())) <= set(tool.input_schema["properties"])


def test_reply_mode_is_published_required_and_defaults_to_one_way_for_old_threads() -> None:
    send = tools.get_tool("ccweb_send_message")
    assert "replyMode" in send.input_schema["required"]
    parsed = send.parse({"targetConversationId": "b", "content": "c"})
    assert parsed.reply_mode is ReplyMode.ONE_WAY


def test_only_the_wire_names_are_read() -> None:
    send = tools.get_tool("ccweb_send_message")
    with pytest.raises(DomainError, match="targetConversationId is required"):
        send.parse({"target_conversation_id": "b", "content": "c"})


def test_a_page_size_outside_its_range_is_brought_inside_it() -> None:
    listing = tools.get_tool("ccweb_list_conversations")
    assert listing.parse({"limit": 10_000}).limit == 100
    assert listing.parse({"limit": -3}).limit == 1
