"""Prompt forms: ``ccweb_prompt_user`` cards and ``prompt.respond``, on SQLite and PostgreSQL."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
import sqlalchemy as sa

from ccweb_store.domain import errors
from ccweb_store.domain.context import Source
from ccweb_store.domain.errors import DomainError
from ccweb_store.store.models import MessageRow, RunRow
from ccweb_store.store.uow import Store
from tests import host_calls
from tests.tool_calls import list_user_inputs, prompt_user

QUESTIONS: list[dict[str, Any]] = [
    {"id": "db", "question": "Which database?", "options": ["SQLite", "PostgreSQL"]},
    {"id": "notes", "question": "Anything else?"},
    {
        "id": "deploy",
        "question": "Where does it run?",
        "options": ["laptop", "server"],
        "allowFreeText": True,
    },
]
ANSWERS = {"db": "PostgreSQL", "notes": "keep it small", "deploy": "a Raspberry Pi"}


async def new_conversation(store: Store, session_id: str = "src") -> None:
    async with store.uow() as uow:
        await uow.sessions.create(session_id, title="Planning")
        await uow.messages.append(session_id, "user", "plan the storage layer")
        await uow.commit()


async def ask(store: Store, **args: Any) -> dict[str, Any]:
    return await prompt_user(
        store, Source("src"), {"title": "Setup", "questions": QUESTIONS, **args}
    )


async def counts(store: Store) -> tuple[int, int]:
    async with store.read_uow() as uow:
        messages = (
            await uow._execute(sa.select(sa.func.count()).select_from(MessageRow))
        ).scalar_one()
        runs = (await uow._execute(sa.select(sa.func.count()).select_from(RunRow))).scalar_one()
    return int(messages), int(runs)


async def card_prompt(store: Store, message_id: str) -> dict[str, Any]:
    async with store.read_uow() as uow:
        card = await uow.messages.get(message_id)
        assert card is not None and card.metadata_ is not None
        prompt: dict[str, Any] = card.metadata_["ccwebPrompt"]
        return prompt


async def refused(call: Any) -> DomainError:
    with pytest.raises(DomainError) as caught:
        await call
    return caught.value


# --- the card -------------------------------------------------------------------------------


async def test_prompt_user_appends_a_pending_card_to_the_source(store: Store) -> None:
    await new_conversation(store)
    result = await ask(store)
    assert result["ok"] is True
    assert result["promptId"].startswith("prompt_")
    async with store.read_uow() as uow:
        card = await uow.messages.get(result["messageId"])
    assert card is not None
    assert (card.session_id, card.role, card.seq) == ("src", "assistant", 2)
    assert "Which database?" in card.content and "SQLite / PostgreSQL" in card.content
    assert card.metadata_ == {
        "ccwebPrompt": {
            "promptId": result["promptId"],
            "title": "Setup",
            "status": "pending",
            "questions": [
                {
                    "id": "db",
                    "question": "Which database?",
                    "options": ["SQLite", "PostgreSQL"],
                    "allowFreeText": False,
                },
                {"id": "notes", "question": "Anything else?", "options": [], "allowFreeText": True},
                {
                    "id": "deploy",
                    "question": "Where does it run?",
                    "options": ["laptop", "server"],
                    "allowFreeText": True,
                },
            ],
        }
    }


async def test_an_unanswered_card_is_not_a_user_input(store: Store) -> None:
    await new_conversation(store)
    await ask(store)
    payload = await list_user_inputs(store, Source("src"), {})
    assert [item["content"] for item in payload["inputs"]] == ["plan the storage layer"]


@pytest.mark.parametrize(
    ("args", "fragment"),
    [
        ({"questions": []}, "questions must hold at least 1 items, got 0"),
        ({"questions": [{"id": f"q{n}", "question": "?"} for n in range(11)]}, "at most 10"),
        ({"questions": "db?"}, "questions must be an array, got string"),
        ({}, "questions is required"),
        ({"questions": [{"id": "", "question": "?"}]}, "id must be a non-empty string"),
        ({"questions": [{"id": 3, "question": "?"}]}, "questions[0].id must be a string"),
        ({"questions": [{"id": "a", "question": "  "}]}, "question must be a non-empty"),
        ({"questions": [{"id": "a", "question": "?", "options": "yes"}]}, "must be an array"),
        ({"questions": [{"id": "a", "question": "?", "options": [""]}]}, "list of non-empty"),
        ({"questions": [{"id": "a", "question": "?", "options": [1, 2]}]}, "options[0] must be a"),
        (
            {"questions": [{"id": "a", "question": "?", "allowFreeText": "yes"}]},
            "allowFreeText must be a boolean",
        ),
        (
            {"questions": [{"id": "a", "question": "?", "allowFreeText": False}]},
            "cannot be answered",
        ),
        (
            {"questions": [{"id": "a", "question": "?"}, {"id": "a", "question": "!"}]},
            "repeated: a",
        ),
        ({"title": 7, "questions": [{"id": "a", "question": "?"}]}, "title must be a string"),
        ({"questions": ["just text"]}, "must be an object"),
    ],
)
async def test_a_malformed_card_is_invalid_arguments_and_writes_nothing(
    store: Store, args: dict[str, Any], fragment: str
) -> None:
    await new_conversation(store)
    before = await counts(store)
    error = await refused(prompt_user(store, Source("src"), args))
    assert error.code == errors.INVALID_ARGUMENTS
    assert fragment in error.message
    assert await counts(store) == before


async def test_a_card_needs_a_source_conversation(store: Store) -> None:
    args = {"questions": QUESTIONS}
    error = await refused(prompt_user(store, Source(None), args))
    assert error.code == errors.MISSING_SOURCE_CONVERSATION
    error = await refused(prompt_user(store, Source("gone"), args))
    assert error.code == errors.CONVERSATION_NOT_FOUND
    assert await counts(store) == (0, 0)


# --- answering it ---------------------------------------------------------------------------


async def test_answering_writes_a_user_message_marks_the_card_and_queues_a_turn(
    store: Store,
) -> None:
    await new_conversation(store)
    card = await ask(store)
    result = await host_calls.respond(store, {"promptId": card["promptId"], "answers": ANSWERS})

    message, run = result["message"], result["run"]
    assert (message["sessionId"], message["role"], message["seq"]) == ("src", "user", 3)
    assert message["content"] == (
        "Answers to: Setup\n"
        "1. Which database?\n   Answer: PostgreSQL\n"
        "2. Anything else?\n   Answer: keep it small\n"
        "3. Where does it run?\n   Answer: a Raspberry Pi"
    )
    assert message["metadata"] == {
        "ccwebPromptResponse": {"promptId": card["promptId"], "answers": ANSWERS}
    }
    assert (run["sessionId"], run["kind"], run["status"]) == ("src", "user_turn", "queued")
    assert run["runtimeText"] == message["content"]

    prompt = await card_prompt(store, card["messageId"])
    assert prompt["status"] == "answered"
    assert prompt["answers"] == ANSWERS
    assert prompt["responseMessageId"] == message["id"]
    assert prompt["answeredAt"].endswith("Z")
    assert len(prompt["questions"]) == 3


async def test_the_answer_is_listed_as_a_user_input_and_the_card_is_not(store: Store) -> None:
    await new_conversation(store)
    card = await ask(store)
    result = await host_calls.respond(store, {"promptId": card["promptId"], "answers": ANSWERS})
    payload = await list_user_inputs(store, Source("src"), {})
    assert [item["messageId"] for item in payload["inputs"]] == [
        payload["inputs"][0]["messageId"],
        result["message"]["id"],
    ]
    assert card["messageId"] not in [item["messageId"] for item in payload["inputs"]]
    assert "Answer: PostgreSQL" in payload["inputs"][-1]["content"]


async def test_a_second_answer_is_refused_and_changes_nothing(store: Store) -> None:
    await new_conversation(store)
    card = await ask(store)
    await host_calls.respond(store, {"promptId": card["promptId"], "answers": ANSWERS})
    before = await counts(store)
    error = await refused(
        host_calls.respond(store, {"promptId": card["promptId"], "answers": ANSWERS})
    )
    assert error.code == errors.PROMPT_ALREADY_ANSWERED
    assert await counts(store) == before


async def test_two_concurrent_answers_cannot_both_win(store: Store) -> None:
    await new_conversation(store)
    card = await ask(store)
    outcomes = await asyncio.gather(
        *(
            host_calls.respond(store, {"promptId": card["promptId"], "answers": ANSWERS})
            for _ in range(4)
        ),
        return_exceptions=True,
    )
    winners = [o for o in outcomes if isinstance(o, dict)]
    losers = [o for o in outcomes if isinstance(o, DomainError)]
    assert len(winners) == 1
    assert [e.code for e in losers] == [errors.PROMPT_ALREADY_ANSWERED] * 3
    assert await counts(store) == (3, 1)  # first input, card, one answer; one run


async def test_the_card_moves_from_pending_to_answered_only_once(store: Store) -> None:
    # The transition is conditional in SQL, so a writer that read "pending" too late loses.
    await new_conversation(store)
    card = await ask(store)
    answered = {"ccwebPrompt": {"promptId": card["promptId"], "status": "answered"}}
    async with store.uow() as uow:
        assert await uow.messages.answer_prompt_card(card["messageId"], answered) is True
        assert await uow.messages.answer_prompt_card(card["messageId"], answered) is False
        await uow.commit()


async def test_an_unknown_prompt_is_not_found(store: Store) -> None:
    await new_conversation(store)
    error = await refused(
        host_calls.respond(store, {"promptId": "prompt_nope", "answers": ANSWERS})
    )
    assert error.code == errors.PROMPT_NOT_FOUND
    error = await refused(host_calls.respond(store, {"answers": ANSWERS}))
    assert error.code == errors.INVALID_ARGUMENTS


@pytest.mark.parametrize(
    ("answers", "fragment"),
    [
        ({**ANSWERS, "color": "blue"}, "unknown question ids: color"),
        ({"db": "SQLite"}, "missing answers for: notes, deploy"),
        ({**ANSWERS, "notes": "   "}, "missing answers for: notes"),
        ({**ANSWERS, "db": "MySQL"}, "'MySQL' is not an option of 'db'; choose one of: SQLite"),
        ({**ANSWERS, "notes": 42}, "the answer to 'notes' must be text"),
        ("PostgreSQL", "answers must be an object"),
        (None, "answers must be an object"),
    ],
)
async def test_bad_answers_are_refused_without_writing_anything(
    store: Store, answers: object, fragment: str
) -> None:
    await new_conversation(store)
    card = await ask(store)
    before = await counts(store)
    error = await refused(
        host_calls.respond(store, {"promptId": card["promptId"], "answers": answers})
    )
    assert error.code == errors.INVALID_ARGUMENTS
    assert fragment in error.message
    assert await counts(store) == before
    assert (await card_prompt(store, card["messageId"]))["status"] == "pending"


async def test_free_text_is_accepted_where_the_card_allows_it(store: Store) -> None:
    await new_conversation(store)
    card = await ask(store)
    result = await host_calls.respond(
        store, {"promptId": card["promptId"], "answers": {**ANSWERS, "deploy": "  server  "}}
    )
    assert "Answer: server" in result["message"]["content"]


async def test_a_card_imported_from_cc_web_is_found_by_its_prompt_id(store: Store) -> None:
    # Imported cards keep cc-web's message ids; the prompt id lives only in the metadata.
    await new_conversation(store)
    legacy = {
        "ccwebPrompt": {
            "promptId": "legacy-prompt-1",
            "title": None,
            "questions": [{"id": "ok", "question": "Ship it?", "options": ["yes", "no"]}],
            "status": "pending",
        }
    }
    async with store.uow() as uow:
        await uow.messages.append("src", "assistant", "Ship it?", metadata=legacy, id="m-77")
        await uow.commit()
    result = await host_calls.respond(
        store, {"promptId": "legacy-prompt-1", "answers": {"ok": "yes"}}
    )
    assert result["message"]["content"] == "Answers:\n1. Ship it?\n   Answer: yes"
    assert (await card_prompt(store, "m-77"))["status"] == "answered"
