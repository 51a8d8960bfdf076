"""Prompt forms end to end over HTTP: card, answer, listed as the user's own words."""

from __future__ import annotations

import httpx

from ccweb_store.store.uow import Store
from tests.http_client import app_client, call_tool, rpc, rpc_result

QUESTIONS = [
    {"id": "db", "question": "Which database?", "options": ["SQLite", "PostgreSQL"]},
    {"id": "notes", "question": "Anything else?"},
]


async def _messages(client: httpx.AsyncClient, session_id: str) -> list[dict[str, object]]:
    result = await rpc_result(client, "message.list", {"sessionId": session_id, "limit": 500})
    messages: list[dict[str, object]] = result["messages"]
    return messages


async def test_a_prompt_card_answered_by_the_host_becomes_a_listed_user_input(
    store: Store,
) -> None:
    async with app_client(store) as client:
        await rpc_result(client, "session.create", {"id": "planner", "title": "Planner"})
        card = await call_tool(
            client,
            "ccweb_prompt_user",
            {"title": "Setup", "questions": QUESTIONS},
            query="?sourceSessionId=planner",
        )
        assert card["isError"] is False
        prompt_id = card["structuredContent"]["promptId"]

        before = await call_tool(
            client, "ccweb_list_user_inputs", {}, query="?sourceSessionId=planner"
        )
        assert before["structuredContent"]["returned"] == 0  # an unanswered card is no input

        answered = await rpc_result(
            client,
            "prompt.respond",
            {"promptId": prompt_id, "answers": {"db": "PostgreSQL", "notes": "Keep it fast"}},
        )
        assert answered["message"]["role"] == "user"
        assert answered["run"]["kind"] == "user_turn" and answered["run"]["status"] == "queued"

        listed = await call_tool(
            client, "ccweb_list_user_inputs", {}, query="?sourceSessionId=planner"
        )
        inputs = listed["structuredContent"]["inputs"]
        assert [item["messageId"] for item in inputs] == [answered["message"]["id"]]
        assert "PostgreSQL" in inputs[0]["content"] and "Keep it fast" in inputs[0]["content"]

        cards = [m for m in await _messages(client, "planner") if m["role"] == "assistant"]
        assert cards[0]["metadata"]["ccwebPrompt"]["status"] == "answered"  # type: ignore[index]

        again = await rpc(
            client, "prompt.respond", {"promptId": prompt_id, "answers": {"db": "SQLite"}}
        )
        assert again["error"]["code"] == -32000
        assert again["error"]["data"]["code"] == "prompt_already_answered"


async def test_bad_answers_are_refused_over_http_and_write_nothing(store: Store) -> None:
    async with app_client(store) as client:
        await rpc_result(client, "session.create", {"id": "asker"})
        card = await call_tool(
            client, "ccweb_prompt_user", {"questions": QUESTIONS}, query="?sourceSessionId=asker"
        )
        prompt_id = card["structuredContent"]["promptId"]
        before = await _messages(client, "asker")
        for answers in (
            {"db": "MySQL", "notes": "x"},  # not an offered option
            {"db": "SQLite"},  # missing answer
            {"db": "SQLite", "notes": "x", "extra": "y"},  # unknown question
        ):
            refused = await rpc(
                client, "prompt.respond", {"promptId": prompt_id, "answers": answers}
            )
            assert refused["error"]["data"]["code"] == "invalid_arguments", answers
        unknown = await rpc(client, "prompt.respond", {"promptId": "nope", "answers": {}})
        assert unknown["error"]["data"]["code"] == "prompt_not_found"
        assert await _messages(client, "asker") == before
    async with store.read_uow() as uow:
        assert await uow.runs.list_recent(session_id="asker") == []
