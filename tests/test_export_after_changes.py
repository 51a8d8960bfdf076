"""``export-json`` after the service changed imported rows: the export writes each row as it
is now, never the imported state ``extra`` kept (docs/export.md)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from ccweb_store.importer.load import import_state
from ccweb_store.mobility.export import export_state
from ccweb_store.store.uow import Store
from tests import host_calls
from tests.lifecycle_support import ask, claim, complete, make_conversation
from tests.test_imported_failures import write_state

#: A waiting request as cc-web writes it: every field, the unanswered ones null.
PENDING: dict[str, Any] = {
    "requestId": "req-imported",
    "messageId": "tester-1",
    "sourceConversationId": "planner",
    "sourceTitle": "Planner",
    "targetConversationId": "tester",
    "targetTitle": "Tester",
    "status": "pending",
    "createdAt": "2024-03-03T10:00:00.000Z",
    "hopCount": 1,
    "sourceAutoRun": True,
    "replyText": None,
    "completedAt": None,
    "returnedAt": None,
    "replyMessageId": None,
    "lastError": None,
    "originalRequest": "run the suite",
}


def read(path: Path) -> Any:
    return json.loads(path.read_text(encoding="utf-8"))


def given(entry: dict[str, Any]) -> dict[str, Any]:
    """An entry's fields that hold a value (null and absent both say "none")."""
    return {key: value for key, value in entry.items() if value is not None}


async def answer_the_open_request(store: Store, output: str) -> None:
    asked = await claim(store, kinds=["cross_conversation"])
    assert asked is not None
    await complete(store, asked["id"], output=output, workerId=asked["workerId"])


async def test_an_imported_pending_request_retried_until_it_returned_exports_as_a_native_one(
    store: Store, tmp_path: Path
) -> None:
    await import_state(store, write_state(tmp_path / "state", [PENDING]))
    await host_calls.retry_reply(store, {"requestId": "req-imported"})
    await answer_the_open_request(store, "all green")
    native = await ask(store, "planner", "tester", "run the suite")
    await answer_the_open_request(store, "all green")

    await export_state(store, tmp_path / "out")

    entries = {
        entry["requestId"]: entry
        for entry in read(tmp_path / "out" / "config" / "cross-conversation-replies.json")
    }
    imported, sent = given(entries["req-imported"]), given(entries[native["requestId"]])
    assert imported["status"] == sent["status"] == "returned"
    assert imported["replyText"] == sent["replyText"] == "all green"
    assert imported.keys() == sent.keys()
    assert imported["returnedAt"] >= imported["completedAt"] > PENDING["createdAt"]


async def test_an_imported_request_exported_unchanged_keeps_the_fields_as_cc_web_wrote_them(
    store: Store, tmp_path: Path
) -> None:
    await import_state(store, write_state(tmp_path / "state", [PENDING]))

    await export_state(store, tmp_path / "out")

    assert read(tmp_path / "out" / "config" / "cross-conversation-replies.json") == [PENDING]


async def test_an_imported_failure_retried_and_answered_exports_when_it_returned(
    store: Store, tmp_path: Path
) -> None:
    settled = {
        **PENDING,
        "status": "failed",
        "lastError": "target run crashed",
        "completedAt": "2024-03-03T10:30:00.000Z",
    }
    del settled["returnedAt"]  # the importer settles it with a returnedAt of its own
    await import_state(store, write_state(tmp_path / "state", [settled]))
    await host_calls.retry_reply(store, {"requestId": "req-imported"})
    await answer_the_open_request(store, "green now")

    await export_state(store, tmp_path / "out")

    [entry] = read(tmp_path / "out" / "config" / "cross-conversation-replies.json")
    assert (entry["status"], entry["replyText"], entry.get("lastError")) == (
        "returned",
        "green now",
        None,
    )
    assert entry["returnedAt"] >= entry["completedAt"] > settled["completedAt"]


async def test_an_imported_conversation_written_to_since_exports_its_new_update_time(
    store: Store, tmp_path: Path
) -> None:
    state = write_state(tmp_path / "state", [])
    document = read(state / "sessions" / "planner.json")
    document |= {"updatedAt": 1709290800000, "archived": True, "pinned": True}
    (state / "sessions" / "planner.json").write_text(json.dumps(document), encoding="utf-8")
    await import_state(store, state)
    await host_calls.append_message(
        store, {"sessionId": "planner", "role": "user", "content": "one more thing"}
    )
    await host_calls.call(store, "session.archive", {"id": "planner", "archived": False})

    await export_state(store, tmp_path / "out")

    written = read(tmp_path / "out" / "sessions" / "planner.json")
    now = await host_calls.call(store, "session.get", {"id": "planner"})
    assert written["updatedAt"].startswith(now["updatedAt"].removesuffix("Z"))  # to the ms
    assert "archived" not in written and "archivedAt" not in written
    assert written["pinned"] is True
    assert [m["content"] for m in written["messages"]][-1] == "one more thing"


async def test_a_native_conversation_and_an_imported_one_both_archived_export_alike(
    store: Store, tmp_path: Path
) -> None:
    await import_state(store, write_state(tmp_path / "state", []))
    await make_conversation(store, "native")
    for conversation in ("planner", "native"):
        await host_calls.call(store, "session.archive", {"id": conversation, "archived": True})

    await export_state(store, tmp_path / "out")

    for name in ("planner", "native"):
        written = read(tmp_path / "out" / "sessions" / f"{name}.json")
        assert "archivedAt" in written and "archived" not in written, name
