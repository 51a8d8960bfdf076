"""The ``prompt.respond`` call: the user's answers to a form card (the card itself is the
``ccweb_prompt_user`` tool's: ``tools``)."""

from __future__ import annotations

from typing import Annotated, Any, ClassVar

from pydantic import BeforeValidator, Field

from ccweb_store.contract.base import Input, Output, coded
from ccweb_store.contract.objects import Message, Run
from ccweb_store.domain.errors import INVALID_ARGUMENTS


def _prompt_id(value: Any) -> Any:
    if not isinstance(value, str) or not value.strip():
        raise coded(
            INVALID_ARGUMENTS, "promptId must be the non-empty id ccweb_prompt_user returned"
        )
    return value


def _answers(value: Any) -> Any:
    if value is not None and not isinstance(value, dict):
        raise coded(INVALID_ARGUMENTS, ANSWERS_RULE)
    return value


#: What ``prompt.respond``'s ``answers`` must be, said when it is anything else.
ANSWERS_RULE = "answers must be an object mapping each question id to its answer text"


class RespondToPrompt(Input):
    """``prompt.respond``: answer a form card; the answers are checked against its questions
    (which only the stored card knows)."""

    prompt_id: Annotated[str, BeforeValidator(_prompt_id)] = Field(
        default=None, validate_default=True
    )
    #: Each question's id and its answer, checked against the stored card's questions.
    answers: Annotated[dict[str, Any] | None, BeforeValidator(_answers)] = None
    published_required: ClassVar[tuple[str, ...]] = ("promptId", "answers")


class PromptResponse(Output):
    """``prompt.respond``'s answer: the user message with the answers and the run it queued."""

    message: Message
    run: Run
