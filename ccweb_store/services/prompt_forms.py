"""Prompt forms: ``ccweb_prompt_user`` cards (SPEC §2.3) and the host's ``prompt.respond`` (§3).

A card is an ``assistant`` message whose ``metadata.ccwebPrompt`` holds the questions and a
status (``pending`` → ``answered``); its message id is its prompt id, so answering finds it
by primary key. The answer is an ordinary ``user`` message, so ``ccweb_list_user_inputs``
lists it like anything else the user typed, and it queues a ``user_turn`` run.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from ccweb_store.contract.objects import Message, Run
from ccweb_store.contract.prompts import ANSWERS_RULE, PromptResponse, RespondToPrompt
from ccweb_store.contract.tool_answers import PromptCard
from ccweb_store.contract.tools import PromptUser, Question
from ccweb_store.domain import errors, rows
from ccweb_store.domain.context import Source, require_source
from ccweb_store.domain.errors import Conflict, InvalidInput, NotFound
from ccweb_store.domain.ids import new_id
from ccweb_store.domain.kinds import Role, RunKind
from ccweb_store.domain.timestamps import iso, utcnow
from ccweb_store.store.uow import Store

PROMPT_KEY = "ccwebPrompt"
RESPONSE_KEY = "ccwebPromptResponse"


def card_questions(questions: Sequence[Question]) -> list[dict[str, Any]]:
    """The questions as a card stores them (``metadata.ccwebPrompt.questions``)."""
    return [
        {
            "id": question.id,
            "question": question.question,
            "options": list(question.options),
            "allowFreeText": question.free_text,
        }
        for question in questions
    ]


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
        raise InvalidInput(ANSWERS_RULE)
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


def _prompt_of(card: rows.Message) -> dict[str, Any]:
    prompt = (card.metadata_ or {}).get(PROMPT_KEY)
    if not isinstance(prompt, dict):
        raise NotFound("the prompt card has no form", code=errors.PROMPT_NOT_FOUND)
    return prompt


async def prompt_user(store: Store, source: Source, args: PromptUser) -> PromptCard:
    """``ccweb_prompt_user``: append a pending prompt card to the source."""
    title = args.title
    questions = card_questions(args.questions)
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
            session_id, Role.ASSISTANT, card_text(title, questions), metadata=metadata, id=prompt_id
        )
        await uow.commit()
    return PromptCard(ok=True, prompt_id=prompt_id, message_id=card.id)


async def respond(store: Store, call: RespondToPrompt) -> PromptResponse:
    """``prompt.respond``: answer the card, append the user message, queue a run, atomically."""
    prompt_id: str = call.prompt_id
    async with store.uow() as uow:
        card = await uow.messages.find_prompt_card(prompt_id)
        if card is None:
            raise NotFound(f"prompt {prompt_id!r} does not exist", code=errors.PROMPT_NOT_FOUND)
        prompt = _prompt_of(card)
        if prompt.get("status") != "pending":
            raise _already_answered(prompt_id)
        questions = stored_questions(prompt)
        answers = check_answers(questions, call.answers)
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
            Role.USER,
            text,
            id=message_id,
            metadata={RESPONSE_KEY: {"promptId": prompt_id, "answers": answers}},
        )
        run = await uow.runs.enqueue(card.session_id, RunKind.USER_TURN, runtime_text=text)
        await uow.commit()
    return PromptResponse(message=Message.model_validate(message), run=Run.model_validate(run))


def _already_answered(prompt_id: str) -> Conflict:
    return Conflict(
        f"prompt {prompt_id!r} has already been answered; it takes one answer only",
        code=errors.PROMPT_ALREADY_ANSWERED,
    )
