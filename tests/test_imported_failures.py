"""A failed reply imported from cc-web was final there: it must not spring back to life.

cc-web sent no failure notices, so the source of an imported failed request waits for
nothing; only failures that happen after the import are notified (once), and ``reply.retry``
of an imported failure behaves as ``replies.retry_reply`` documents.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from ccweb_store.importer.load import import_state
from ccweb_store.store.uow import Store
from tests import host_calls
from tests.lifecycle_support import claim, complete, messages_of, reply_row, runs_of

SETTLED_FAILURE: dict[str, Any] = {
    "requestId": "req-failed-long-ago",
    "sourceConversationId": "planner",
    "targetConversationId": "tester",
    "status": "failed",
    "createdAt": "2024-03-01T10:00:00.000Z",
    "completedAt": "2024-03-01T10:30:00.000Z",
    "lastError": "target run crashed",
    "originalRequest": "run the suite",
    "sourceAutoRun": True,
}
ANSWERED_FAILURE: dict[str, Any] = {
    "requestId": "req-answered-late",
    "sourceConversationId": "planner",
    "targetConversationId": "tester",
    "status": "failed",
    "createdAt": "2024-03-02T10:00:00.000Z",
    "replyText": "all green, sorry for the wait",
    "lastError": "expired",
}
STILL_OPEN: dict[str, Any] = {
    "requestId": "req-still-open",
    "sourceConversationId": "planner",
    "targetConversationId": "tester",
    "status": "pending",
    "createdAt": "2024-03-03T10:00:00.000Z",
    "originalRequest": "check the logs",
}


def write_state(root: Path, replies_file: list[dict[str, Any]]) -> Path:
    for session_id, text in (("planner", "plan the release"), ("tester", "ready to test")):
        path = root / "sessions" / f"{session_id}.json"
        path.parent.mkdir(parents=True, exist_ok=True)
        session = {
            "id": session_id,
            "title": session_id.title(),
            "messages": [
                {"id": f"{session_id}-1", "role": "user", "content": text, "timestamp": 1e12}
            ],
        }
        path.write_text(json.dumps(session), encoding="utf-8")
    path = root / "config" / "cross-conversation-replies.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(replies_file), encoding="utf-8")
    return root


async def import_replies(store: Store, root: Path, replies_file: list[dict[str, Any]]) -> None:
    summary = await import_state(store, write_state(root, replies_file))
    assert summary.ok, summary.skipped


async def notices_in(store: Store, session_id: str) -> list[str]:
    """The request ids of the failure notices the conversation received."""
    return [
        (m.metadata_ or {})["replyToRequestId"]
        for m in await messages_of(store, session_id)
        if (m.metadata_ or {}).get("replyFailed")
    ]


async def auto_runs_for(store: Store, session_id: str) -> list[str | None]:
    return [r.reply_request_id for r in await runs_of(store, session_id, "reply_auto_run")]


async def finish_a_turn(store: Store, session_id: str, output: str) -> dict[str, Any]:
    started = await host_calls.start_run(store, {"sessionId": session_id})
    return await host_calls.complete_run(
        store, {"runId": started["id"], "status": "completed", "output": output}
    )


async def test_a_run_completing_on_the_source_sends_no_notice_for_an_imported_failure(
    store: Store, tmp_path: Path
) -> None:
    await import_replies(store, tmp_path / "state", [SETTLED_FAILURE, ANSWERED_FAILURE])

    result = await finish_a_turn(store, "planner", "release planned")

    assert result["replies"] == []
    assert await notices_in(store, "planner") == []
    assert await auto_runs_for(store, "planner") == []
    assert [m.content for m in await messages_of(store, "planner")] == [
        "plan the release",
        "release planned",
    ]
    settled = await reply_row(store, "req-failed-long-ago")
    assert (settled.status, settled.reply_message_id) == ("failed", None)
    assert settled.returned_at == settled.completed_at


async def test_an_import_run_again_leaves_settled_failures_as_they_are(
    store: Store, tmp_path: Path
) -> None:
    await import_replies(store, tmp_path / "state", [SETTLED_FAILURE, ANSWERED_FAILURE])
    first = await reply_row(store, "req-answered-late")

    summary = await import_state(store, tmp_path / "state")

    assert summary.replies.as_dict() == {"imported": 0, "updated": 0, "unchanged": 2, "skipped": 0}
    again = await reply_row(store, "req-answered-late")
    assert again.returned_at == first.returned_at == first.created_at
    # The entries had no titles: their conversations' are filled in, and listed as absent.
    assert (again.source_title, again.target_title) == ("Planner", "Tester")
    assert again.extra == {
        "$absent": ["hopCount", "sourceAutoRun", "returnedAt", "sourceTitle", "targetTitle"]
    }


async def test_a_request_the_file_moves_to_failed_is_settled_too(
    store: Store, tmp_path: Path
) -> None:
    await import_replies(store, tmp_path / "state", [STILL_OPEN])
    failed_in_cc_web = {**STILL_OPEN, "status": "failed", "lastError": "cc-web gave up"}
    await import_replies(store, tmp_path / "state", [failed_in_cc_web])

    await finish_a_turn(store, "planner", "moving on")

    assert (await reply_row(store, "req-still-open")).status == "failed"
    assert await notices_in(store, "planner") == []
    assert await auto_runs_for(store, "planner") == []


async def test_a_request_that_fails_after_the_import_gets_its_notice_exactly_once(
    store: Store, tmp_path: Path
) -> None:
    await import_replies(store, tmp_path / "state", [SETTLED_FAILURE, STILL_OPEN])
    started = await host_calls.start_run(store, {"sessionId": "planner"})

    await host_calls.fail_reply(store, {"requestId": "req-still-open", "reason": "no answer"})
    assert await notices_in(store, "planner") == []  # the source is running: it waits
    completed = await host_calls.complete_run(
        store, {"runId": started["id"], "status": "completed", "output": "done planning"}
    )
    await finish_a_turn(store, "planner", "and another turn")

    assert [r["requestId"] for r in completed["replies"]] == ["req-still-open"]
    assert await notices_in(store, "planner") == ["req-still-open"]
    assert await auto_runs_for(store, "planner") == ["req-still-open"]
    notified = await reply_row(store, "req-still-open")
    assert notified.reply_message_id is not None and notified.returned_at is None


async def test_retrying_an_imported_failure_with_an_answer_delivers_it(
    store: Store, tmp_path: Path
) -> None:
    await import_replies(store, tmp_path / "state", [ANSWERED_FAILURE])

    retried = await host_calls.retry_reply(store, {"requestId": "req-answered-late"})

    assert retried["status"] == "returned"
    delivered = [
        m
        for m in await messages_of(store, "planner")
        if (m.metadata_ or {}).get("replyToRequestId") == "req-answered-late"
    ]
    assert len(delivered) == 1 and "all green" in delivered[0].content
    assert retried["replyMessageId"] == delivered[0].id
    assert await auto_runs_for(store, "planner") == ["req-answered-late"]


async def test_retrying_an_imported_failure_asks_the_target_again_and_a_new_failure_is_notified(
    store: Store, tmp_path: Path
) -> None:
    await import_replies(store, tmp_path / "state", [SETTLED_FAILURE])

    retried = await host_calls.retry_reply(store, {"requestId": "req-failed-long-ago"})
    asked = await claim(store, kinds=["cross_conversation"])
    assert asked is not None
    await complete(
        store, asked["id"], status="failed", error="crashed again", workerId=asked["workerId"]
    )

    assert retried["status"] == "waiting"
    assert (asked["sessionId"], asked["replyRequestId"]) == ("tester", "req-failed-long-ago")
    assert "run the suite" in asked["runtimeText"]
    assert await notices_in(store, "planner") == ["req-failed-long-ago"]
    assert await auto_runs_for(store, "planner") == ["req-failed-long-ago"]
    failed = await reply_row(store, "req-failed-long-ago")
    assert (failed.status, failed.last_error) == ("failed", "crashed again")
