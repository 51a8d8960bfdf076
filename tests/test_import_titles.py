"""Reply entries without ``sourceTitle``/``targetTitle`` (common in cc-web's files) get their
conversations' titles: from the session files of the same import, from the database, or from
``repair-json`` for rows imported before; prompts name a titled conversation by its title."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from ccweb_store.domain.rows import ReplyRequest
from ccweb_store.store.uow import Store
from tests.cli_support import run_cli
from tests.lifecycle_support import reply_row, runs_of
from tests.test_cli_repairs import on_store
from tests.test_importer import write_json

REPLIES = Path("config") / "cross-conversation-replies.json"
UNTITLED_ENTRY: dict[str, Any] = {
    "requestId": "req-alice-bob",
    "sourceConversationId": "alice",
    "targetConversationId": "bob",
    "status": "pending",
    "createdAt": "2024-03-01T10:00:00.000Z",
    "originalRequest": "review my change",
}


def write_sessions(root: Path) -> None:
    for session_id, title in (("alice", "Alice (frontend)"), ("bob", "Bob")):
        write_json(
            root / "sessions" / f"{session_id}.json",
            {
                "id": session_id,
                "title": title,
                "messages": [{"id": f"{session_id}-1", "role": "user", "content": "hi"}],
            },
        )


def cli(*args: str) -> Any:
    result = run_cli(*args)
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout) if "--json" in args else result.stdout


def shown(database_url: str) -> dict[str, Any]:
    shown: dict[str, Any] = cli(
        "replies", "show", "req-alice-bob", "--json", "--database-url", database_url
    )
    reply: dict[str, Any] = shown["reply"]
    return reply


def retry_prompt(database_url: str) -> str:
    cli("replies", "retry", "req-alice-bob", "--database-url", database_url)
    bob_runs = on_store(database_url, lambda store: runs_of(store, "bob", "cross_conversation"))
    return bob_runs[-1].runtime_text or ""


def test_an_entry_without_titles_gets_them_from_the_session_files_of_the_same_import(
    database_url: str, tmp_path: Path
) -> None:
    write_sessions(tmp_path / "state")
    write_json(tmp_path / "state" / REPLIES, [UNTITLED_ENTRY])

    cli("import-json", str(tmp_path / "state"), "--json", "--database-url", database_url)

    reply = shown(database_url)
    assert (reply["sourceTitle"], reply["targetTitle"]) == ("Alice (frontend)", "Bob")
    prompt = retry_prompt(database_url)
    assert "From conversation: Alice (frontend) (id: alice)" in prompt
    assert "untitled conversation" not in prompt
    # The export gives the entry back as it was: without the titles it lacked.
    cli("export-json", str(tmp_path / "out"), "--database-url", database_url)
    exported = json.loads((tmp_path / "out" / REPLIES).read_text(encoding="utf-8"))
    assert "sourceTitle" not in exported[0] and "targetTitle" not in exported[0]


def test_an_entry_imported_after_its_sessions_gets_their_titles_from_the_database(
    database_url: str, tmp_path: Path
) -> None:
    write_sessions(tmp_path / "sessions-first")
    cli("import-json", str(tmp_path / "sessions-first"), "--json", "--database-url", database_url)
    write_json(tmp_path / "replies-later" / REPLIES, [UNTITLED_ENTRY])

    cli("import-json", str(tmp_path / "replies-later"), "--json", "--database-url", database_url)

    reply = shown(database_url)
    assert (reply["sourceTitle"], reply["targetTitle"]) == ("Alice (frontend)", "Bob")


async def forget_titles(store: Store) -> None:
    """The row as an import without the title fill wrote it."""
    async with store.uow() as uow:
        await uow.replies.update_columns(
            "req-alice-bob", {"source_title": None, "target_title": None, "extra": None}
        )
        await uow.commit()


@pytest.mark.slow
def test_repair_json_gives_an_imported_request_its_conversations_titles_and_prompts_use_them(
    database_url: str, tmp_path: Path
) -> None:
    write_sessions(tmp_path / "state")
    write_json(tmp_path / "state" / REPLIES, [UNTITLED_ENTRY])
    cli("import-json", str(tmp_path / "state"), "--json", "--database-url", database_url)
    on_store(database_url, forget_titles)
    assert shown(database_url)["sourceTitle"] is None
    # Before the repair a prompt falls back to the conversation's current title.
    assert "From conversation: Alice (frontend) (id: alice)" in retry_prompt(database_url)

    dry = cli("repair-json", "--dry-run", "--json", "--database-url", database_url)
    assert dry["titles"]["rowsFilled"] == 1 and shown(database_url)["sourceTitle"] is None
    repaired = cli("repair-json", "--database-url", database_url)

    assert "reply_requests req-alice-bob: sourceTitle 'Alice (frontend)'" in repaired
    assert "1 reply request(s) given their conversations' titles" in repaired
    reply = shown(database_url)
    assert (reply["sourceTitle"], reply["targetTitle"]) == ("Alice (frontend)", "Bob")
    row: ReplyRequest = on_store(database_url, lambda store: reply_row(store, "req-alice-bob"))
    assert row.extra == {"$absent": ["sourceTitle", "targetTitle"]}
    again = cli("repair-json", "--json", "--database-url", database_url)
    assert again["titles"]["rowsFilled"] == 0


def test_repair_json_leaves_an_untitled_conversation_and_a_recorded_title_alone(
    database_url: str, tmp_path: Path
) -> None:
    write_sessions(tmp_path / "state")
    untitled = {**UNTITLED_ENTRY, "targetConversationId": "gone", "sourceTitle": "Alice then"}
    write_json(tmp_path / "state" / REPLIES, [untitled])
    cli("import-json", str(tmp_path / "state"), "--json", "--database-url", database_url)

    result = cli("repair-json", "--json", "--database-url", database_url)

    assert result["titles"]["rowsFilled"] == 0
    reply = shown(database_url)
    assert (reply["sourceTitle"], reply["targetTitle"]) == ("Alice then", None)


def test_a_failure_notice_names_the_target_by_its_current_title_when_the_request_has_none(
    database_url: str, tmp_path: Path
) -> None:
    write_sessions(tmp_path / "state")
    write_json(tmp_path / "state" / REPLIES, [UNTITLED_ENTRY])
    cli("import-json", str(tmp_path / "state"), "--json", "--database-url", database_url)
    on_store(database_url, forget_titles)

    cli("replies", "fail", "req-alice-bob", "--reason", "gave up", "--database-url", database_url)

    alice_runs = on_store(database_url, lambda store: runs_of(store, "alice"))
    texts = "\n".join(run.runtime_text or "" for run in alice_runs)
    assert "To conversation: Bob (id: bob)" in texts
    assert "untitled conversation" not in texts
