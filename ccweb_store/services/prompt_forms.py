"""Prompt forms: ``ccweb_prompt_user`` cards (SPEC §2.3) and the host's ``prompt.respond`` (§3).

A card is an ``assistant`` message whose ``metadata.ccwebPrompt`` holds the questions and a
status (``pending`` → ``answered``); its message id is its prompt id, so answering finds it
by primary key. The answer is an ordinary ``user`` message, so ``ccweb_list_user_inputs``
lists it like anything else the user typed, and it queues a ``user_turn`` run.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ccweb_store.domain import errors
from ccweb_store.domain.context import Source, require_source
from ccweb_store.domain.errors import Conflict, InvalidInput, NotFound
from ccweb_store.domain.ids import new_id
from ccweb_store.domain.timestamps import iso, utcnow
from ccweb_store.services.schemas import message_out, run_out
from ccweb_store.store.models import Message
from ccweb_store.store.uow import Store

MAX_QUESTIONS = 10
PROMPT_KEY = "ccwebPrompt"
RESPONSE_KEY = "ccwebPromptResponse"


def _optional_text(value: object, what: str) -> str | None:
    if value is None:
        return None
    if not isinstance(value, str):
        raise InvalidInput(f"{what} must be a string, got {value!r}")
    return value.strip() or None


def _question(raw: object, index: int) -> dict[str, Any]:
    where = f"questions[{index}]"
    if not isinstance(raw, Mapping):
        raise InvalidInput(f"{where} must be an object with id and question")
    question_id = raw.get("id")
    if not isinstance(question_id, str) or not question_id.strip():
        raise InvalidInput(f"{where}.id must be a non-empty string")
    text = raw.get("question")
    if not isinstance(text, str) or not text.strip():
        raise InvalidInput(f"{where}.question must be a non-empty string")
    options = raw.get("options")
    if options is None:
        options = []
    if not isinstance(options, list) or not all(
        isinstance(option, str) and option.strip() for option in options
    ):
        raise InvalidInput(f"{where}.options must be a list of non-empty strings")
    allow_free_text = raw.get("allowFreeText")
    if allow_free_text is None:
        allow_free_text = not options
    if not isinstance(allow_free_text, bool):
        raise InvalidInput(f"{where}.allowFreeText must be true or false")
    if not options and not allow_free_text:
        raise InvalidInput(f"{where} offers no options and no free text, so it cannot be answered")
    return {
        "id": question_id,
        "question": text.strip(),
        "options": [option.strip() for option in options],
        "allowFreeText": allow_free_text,
    }


def parse_questions(raw: object) -> list[dict[str, Any]]:
    """The card's questions, validated and normalised (``invalid_arguments`` otherwise)."""
    if not isinstance(raw, list) or not 1 <= len(raw) <= MAX_QUESTIONS:
        raise InvalidInput(f"questions must be a list of 1 to {MAX_QUESTIONS} questions")
    questions = [_question(item, index) for index, item in enumerate(raw)]
    ids = [question["id"] for question in questions]
    duplicates = sorted({qid for qid in ids if ids.count(qid) > 1})
    if duplicates:
        raise InvalidInput(f"question ids must be unique; repeated: {', '.join(duplicates)}")
    return questions


def card_text(title: str | None, questions: list[dict[str, Any]]) -> str:
    """The card as plain text, for transcripts and clients that do not render forms."""
    lines = [title or "Questions for you"]
    for number, question in enumerate(questions, start=1):
        lines.append(f"{number}. {question['question']}")
        if question["options"]:
            lines.append(f"   Options: {' / '.join(question['options'])}")
    return "\n".join(lines)


def response_text(
    title: str | None, questions: list[dict[str, Any]], answers: dict[str, str]
) -> str:
    """The user's answer as an ordinary message: each question followed by its answer."""
    lines = [f"Answers to: {title}" if title else "Answers:"]
    for number, question in enumerate(questions, start=1):
        lines.append(f"{number}. {question['question']}")
        lines.append(f"   Answer: {answers[question['id']]}")
    return "\n".join(lines)


def check_answers(questions: list[dict[str, Any]], raw: object) -> dict[str, str]:
    """Answers keyed by question id, in question order; every problem named at once."""
    if not isinstance(raw, Mapping):
        raise InvalidInput("answers must be an object mapping each question id to its answer text")
    known = {question["id"] for question in questions}
    problems: list[str] = []
    unknown = sorted(str(key) for key in raw if key not in known)
    if unknown:
        problems.append(f"unknown question ids: {', '.join(unknown)}")
    answers: dict[str, str] = {}
    missing: list[str] = []
    for question in questions:
        qid = question["id"]
        value = raw.get(qid)
        if value is None or (isinstance(value, str) and not value.strip()):
            missing.append(qid)
        elif not isinstance(value, str):
            problems.append(f"the answer to {qid!r} must be text, got {value!r}")
        elif not question["allowFreeText"] and value.strip() not in question["options"]:
            problems.append(
                f"{value.strip()!r} is not an option of {qid!r}; "
                f"choose one of: {', '.join(question['options'])}"
            )
        else:
            answers[qid] = value.strip()
    if missing:
        problems.insert(0, f"missing answers for: {', '.join(missing)}")
    if problems:
        raise InvalidInput("; ".join(problems))
    return answers


def stored_questions(prompt: Mapping[str, Any]) -> list[dict[str, Any]]:
    """A card's questions as stored, with the defaults a card imported from cc-web may omit."""
    questions: list[dict[str, Any]] = []
    for raw in prompt.get("questions") or []:
        if not isinstance(raw, Mapping) or not isinstance(raw.get("id"), str):
            continue
        options = [str(option) for option in raw.get("options") or []]
        questions.append(
            {
                "id": raw["id"],
                "question": str(raw.get("question") or raw["id"]),
                "options": options,
                "allowFreeText": bool(raw.get("allowFreeText", not options)),
            }
        )
    return questions


def _prompt_of(card: Message) -> dict[str, Any]:
    prompt = (card.metadata_ or {}).get(PROMPT_KEY)
    if not isinstance(prompt, dict):
        raise NotFound("the prompt card has no form", code=errors.PROMPT_NOT_FOUND)
    return prompt


async def prompt_user(store: Store, source: Source, args: Mapping[str, Any]) -> dict[str, Any]:
    """``ccweb_prompt_user``: append a pending prompt card to the source."""
    title = _optional_text(args.get("title"), "title")
    questions = parse_questions(args.get("questions"))
    session_id = require_source(source)
    prompt_id = new_id("prompt")
    metadata = {
        PROMPT_KEY: {
            "promptId": prompt_id,
            "title": title,
            "questions": questions,
            "status": "pending",
        }
    }
    async with store.uow() as uow:
        card = await uow.messages.append(
            session_id, "assistant", card_text(title, questions), metadata=metadata, id=prompt_id
        )
        await uow.commit()
    return {"ok": True, "promptId": prompt_id, "messageId": card.id}


async def respond(store: Store, params: Mapping[str, Any]) -> dict[str, Any]:
    """``prompt.respond``: answer the card, append the user message, queue a run, atomically."""
    prompt_id = params.get("promptId")
    if not isinstance(prompt_id, str) or not prompt_id.strip():
        raise InvalidInput("promptId must be the non-empty id ccweb_prompt_user returned")
    async with store.uow() as uow:
        card = await uow.messages.find_prompt_card(prompt_id)
        if card is None:
            raise NotFound(f"prompt {prompt_id!r} does not exist", code=errors.PROMPT_NOT_FOUND)
        prompt = _prompt_of(card)
        if prompt.get("status") != "pending":
            raise _already_answered(prompt_id)
        questions = stored_questions(prompt)
        answers = check_answers(questions, params.get("answers"))
        title = prompt.get("title")
        message_id = new_id("msg")
        answered = {
            **prompt,
            "status": "answered",
            "answeredAt": iso(utcnow()),
            "answers": answers,
            "responseMessageId": message_id,
        }
        if not await uow.messages.answer_prompt_card(
            card.id, {**(card.metadata_ or {}), PROMPT_KEY: answered}
        ):
            raise _already_answered(prompt_id)
        text = response_text(title, questions, answers)
        message = await uow.messages.append(
            card.session_id,
            "user",
            text,
            id=message_id,
            metadata={RESPONSE_KEY: {"promptId": prompt_id, "answers": answers}},
        )
        run = await uow.runs.enqueue(card.session_id, "user_turn", runtime_text=text)
        await uow.commit()
    return {"message": message_out(message), "run": run_out(run)}


def _already_answered(prompt_id: str) -> Conflict:
    return Conflict(
        f"prompt {prompt_id!r} has already been answered; it takes one answer only",
        code=errors.PROMPT_ALREADY_ANSWERED,
    )
