"""Prompt forms: ``ccweb_prompt_user`` cards and the host's ``prompt.respond``.

Placeholder until the prompt-forms issue lands.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ccweb_store import errors
from ccweb_store.context import Source
from ccweb_store.errors import DomainError
from ccweb_store.uow import Store


async def prompt_user(store: Store, source: Source, args: Mapping[str, Any]) -> dict[str, Any]:
    """``ccweb_prompt_user``: append a pending prompt card to the source."""
    raise DomainError("ccweb_prompt_user is not implemented yet", code=errors.NOT_IMPLEMENTED)


async def respond(store: Store, params: Mapping[str, Any]) -> dict[str, Any]:
    """``prompt.respond``: answer a card, append the user message, queue a run."""
    raise DomainError("prompt.respond is not implemented yet", code=errors.NOT_IMPLEMENTED)
