"""Who is calling: the source conversation and hop count that came with a tool call."""

from __future__ import annotations

from dataclasses import dataclass

from ccweb_store import errors
from ccweb_store.errors import InvalidInput
from ccweb_store.repositories import validate_session_id


@dataclass(frozen=True, slots=True)
class Source:
    """The conversation whose agent calls a tool (``None`` when the caller named none)."""

    session_id: str | None = None
    hop_count: int = 0


def require_source(source: Source) -> str:
    """The calling conversation's id, for tools that act on it (``missing_source_conversation``)."""
    if not source.session_id:
        raise InvalidInput(
            "no source conversation: call this tool from a conversation (sourceSessionId)",
            code=errors.MISSING_SOURCE_CONVERSATION,
        )
    return validate_session_id(source.session_id)
