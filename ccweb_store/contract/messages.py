"""The ``message.*`` calls: append a message, list a conversation's messages in order, read
its newest ones."""

from __future__ import annotations

from typing import Annotated, Any, ClassVar

from pydantic import BeforeValidator, Field

from ccweb_store.contract.base import (
    ConversationId,
    Input,
    Output,
    PageSize,
    Text,
    coded,
    one_of,
)
from ccweb_store.contract.objects import Message
from ccweb_store.domain.errors import INVALID_ARGUMENTS, INVALID_ROLE
from ccweb_store.domain.ids import ID_MAX_LENGTH
from ccweb_store.domain.kinds import Role

#: How many messages ``message.list`` and ``message.recent`` return when they are not told.
DEFAULT_MESSAGE_PAGE = 100
#: What ``message.append``'s ``content`` must be, said when it is anything else.
CONTENT_RULE = "content is required: a string or a list of {type: 'text', text} blocks"


def _message_content(value: Any) -> Any:
    if not isinstance(value, str | list):
        raise coded(INVALID_ARGUMENTS, CONTENT_RULE)
    return value


def _role(value: Any) -> Any:
    if not isinstance(value, str) or value not in tuple(Role):
        raise coded(
            INVALID_ROLE,
            f"role {value!r} is not a message role: use one of {', '.join(tuple(Role))}",
        )
    return Role(value)


class AppendMessage(Input):
    """``message.append``: a message at the conversation's next ``seq``; ``content`` is text or
    cc-web's list of ``{type: "text", text}`` blocks."""

    session_id: ConversationId
    content: Annotated[str | list[dict[str, Any] | str], BeforeValidator(_message_content)] = Field(
        default=None, validate_default=True
    )
    role: Annotated[Role, BeforeValidator(one_of(tuple(Role), INVALID_ROLE, "role", Role))] = Field(
        default="", validate_default=True
    )
    metadata: dict[str, Any] | None = None
    id: Annotated[str, Field(max_length=ID_MAX_LENGTH)] | None = None
    published_required: ClassVar[tuple[str, ...]] = ("role", "content")


class RecentMessages(Input):
    """``message.recent``: the newest messages before ``beforeSeq``, of ``role`` if given."""

    session_id: Text
    before_seq: Annotated[int, Field(ge=1)] | None = None
    limit: PageSize = DEFAULT_MESSAGE_PAGE
    role: Annotated[Role, BeforeValidator(_role)] | None = None


class ListMessages(Input):
    """``message.list``: messages after ``afterSeq``, in order."""

    session_id: Text
    after_seq: Annotated[int, Field(ge=0)] = 0
    limit: PageSize = DEFAULT_MESSAGE_PAGE


class MessagesBefore(Output):
    """``message.recent``'s answer: messages oldest first, the ``seq`` to ask before for the
    page before them (None: no older message), and the conversation's title."""

    messages: list[Message]
    next_before_seq: int | None
    title: str | None


class MessagesAfter(Output):
    """``message.list``'s answer: messages in order, and the ``seq`` to ask after next."""

    messages: list[Message]
    next_after_seq: int
