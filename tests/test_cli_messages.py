"""`ccweb-store messages ID`: a conversation read from the CLI, newest last, on the database
and on a running server, on both engines."""

from __future__ import annotations

import asyncio
import json
from typing import Any

from ccweb_store.config import Settings
from ccweb_store.store.uow import Store
from tests import host_calls
from tests.cli_support import as_json, ccweb_store, run_cli
from tests.lifecycle_support import ask, make_conversation
from tests.servers import server_env, serving

TOKEN = "operator-token-for-messages-0123456789"


def conversation_with_messages(database_url: str) -> None:
    """``planner`` with 25 messages of its own, then a send to ``reviewer``."""

    async def build() -> None:
        store = Store.from_settings(Settings(database_url=database_url))
        try:
            await make_conversation(store, "planner", "Planner")
            await make_conversation(store, "reviewer", "Reviewer")
            for n in range(1, 26):
                role = "user" if n % 2 else "assistant"
                text = f"message {n}\nsecond line\nthird\nfourth\nfifth line of {n}"
                await host_calls.append_message(
                    store, {"sessionId": "planner", "role": role, "content": text}
                )
            await ask(store, "planner", "reviewer", "Review the schema change")
        finally:
            await store.dispose()

    asyncio.run(build())


def test_messages_shows_the_newest_last_with_where_to_page(database_url: str) -> None:
    conversation_with_messages(database_url)

    result = ccweb_store(database_url, "messages", "planner", "--limit", "3")

    assert result.exit_code == 0, result.output
    out = result.stdout
    assert out.index("message 23") < out.index("message 24") < out.index("message 25")
    assert "message 22" not in out
    assert "… (1 more lines)" in out
    assert "fifth line" not in out
    assert "3 message(s), newest last; older ones: --before 23" in out


def test_messages_names_the_conversation_by_its_title_and_id(database_url: str) -> None:
    conversation_with_messages(database_url)

    shown = run_cli("messages", "planner", env=server_env(CCWEB_DATABASE_URL=database_url))
    read = as_json(ccweb_store(database_url, "messages", "planner", "--json"))

    assert shown.returncode == 0, shown.stderr
    assert shown.stdout.lstrip().startswith("Conversation Planner (planner)")
    assert read["title"] == "Planner"


def test_messages_json_pages_back_and_filters_by_role(database_url: str) -> None:
    conversation_with_messages(database_url)

    page = as_json(ccweb_store(database_url, "messages", "planner", "--limit", "5", "--json"))
    older = as_json(
        ccweb_store(database_url, "messages", "planner", "--before", "21", "--limit", "5", "--json")
    )
    mine = as_json(
        ccweb_store(database_url, "messages", "planner", "--role", "assistant", "--json")
    )

    assert [m["seq"] for m in page["messages"]] == [21, 22, 23, 24, 25]
    assert page["nextBeforeSeq"] == 21
    assert set(page["messages"][0]) == {
        "id",
        "sessionId",
        "seq",
        "role",
        "content",
        "createdAt",
        "metadata",
    }
    assert [m["seq"] for m in older["messages"]] == [16, 17, 18, 19, 20]
    assert {m["role"] for m in mine["messages"]} == {"assistant"}
    assert len(mine["messages"]) == 12 and mine["nextBeforeSeq"] is None


def test_messages_names_the_reply_request_a_message_asks(database_url: str) -> None:
    conversation_with_messages(database_url)
    asked = as_json(ccweb_store(database_url, "messages", "reviewer", "--json"))
    request_id = asked["messages"][0]["metadata"]["crossConversation"]["replyRequestId"]

    table = ccweb_store(database_url, "messages", "reviewer")

    assert f"asks {request_id}" in table.stdout


def test_messages_refuses_what_it_cannot_show(database_url: str) -> None:
    conversation_with_messages(database_url)

    missing = ccweb_store(database_url, "messages", "nope")
    bad_role = ccweb_store(database_url, "messages", "planner", "--role", "robot")

    assert missing.exit_code == 3
    assert "conversation 'nope' does not exist" in missing.stderr
    assert bad_role.exit_code == 2
    assert "role 'robot' is not a message role" in bad_role.stderr


def test_messages_over_a_server_prints_what_the_database_gives(database_url: str) -> None:
    conversation_with_messages(database_url)
    direct: Any = as_json(ccweb_store(database_url, "messages", "planner", "--json"))
    with serving(database_url, CCWEB_TOKEN=TOKEN) as server:
        env = server_env(CCWEB_TOKEN=TOKEN)
        env.pop("CCWEB_DATABASE_URL", None)
        result = run_cli("messages", "planner", "--json", "--server", server.url, env=env)
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout) == direct
