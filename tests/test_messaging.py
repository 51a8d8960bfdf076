"""Cross-conversation sends (SPEC §2.2, §2.3) at the service layer, on SQLite and PostgreSQL."""

from __future__ import annotations

import asyncio

import pytest

from ccweb_store.config import Settings
from ccweb_store.domain import errors
from ccweb_store.domain.context import Source
from ccweb_store.domain.errors import DomainError
from ccweb_store.store.uow import Store
from tests import host_calls, tool_calls
from tests.lifecycle_support import (
    ask,
    make_conversation,
    messages_of,
    reply_row,
    row_counts,
    runs_of,
)


async def test_one_way_send_queues_a_target_run_and_creates_no_reply_request(pair: Store) -> None:
    result = await tool_calls.send_message(
        pair,
        Source("conv-a"),
        {"targetConversationId": "conv-b", "content": "FYI: deployed", "replyMode": "one_way"},
    )
    assert result["ok"] is True
    assert result["replyMode"] == "one_way"
    assert result["targetConversationId"] == "conv-b"
    assert result["targetTitle"] == "Tester"
    assert result["deliveryStatus"] == "queued"
    assert "requestId" not in result and "status" not in result
    assert (await row_counts(pair))["reply_requests"] == 0

    [message] = await messages_of(pair, "conv-b")
    assert message.id == result["messageId"]
    assert message.role == "user" and message.content == "FYI: deployed"
    assert message.metadata_ == {
        "crossConversation": {
            "sourceConversationId": "conv-a",
            "sourceTitle": "Planner",
            "hopCount": 1,
            "replyMode": "one_way",
            "expectsReply": False,
            "replyRequestId": None,
        }
    }
    [run] = await runs_of(pair, "conv-b")
    assert run.id == result["runId"]
    assert (run.kind, run.status, run.hop_count, run.reply_request_id) == (
        "cross_conversation",
        "queued",
        1,
        None,
    )
    assert run.runtime_text is not None
    assert "will NOT be returned to the source" in run.runtime_text
    assert "Planner" in run.runtime_text and "FYI: deployed" in run.runtime_text


async def test_send_without_reply_mode_is_one_way(pair: Store) -> None:
    result = await tool_calls.send_message(
        pair, Source("conv-a"), {"targetConversationId": "conv-b", "content": "old thread"}
    )
    assert result["replyMode"] == "one_way"
    assert "requestId" not in result
    assert (await row_counts(pair))["reply_requests"] == 0


async def test_return_and_continue_creates_a_waiting_request_with_the_original_request(
    pair: Store,
) -> None:
    result = await ask(pair, "conv-a", "conv-b", "Run the suite and report", hop=1)
    request_id = result["requestId"]
    assert result["replyMode"] == "return_and_continue"
    assert result["status"] == "waiting"
    assert result["replyDelivery"] == "automatic"
    assert result["sourceAutoRun"] is True

    [message] = await messages_of(pair, "conv-b")
    cross = message.metadata_["crossConversation"]  # type: ignore[index]
    assert cross["expectsReply"] is True
    assert cross["replyRequestId"] == request_id
    assert cross["replyMode"] == "return_and_continue"
    assert cross["hopCount"] == 2

    row = await reply_row(pair, request_id)
    assert row.status == "waiting"
    assert row.original_request == "Run the suite and report"
    assert row.message_id == message.id
    assert (row.source_conversation_id, row.source_title) == ("conv-a", "Planner")
    assert (row.target_conversation_id, row.target_title) == ("conv-b", "Tester")
    assert row.hop_count == 2 and row.source_auto_run is True

    [run] = await runs_of(pair, "conv-b")
    assert run.reply_request_id == request_id and run.hop_count == 2
    assert run.runtime_text is not None
    assert request_id in run.runtime_text
    assert "automatically returns the final output" in run.runtime_text
    assert "Do NOT call ccweb_send_message" in run.runtime_text


async def test_forced_reply_mode_is_the_hidden_alias(pair: Store) -> None:
    result = await tool_calls.send_message(
        pair,
        Source("conv-a"),
        {"targetConversationId": "conv-b", "content": "check this"},
        reply_mode="return_and_continue",
    )
    assert result["replyMode"] == "return_and_continue"
    assert (await reply_row(pair, result["requestId"])).status == "waiting"


async def test_invalid_reply_mode_is_refused_and_writes_nothing(pair: Store) -> None:
    with pytest.raises(DomainError) as caught:
        await tool_calls.send_message(
            pair,
            Source("conv-a"),
            {"targetConversationId": "conv-b", "content": "x", "replyMode": "wait"},
        )
    assert caught.value.code == errors.INVALID_REPLY_MODE
    assert "return_and_continue" in caught.value.message
    assert await row_counts(pair) == {"messages": 0, "reply_requests": 0, "runs": 0}


MISSING = object()
B = "conv-b"


@pytest.mark.parametrize(
    ("source", "target", "content", "code"),
    [
        (Source(None), B, "x", "missing_source_conversation"),
        (Source("bad id!"), B, "x", "invalid_conversation_id"),
        (Source("conv-a"), "../etc", "x", "invalid_conversation_id"),
        (Source("conv-a"), 7, "x", "invalid_arguments"),  # no string: the wrong JSON type
        (Source("conv-a"), MISSING, "x", "invalid_arguments"),
        (Source("conv-a"), "conv-a", "x", "cannot_target_self"),
        (Source("conv-a"), B, "", "invalid_arguments"),
        (Source("conv-a"), B, "   ", "invalid_arguments"),
        (Source("conv-a"), B, 42, "invalid_arguments"),
        (Source("conv-a"), B, MISSING, "invalid_arguments"),
        (Source("nobody"), B, "x", "conversation_not_found"),
        (Source("conv-a"), "nobody", "x", "conversation_not_found"),
        (Source("conv-a", 4), B, "x", "hop_limit_exceeded"),
    ],
)
async def test_a_refused_send_names_its_error_and_writes_nothing(
    pair: Store, source: Source, target: object, content: object, code: str
) -> None:
    args = {
        key: value
        for key, value in (("targetConversationId", target), ("content", content))
        if value is not MISSING
    }
    with pytest.raises(DomainError) as caught:
        await tool_calls.send_message(pair, source, args)
    assert caught.value.code == code
    assert await row_counts(pair) == {"messages": 0, "reply_requests": 0, "runs": 0}


async def test_arguments_that_are_not_an_object_are_refused(pair: Store) -> None:
    with pytest.raises(DomainError) as caught:
        await tool_calls.send_message(pair, Source("conv-a"), ["conv-b", "x"])  # type: ignore[arg-type]
    assert caught.value.code == errors.INVALID_ARGUMENTS


async def test_content_over_the_limit_is_refused(pair: Store, settings: Settings) -> None:
    small = Store(pair.engine, settings.model_copy(update={"max_content_chars": 10}))
    args = {"targetConversationId": "conv-b", "content": "é" * 11, "replyMode": "one_way"}
    try:
        with pytest.raises(DomainError) as caught:
            await tool_calls.send_message(small, Source("conv-a"), args)
        assert caught.value.code == errors.INVALID_ARGUMENTS
        assert "limit is 10" in caught.value.message
        args["content"] = "é" * 10
        assert (await tool_calls.send_message(small, Source("conv-a"), args))["ok"] is True
    finally:
        await small.close()  # the engine is pair's


async def test_hop_limit_allows_the_last_hop(pair: Store) -> None:
    result = await ask(pair, "conv-a", "conv-b", "last hop", hop=3)
    [run] = await runs_of(pair, "conv-b")
    assert run.id == result["runId"] and run.hop_count == 4


@pytest.mark.parametrize("active", ["queued", "running"])
async def test_a_busy_target_is_refused_and_nothing_is_written(pair: Store, active: str) -> None:
    if active == "running":
        await host_calls.start_run(pair, {"sessionId": "conv-b"})
    else:
        await tool_calls.send_message(
            pair, Source("conv-a"), {"targetConversationId": "conv-b", "content": "first"}
        )
    before = await row_counts(pair)
    with pytest.raises(DomainError) as caught:
        await ask(pair, "conv-a", "conv-b", "second")
    assert caught.value.code == errors.TARGET_BUSY
    assert await row_counts(pair) == before


async def test_two_concurrent_sends_to_one_idle_target_do_not_both_succeed(
    pair: Store, settings: Settings
) -> None:
    stores = [Store.from_settings(settings) for _ in range(2)]
    try:
        results = await asyncio.gather(
            *(ask(s, "conv-a", "conv-b", f"race {i}") for i, s in enumerate(stores)),
            return_exceptions=True,
        )
    finally:
        for s in stores:
            await s.dispose()
    won = [r for r in results if isinstance(r, dict)]
    lost = [r for r in results if isinstance(r, DomainError)]
    assert len(won) == 1 and len(lost) == 1
    assert lost[0].code == errors.TARGET_BUSY
    assert await row_counts(pair) == {"messages": 1, "reply_requests": 1, "runs": 1}


async def test_create_conversation_without_content_only_creates_it(store: Store) -> None:
    result = await tool_calls.create_conversation(store, Source(None), {"title": "Scratch"})
    assert result == {"ok": True, "conversationId": result["conversationId"], "title": "Scratch"}
    assert await row_counts(store) == {"messages": 0, "reply_requests": 0, "runs": 0}
    async with store.read_uow() as uow:
        assert (await uow.sessions.require(result["conversationId"])).title == "Scratch"


@pytest.mark.parametrize("flag", ["requestReply", "waitForReply"])
async def test_create_conversation_asking_for_a_reply_sends_return_and_continue(
    pair: Store, flag: str
) -> None:
    result = await tool_calls.create_conversation(
        pair,
        Source("conv-a", 1),
        {"title": "Reviewer", "content": "Review PR 12", flag: True, "agent": "codex", "cwd": "/w"},
    )
    new_id = result["conversationId"]
    assert result["ok"] is True and result["title"] == "Reviewer"
    assert result["replyMode"] == "return_and_continue"
    assert result["replyStatus"] == "waiting"
    assert result["replyDelivery"] == "automatic"
    assert result["sourceAutoRun"] is True
    row = await reply_row(pair, result["requestId"])
    assert (row.target_conversation_id, row.original_request) == (new_id, "Review PR 12")
    [run] = await runs_of(pair, new_id)
    assert run.id == result["runId"] and run.hop_count == 2
    assert result["requestId"] in (run.runtime_text or "")
    async with pair.read_uow() as uow:
        created = await uow.sessions.require(new_id)
    assert (created.agent, created.cwd) == ("codex", "/w")


async def test_create_conversation_with_content_but_no_reply_is_one_way(pair: Store) -> None:
    result = await tool_calls.create_conversation(
        pair, Source("conv-a"), {"content": "Summarise the logs\nmore detail"}
    )
    assert result["title"] == "Summarise the logs"
    assert result["replyMode"] == "one_way"
    assert "requestId" not in result
    [message] = await messages_of(pair, result["conversationId"])
    assert message.id == result["messageId"]
    assert (await row_counts(pair))["reply_requests"] == 0


async def test_create_conversation_with_content_needs_a_source_and_writes_nothing(
    store: Store,
) -> None:
    with pytest.raises(DomainError) as caught:
        await tool_calls.create_conversation(store, Source(None), {"content": "hello"})
    assert caught.value.code == errors.MISSING_SOURCE_CONVERSATION
    async with store.read_uow() as uow:
        sessions, _ = await uow.sessions.list_page()
    assert sessions == []


async def test_pending_reply_detail_is_visible_to_its_source_and_target_only(pair: Store) -> None:
    await make_conversation(pair, "conv-c", "Bystander")
    request_id = (await ask(pair, "conv-a", "conv-b", "Measure latency"))["requestId"]
    for viewer in ("conv-a", "conv-b"):
        detail = await tool_calls.get_pending_reply(pair, Source(viewer), {"requestId": request_id})
        assert detail["requestId"] == request_id
        assert detail["status"] == "waiting"
        assert detail["originalRequest"] == "Measure latency"
    for viewer, rid in (("conv-c", request_id), ("conv-a", "req_missing")):
        with pytest.raises(DomainError) as caught:
            await tool_calls.get_pending_reply(pair, Source(viewer), {"requestId": rid})
        assert caught.value.code == errors.REQUEST_NOT_FOUND


async def test_pending_reply_list_holds_the_callers_open_requests(pair: Store) -> None:
    await make_conversation(pair, "conv-c", "Builder")
    first = (await ask(pair, "conv-a", "conv-b", "one"))["requestId"]
    second = (await ask(pair, "conv-a", "conv-c", "two"))["requestId"]
    listing = await tool_calls.get_pending_reply(pair, Source("conv-a"), {})
    assert listing["count"] == 2
    assert [r["requestId"] for r in listing["replies"]] == [first, second]
    assert [r["originalRequest"] for r in listing["replies"]] == ["one", "two"]
    assert (await tool_calls.get_pending_reply(pair, Source("conv-b"), {}))["count"] == 0
    with pytest.raises(DomainError) as caught:
        await tool_calls.get_pending_reply(pair, Source(None), {})
    assert caught.value.code == errors.MISSING_SOURCE_CONVERSATION
