"""The answers of prompt forms: ``ccweb_prompt_user`` and ``prompt.respond``."""

from __future__ import annotations

from typing import Any

from ccweb_store.protocol.shapes.objects import message_out, run_out
from ccweb_store.services.prompt_forms import PromptAnswer, PromptCard


def prompt_card_out(card: PromptCard) -> dict[str, Any]:
    """``ccweb_prompt_user``'s answer."""
    return {"ok": True, "promptId": card.prompt_id, "messageId": card.message_id}


def prompt_answer_out(answer: PromptAnswer) -> dict[str, Any]:
    """``prompt.respond``'s answer: the user message with the answers and the run it queued."""
    return {"message": message_out(answer.message), "run": run_out(answer.run)}
