"""The ``prompt.respond`` call: the user's answers to a form card."""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import BeforeValidator, Field

from ccweb_store.domain.call_models import CallModel, coded
from ccweb_store.domain.errors import INVALID_ARGUMENTS


def _prompt_id(value: Any) -> Any:
    if not isinstance(value, str) or not value.strip():
        raise coded(
            INVALID_ARGUMENTS, "promptId must be the non-empty id ccweb_prompt_user returned"
        )
    return value


class RespondToPrompt(CallModel):
    """``prompt.respond``: answer a form card; the answers are checked against its questions
    (which only the stored card knows)."""

    prompt_id: Annotated[Any, BeforeValidator(_prompt_id)] = Field(
        default=None, validate_default=True
    )
    answers: Any = None
