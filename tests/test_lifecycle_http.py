"""The reply lifecycle over HTTP: agents call ``/mcp``, the host drives runs over ``/rpc``.

Everything here is what a real agent and a real host see: tool results, JSON-RPC results and
error codes, the messages and runs listed back. Runs on SQLite and PostgreSQL.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest

from ccweb_store.config import Settings
from ccweb_store.http.app import create_app
from ccweb_store.store.uow import Store
from tests.http_client import BASE_URL, call_tool, rpc, rpc_result
from tests.lifecycle_support import planner_and_tester

ASK = "Run the test suite and report every failure."
ANSWER = "All 42 tests pass; nothing failed."


@pytest.fixture
async def client(store: Store) -> AsyncIterator[httpx.AsyncClient]:
    """The real app with ``planner`` (the source) and ``tester`` (the target)."""
    async with planner_and_tester(store) as http:
        yield http


async def send(
    client: httpx.AsyncClient,
    arguments: dict[str, Any],
    *,
    source: str = "planner",
    tool: str = "ccweb_send_message",
    hop: int | None = None,
) -> dict[str, Any]:
    """A tool call from ``source`` over ``/mcp``; the whole tool result."""
    query = f"?sourceSessionId={source}" + (f"&sourceHopCount={hop}" if hop is not None else "")
    return await call_tool(client, tool, arguments, query=query)


async def ask(client: httpx.AsyncClient, target: str = "tester", **kw: Any) -> dict[str, Any]:
    """A successful ``return_and_continue`` send; its payload."""
    result = await send(
        client,
        {"targetConversationId": target, "content": ASK, "replyMode": "return_and_continue"},
        **kw,
    )
    assert result["isError"] is False, result
    payload: dict[str, Any] = result["structuredContent"]
    return payload


async def messages(client: httpx.AsyncClient, session_id: str) -> list[dict[str, Any]]:
    result = await rpc_result(client, "message.list", {"sessionId": session_id, "limit": 500})
    listed: list[dict[str, Any]] = result["messages"]
    return listed


async def runs(
    client: httpx.AsyncClient, session_id: str, kind: str | None = None
) -> list[dict[str, Any]]:
    result = await rpc_result(client, "run.list", {"sessionId": session_id})
    return [run for run in result["runs"] if kind is None or run["kind"] == kind]


async def claim(client: httpx.AsyncClient, worker: str = "worker-1", **params: Any) -> Any:
    return (await rpc_result(client, "run.claim", {"workerId": worker, **params}))["run"]


async def complete(
    client: httpx.AsyncClient,
    run_id: str,
    output: str | None = ANSWER,
    status: str = "completed",
    worker: str | None = "worker-1",
) -> dict[str, Any]:
    """``run.complete`` by ``worker`` (the run's lease holder; None for a run none holds)."""
    params: dict[str, Any] = {"runId": run_id, "status": status, "output": output}
    if worker is not None:
        params["workerId"] = worker
    result: dict[str, Any] = await rpc_result(client, "run.complete", params)
    return result


async def counts(client: httpx.AsyncClient) -> tuple[int, int, int]:
    """Messages, runs and reply requests of both conversations, as the host sees them."""
    message_count = len(await messages(client, "planner")) + len(await messages(client, "tester"))
    run_count = len(await runs(client, "planner")) + len(await runs(client, "tester"))
    replies = await rpc_result(client, "reply.list", {"limit": 100})
    return message_count, run_count, len(replies["replies"])


def error_code(answer: dict[str, Any]) -> str:
    """The snake_case code of a JSON-RPC domain error."""
    assert answer["error"]["code"] == -32000, answer
    code: str = answer["error"]["data"]["code"]
    return code


# --- sends ----------------------------------------------------------------------------------


async def test_one_way_send_queues_a_target_run_that_says_its_output_will_not_come_back(
    client: httpx.AsyncClient,
) -> None:
    result = await send(
        client, {"targetConversationId": "tester", "content": ASK, "replyMode": "one_way"}
    )
    payload = result["structuredContent"]
    assert result["isError"] is False
    assert payload["ok"] is True and payload["replyMode"] == "one_way"
    assert payload["deliveryStatus"] == "queued" and payload["targetTitle"] == "Tester"
    assert "requestId" not in payload and "status" not in payload

    assert (await rpc_result(client, "reply.list", {}))["replies"] == []
    [run] = await runs(client, "tester")
    assert run["id"] == payload["runId"] and run["kind"] == "cross_conversation"
    assert run["status"] == "queued" and run["replyRequestId"] is None and run["hopCount"] == 1
    assert "will NOT be returned" in run["runtimeText"]
    assert "Planner" in run["runtimeText"] and "planner" in run["runtimeText"]
    assert ASK in run["runtimeText"]
    [message] = await messages(client, "tester")
    assert message["id"] == payload["messageId"] and message["role"] == "user"
    assert message["metadata"]["crossConversation"]["expectsReply"] is False


async def test_return_and_continue_returns_the_reply_and_queues_one_auto_run_in_the_source(
    client: httpx.AsyncClient,
) -> None:
    sent = await ask(client)
    request_id = sent["requestId"]
    assert sent["replyMode"] == "return_and_continue" and sent["status"] == "waiting"
    assert sent["replyDelivery"] == "automatic" and sent["sourceAutoRun"] is True

    [target_message] = await messages(client, "tester")
    cross = target_message["metadata"]["crossConversation"]
    assert cross["expectsReply"] is True and cross["replyRequestId"] == request_id
    assert cross["sourceConversationId"] == "planner" and cross["sourceTitle"] == "Planner"
    reply = await rpc_result(client, "reply.get", {"requestId": request_id})
    assert reply["status"] == "waiting" and reply["originalRequest"] == ASK

    run = await claim(client)
    assert run["id"] == sent["runId"] and run["status"] == "running"
    assert request_id in run["runtimeText"]
    assert "automatically" in run["runtimeText"] and "Do NOT call" in run["runtimeText"]
    done = await complete(client, run["id"])
    assert done["run"]["status"] == "completed" and done["message"]["content"] == ANSWER
    assert [r["status"] for r in done["replies"]] == ["returned"]

    [reply_message] = await messages(client, "planner")
    assert reply_message["role"] == "assistant" and reply_message["content"] == ANSWER
    assert reply_message["metadata"]["replyToRequestId"] == request_id
    assert reply_message["metadata"]["ccwebDisplayOnly"] is True
    assert reply_message["metadata"]["processed"] is True
    assert reply_message["metadata"]["autoRun"] is True
    [auto_run] = await runs(client, "planner")
    assert auto_run["kind"] == "reply_auto_run" and auto_run["status"] == "queued"
    assert auto_run["replyRequestId"] == request_id
    prompt = auto_run["runtimeText"]
    for part in (request_id, "Tester", "tester", ASK, ANSWER, "returned is not the same as done"):
        assert part in prompt
    returned = await rpc_result(client, "reply.get", {"requestId": request_id})
    assert returned["status"] == "returned" and returned["replyMessageId"] == reply_message["id"]


async def test_the_hidden_alias_asks_for_a_reply_over_mcp(client: httpx.AsyncClient) -> None:
    result = await send(
        client, {"targetConversationId": "tester", "content": ASK}, tool="ccweb_request_reply"
    )
    assert result["structuredContent"]["replyMode"] == "return_and_continue"
    assert result["structuredContent"]["status"] == "waiting"


@pytest.mark.parametrize("method", ["tools.call", "tools.callDynamic"])
async def test_the_hidden_alias_asks_for_a_reply_over_rpc(
    client: httpx.AsyncClient, method: str
) -> None:
    payload = await rpc_result(
        client,
        method,
        {
            "name": "ccweb_request_reply",
            "arguments": {"targetConversationId": "tester", "content": ASK},
            "sourceSessionId": "planner",
        },
    )
    assert payload["replyMode"] == "return_and_continue" and payload["status"] == "waiting"
    reply = await rpc_result(client, "reply.get", {"requestId": payload["requestId"]})
    assert reply["sourceConversationId"] == "planner" and reply["originalRequest"] == ASK


@pytest.mark.parametrize("flag", ["requestReply", "waitForReply"])
async def test_create_conversation_with_a_reply_flag_asks_the_new_conversation_for_a_reply(
    client: httpx.AsyncClient, flag: str
) -> None:
    result = await send(
        client, {"title": "Reviewer", "content": ASK, flag: True}, tool="ccweb_create_conversation"
    )
    payload = result["structuredContent"]
    assert result["isError"] is False and payload["title"] == "Reviewer"
    assert payload["replyStatus"] == "waiting" and payload["sourceAutoRun"] is True
    reply = await rpc_result(client, "reply.get", {"requestId": payload["requestId"]})
    assert reply["targetConversationId"] == payload["conversationId"]
    [run] = await runs(client, payload["conversationId"])
    assert run["id"] == payload["runId"] and payload["requestId"] in run["runtimeText"]


async def test_a_send_without_reply_mode_is_one_way(client: httpx.AsyncClient) -> None:
    result = await send(client, {"targetConversationId": "tester", "content": ASK})
    assert result["structuredContent"]["replyMode"] == "one_way"
    assert "requestId" not in result["structuredContent"]
    assert (await rpc_result(client, "reply.list", {}))["replies"] == []


async def test_an_invalid_reply_mode_is_a_tool_error_and_writes_nothing(
    client: httpx.AsyncClient,
) -> None:
    result = await send(
        client, {"targetConversationId": "tester", "content": ASK, "replyMode": "later"}
    )
    assert result["isError"] is True
    assert result["structuredContent"]["error"]["code"] == "invalid_reply_mode"
    assert await counts(client) == (0, 0, 0)


# --- refusals -------------------------------------------------------------------------------


async def test_a_busy_target_is_refused_and_nothing_is_written(client: httpx.AsyncClient) -> None:
    await rpc_result(client, "run.start", {"sessionId": "tester"})
    before = await counts(client)
    result = await send(
        client, {"targetConversationId": "tester", "content": ASK, "replyMode": "one_way"}
    )
    assert result["isError"] is True
    assert result["structuredContent"]["error"]["code"] == "target_busy"
    assert await counts(client) == before


async def test_the_hop_limit_is_read_from_the_query_string_and_writes_nothing(
    client: httpx.AsyncClient,
) -> None:
    result = await send(
        client,
        {"targetConversationId": "tester", "content": ASK, "replyMode": "return_and_continue"},
        hop=4,
    )
    assert result["isError"] is True
    assert result["structuredContent"]["error"]["code"] == "hop_limit_exceeded"
    assert await counts(client) == (0, 0, 0)
    last_hop = await ask(client, hop=3)
    [run] = await runs(client, "tester")
    assert run["id"] == last_hop["runId"] and run["hopCount"] == 4


async def test_a_conversation_cannot_send_to_itself(client: httpx.AsyncClient) -> None:
    result = await send(
        client, {"targetConversationId": "planner", "content": ASK, "replyMode": "one_way"}
    )
    assert result["isError"] is True
    assert result["structuredContent"]["error"]["code"] == "cannot_target_self"
    assert await counts(client) == (0, 0, 0)


# --- delivery -------------------------------------------------------------------------------


async def test_a_reply_for_a_busy_source_waits_in_ready_until_the_sources_run_completes(
    client: httpx.AsyncClient,
) -> None:
    sent = await ask(client)
    source_run = await rpc_result(client, "run.start", {"sessionId": "planner"})
    target_run = await claim(client)
    done = await complete(client, target_run["id"])
    assert [r["status"] for r in done["replies"]] == ["ready"]
    assert await messages(client, "planner") == []

    pending = await send(client, {}, tool="ccweb_get_pending_reply")
    [open_reply] = pending["structuredContent"]["replies"]
    assert open_reply["requestId"] == sent["requestId"] and open_reply["status"] == "ready"
    assert open_reply["replyText"] == ANSWER and open_reply["originalRequest"] == ASK
    ready = await rpc_result(client, "reply.list", {"status": "ready"})
    assert [r["requestId"] for r in ready["replies"]] == [sent["requestId"]]

    finished = await complete(
        client, source_run["id"], output="Planned the next step.", worker=None
    )
    assert [(r["requestId"], r["status"]) for r in finished["replies"]] == [
        (sent["requestId"], "returned")
    ]
    contents = [m["content"] for m in await messages(client, "planner")]
    assert contents == ["Planned the next step.", ANSWER]
    [auto_run] = await runs(client, "planner", "reply_auto_run")
    assert auto_run["status"] == "queued" and sent["requestId"] in auto_run["runtimeText"]


async def test_a_failed_target_run_reaches_the_source_as_a_notice(
    client: httpx.AsyncClient,
) -> None:
    sent = await ask(client)
    run = await claim(client)
    done = await rpc_result(
        client,
        "run.complete",
        {
            "runId": run["id"],
            "status": "failed",
            "error": "the sandbox ran out of disk",
            "workerId": "worker-1",
        },
    )
    assert done["run"]["status"] == "failed"
    [failed] = done["replies"]
    assert failed["status"] == "failed" and failed["lastError"] == "the sandbox ran out of disk"
    [notice] = await messages(client, "planner")
    assert notice["metadata"]["replyFailed"] is True
    assert notice["metadata"]["replyToRequestId"] == sent["requestId"]
    assert "the sandbox ran out of disk" in notice["content"] and ASK in notice["content"]


async def test_an_expired_lease_puts_the_run_back_in_the_queue(client: httpx.AsyncClient) -> None:
    sent = await ask(client)
    first = await claim(client, "worker-1", leaseSeconds=1)
    assert first["id"] == sent["runId"]
    assert await claim(client, "worker-2") is None  # still leased
    await asyncio.sleep(1.2)
    again = await claim(client, "worker-2")
    assert again["id"] == sent["runId"] and again["workerId"] == "worker-2"
    assert again["attempts"] == first["attempts"] + 1
    lost = await rpc(client, "run.heartbeat", {"runId": sent["runId"], "workerId": "worker-1"})
    assert error_code(lost) == "lease_lost"


async def test_the_server_requeues_an_expired_lease_without_any_claim(
    settings: Settings, caplog: pytest.LogCaptureFixture
) -> None:
    app = create_app(settings.model_copy(update={"lease_sweep_seconds": 0.2}))
    caplog.set_level(logging.INFO, logger="ccweb_store")
    async with (
        app.router.lifespan_context(app),
        httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url=BASE_URL) as http,
    ):
        await rpc_result(http, "session.create", {"id": "planner"})
        await rpc_result(http, "session.create", {"id": "tester"})
        sent = await ask(http)
        await claim(http, "worker-1", leaseSeconds=1)
        deadline = time.monotonic() + 5
        while (run := (await runs(http, "tester"))[0])["status"] == "running":
            assert time.monotonic() < deadline, "the sweeper did not requeue the run"
            await asyncio.sleep(0.1)
    assert run["id"] == sent["runId"] and run["status"] == "queued"
    assert run["attempts"] == 1 and run["workerId"] is None
    assert f"run {sent['runId']} requeued after an expired lease" in caplog.text


async def test_completing_a_run_twice_returns_the_same_result_and_delivers_once(
    client: httpx.AsyncClient,
) -> None:
    await ask(client)
    run = await claim(client)
    first = await complete(client, run["id"])
    second = await complete(client, run["id"], output="a different answer")
    assert second == first
    assert len(await messages(client, "planner")) == 1
    assert len(await runs(client, "planner", "reply_auto_run")) == 1


# --- reply.* operator calls -----------------------------------------------------------------


async def test_reply_fail_fails_a_waiting_request_and_notifies_the_source(
    client: httpx.AsyncClient,
) -> None:
    sent = await ask(client)
    failed = await rpc_result(
        client, "reply.fail", {"requestId": sent["requestId"], "reason": "cancelled by the user"}
    )
    assert failed["status"] == "failed" and failed["lastError"] == "cancelled by the user"
    [notice] = await messages(client, "planner")
    assert notice["metadata"]["replyFailed"] is True
    busy = await rpc(client, "reply.retry", {"requestId": sent["requestId"]})
    assert error_code(busy) == "target_busy"  # its target run is still queued: it ends first
    run = await claim(client, kinds=["cross_conversation"])
    await complete(client, run["id"], output=None, status="failed")
    again = await rpc_result(client, "reply.retry", {"requestId": sent["requestId"]})
    assert again["status"] == "waiting"  # asks the target again


async def test_reply_retry_of_a_returned_request_is_an_invalid_state(
    client: httpx.AsyncClient,
) -> None:
    sent = await ask(client)
    await complete(client, (await claim(client))["id"])
    answer = await rpc(client, "reply.retry", {"requestId": sent["requestId"]})
    assert error_code(answer) == "invalid_state"
    failing = await rpc(client, "reply.fail", {"requestId": sent["requestId"], "reason": "x"})
    assert error_code(failing) == "invalid_state"


async def test_reply_expire_fails_waiting_requests_older_than_the_cutoff(
    client: httpx.AsyncClient,
) -> None:
    sent = await ask(client)
    assert await rpc_result(client, "reply.expire", {"olderThanSeconds": 3600}) == {"expired": 0}
    assert await rpc_result(client, "reply.expire", {"olderThanSeconds": 0}) == {"expired": 1}
    expired = await rpc_result(client, "reply.get", {"requestId": sent["requestId"]})
    assert expired["status"] == "failed" and expired["lastError"] == "expired"


@pytest.mark.parametrize(
    ("method", "params", "code"),
    [
        ("reply.get", {"requestId": "req_missing"}, "request_not_found"),
        ("reply.retry", {"requestId": "req_missing"}, "request_not_found"),
        ("reply.fail", {"requestId": "req_missing", "reason": "x"}, "request_not_found"),
        ("reply.fail", {"requestId": "req_missing"}, "invalid_arguments"),
        ("reply.expire", {}, "invalid_arguments"),
        ("reply.expire", {"olderThanSeconds": -1}, "invalid_arguments"),
        ("run.complete", {"runId": "run_missing", "status": "completed"}, "run_not_found"),
        ("run.complete", {"runId": "run_missing", "status": "done"}, "invalid_status"),
        ("run.heartbeat", {"runId": "run_missing", "workerId": "w"}, "run_not_found"),
    ],
)
async def test_reply_and_run_calls_name_their_errors(
    client: httpx.AsyncClient, method: str, params: dict[str, Any], code: str
) -> None:
    assert error_code(await rpc(client, method, params)) == code
