"""Who is calling: the source conversation and hop count that came with a tool call."""

from __future__ import annotations

from dataclasses import dataclass

from ccweb_store.domain import errors
from ccweb_store.domain.errors import DomainError, InvalidInput
from ccweb_store.domain.ids import validate_session_id


@dataclass(frozen=True, slots=True)
class Source:
    """The conversation whose agent calls a tool (``None`` when the caller named none).

    ``bound``: it came from a conversation credential (``credentials.py``), so the caller may
    act as this conversation only and read no other conversation's replies or inputs.
    """

    session_id: str | None = None
    hop_count: int = 0
    bound: bool = False


def require_source(source: Source) -> str:
    """The calling conversation's id, for tools that act on it (``missing_source_conversation``)."""
    if not source.session_id:
        raise InvalidInput(
            "no source conversation: call this tool from a conversation (sourceSessionId)",
            code=errors.MISSING_SOURCE_CONVERSATION,
        )
    return validate_session_id(source.session_id)


def refuse_other_conversation(source: Source, requested: object, what: str) -> None:
    """A bound caller names only its own conversation (``conversation_forbidden``); an
    unbound one (the operator, or a caller without a credential) may name any."""
    if source.bound and requested is not None and requested != source.session_id:
        raise DomainError(
            f"this conversation's credential only reads its own {what}: {requested!r} is "
            f"not {source.session_id!r}. Leave conversationId out",
            code=errors.CONVERSATION_FORBIDDEN,
        )
