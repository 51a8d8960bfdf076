"""``reply.retry`` waits for the target run that is still answering the request.

A request failed by hand (``reply.fail``) while its target run is still queued or running is
not asked again: a second target run would race the first, whose end would fail the request
again, so the source would get a second notice and auto-run and never the retry's answer.
``reply.retry`` is refused with ``target_busy`` until that run ends; then one retry delivers
the answer once. Over HTTP on the real app, SQLite and PostgreSQL.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest

from ccweb_store.store.uow import Store
from tests.http_client import rpc, rpc_result
from tests.lifecycle_support import ask_tester, planner_and_tester

ASK = "Run the PostgreSQL suite."


@pytest.fixture
async def client(store: Store) -> AsyncIterator[httpx.AsyncClient]:
    """The real app with ``planner`` (the source) and ``tester`` (the target)."""
    async with planner_and_tester(store) as http:
        yield http


async def ask(client: httpx.AsyncClient) -> dict[str, Any]:
    """The planner asks the tester (``return_and_continue``); the send's payload."""
    return await ask_tester(client, ASK)


async def everything(client: httpx.AsyncClient) -> dict[str, Any]:
    """Every run, message and reply request, as the host sees them."""
    found: dict[str, Any] = {
        "runs": (await rpc_result(client, "run.list", {"limit": 500}))["runs"],
        "replies": (await rpc_result(client, "reply.list", {"limit": 500}))["replies"],
    }
    for session_id in ("planner", "tester"):
        listed = await rpc_result(client, "message.list", {"sessionId": session_id})
        found[session_id] = listed["messages"]
    return found


def at_source(found: dict[str, Any], request_id: str) -> tuple[list[str], list[str], int]:
    """The source's answers and failure notices for the request (message ids), and how many
    ``reply_auto_run`` runs continue it."""
    mine = [m for m in found["planner"] if m["metadata"].get("replyToRequestId") == request_id]
    answers = [m["id"] for m in mine if not m["metadata"].get("replyFailed")]
    notices = [m["id"] for m in mine if m["metadata"].get("replyFailed")]
    auto_runs = [
        r
        for r in found["runs"]
        if r["kind"] == "reply_auto_run" and r["replyRequestId"] == request_id
    ]
    return answers, notices, len(auto_runs)


async def claim_target_run(client: httpx.AsyncClient, worker: str) -> dict[str, Any]:
    claimed = await rpc_result(
        client, "run.claim", {"workerId": worker, "kinds": ["cross_conversation"]}
    )
    run: dict[str, Any] = claimed["run"]
    assert run["sessionId"] == "tester"
    return run


async def retry_refused(client: httpx.AsyncClient, request_id: str) -> dict[str, Any]:
    answer = await rpc(client, "reply.retry", {"requestId": request_id})
    assert "result" not in answer, answer
    error: dict[str, Any] = answer["error"]
    assert (error["code"], error["data"]["code"]) == (-32000, "target_busy"), error
    return error


@pytest.mark.parametrize("original", ["queued", "running"])
async def test_retry_while_the_original_run_is_open_is_target_busy_and_changes_nothing(
    client: httpx.AsyncClient, original: str
) -> None:
    sent = await ask(client)
    if original == "running":
        await claim_target_run(client, "worker-1")
    await rpc_result(client, "reply.fail", {"requestId": sent["requestId"], "reason": "stuck"})
    before = await everything(client)
    reply_before = await rpc_result(client, "reply.get", {"requestId": sent["requestId"]})

    error = await retry_refused(client, sent["requestId"])

    assert error["data"] == {
        "code": "target_busy",
        "runId": sent["runId"],
        "runStatus": original,
        "targetConversationId": "tester",
    }
    assert f"run {sent['runId']!r} in the target 'tester' is {original}" in error["message"]
    assert "retry after that run ends" in error["message"]
    assert await rpc_result(client, "reply.get", {"requestId": sent["requestId"]}) == reply_before
    assert await everything(client) == before


@pytest.mark.parametrize("original", ["queued", "running"])
async def test_after_the_original_run_answers_one_retry_delivers_its_answer_once(
    client: httpx.AsyncClient, original: str
) -> None:
    sent = await ask(client)
    if original == "running":
        await claim_target_run(client, "worker-1")
    await rpc_result(client, "reply.fail", {"requestId": sent["requestId"], "reason": "stuck"})
    await retry_refused(client, sent["requestId"])
    if original == "queued":
        await claim_target_run(client, "worker-1")
    params = {"runId": sent["runId"], "workerId": "worker-1", "status": "completed"}
    await rpc_result(client, "run.complete", {**params, "output": "12 passed, 0 failed"})
    answers, notices, auto_runs = at_source(await everything(client), sent["requestId"])
    assert (answers, len(notices), auto_runs) == ([], 1, 1)  # the notice of reply.fail only

    retried = await rpc_result(client, "reply.retry", {"requestId": sent["requestId"]})

    assert (retried["status"], retried["replyText"]) == ("returned", "12 passed, 0 failed")
    after = await everything(client)
    answers, notices, auto_runs = at_source(after, sent["requestId"])
    assert answers == [retried["replyMessageId"]]  # exactly one answer
    assert len(notices) == 1  # the notice of reply.fail, not a second one
    assert auto_runs == 2  # the notice's, and one for the answer
    target_runs = [r for r in after["runs"] if r["kind"] == "cross_conversation"]
    assert [r["id"] for r in target_runs] == [sent["runId"]]  # the target was not asked twice
    again = await rpc(client, "reply.retry", {"requestId": sent["requestId"]})
    assert again["error"]["data"]["code"] == "invalid_state"
    assert await everything(client) == after


async def test_after_the_original_run_fails_one_retry_asks_again_and_delivers_once(
    client: httpx.AsyncClient,
) -> None:
    sent = await ask(client)
    await claim_target_run(client, "worker-1")
    await rpc_result(client, "reply.fail", {"requestId": sent["requestId"], "reason": "stuck"})
    await retry_refused(client, sent["requestId"])
    failed = {"runId": sent["runId"], "workerId": "worker-1", "status": "failed", "error": "boom"}
    await rpc_result(client, "run.complete", failed)
    answers, notices, auto_runs = at_source(await everything(client), sent["requestId"])
    assert (answers, len(notices), auto_runs) == ([], 1, 1)  # the failed run: no second notice

    retried = await rpc_result(client, "reply.retry", {"requestId": sent["requestId"]})
    assert retried["status"] == "waiting"
    await retry_refused(client, sent["requestId"])  # the new target run is answering now
    second = await claim_target_run(client, "worker-2")
    assert (second["sessionId"], second["replyRequestId"]) == ("tester", sent["requestId"])
    await rpc_result(
        client,
        "run.complete",
        {"runId": second["id"], "workerId": "worker-2", "status": "completed", "output": "ok now"},
    )

    after = await everything(client)
    answers, notices, auto_runs = at_source(after, sent["requestId"])
    reply = await rpc_result(client, "reply.get", {"requestId": sent["requestId"]})
    assert (reply["status"], reply["replyText"]) == ("returned", "ok now")
    assert answers == [reply["replyMessageId"]]
    assert (len(notices), auto_runs) == (1, 2)
