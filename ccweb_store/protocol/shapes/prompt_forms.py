"""The answers of prompt forms: ``ccweb_prompt_user`` and ``prompt.respond``."""

from __future__ import annotations

from typing import Literal

from typing_extensions import TypedDict

from ccweb_store.protocol.shapes.objects import MessageOut, RunOut, message_out, run_out
from ccweb_store.protocol.shapes.wire import closed
from ccweb_store.services.prompt_forms import PromptAnswer, PromptCard


@closed
class PromptCardAnswer(TypedDict):
    """``ccweb_prompt_user``'s answer."""

    ok: Literal[True]
    promptId: str
    messageId: str


@closed
class PromptResponseAnswer(TypedDict):
    """``prompt.respond``'s answer."""

    message: MessageOut
    run: RunOut


def prompt_card_out(card: PromptCard) -> PromptCardAnswer:
    """``ccweb_prompt_user``'s answer."""
    return {"ok": True, "promptId": card.prompt_id, "messageId": card.message_id}


def prompt_answer_out(answer: PromptAnswer) -> PromptResponseAnswer:
    """``prompt.respond``'s answer: the user message with the answers and the run it queued."""
    return {"message": message_out(answer.message), "run": run_out(answer.run)}
