"""The ``operator.*`` calls: the operator's views of conversations and open reply requests."""

from __future__ import annotations

from typing import Annotated

from pydantic import AfterValidator, BeforeValidator, Field

from ccweb_store.domain.call_models import (
    AgeSeconds,
    CallModel,
    ConversationId,
    PageSize,
    Text,
    listed,
    stripped_or_none,
)
from ccweb_store.domain.tool_arguments import QUERY_MAX_CHARS

#: How many rows the operator's listings return when they are not told.
DEFAULT_OPERATOR_PAGE = 100


class OperatorConversations(CallModel):
    """``operator.conversations``: conversations, newest activity first (``query``: id or
    title; archived ones only with ``includeArchived``)."""

    limit: PageSize = DEFAULT_OPERATOR_PAGE
    query: Annotated[
        str | None, Field(max_length=QUERY_MAX_CHARS), AfterValidator(stripped_or_none)
    ] = None
    include_archived: bool = False


class OperatorConversation(CallModel):
    """``operator.conversation``: one conversation, its open requests and newest runs."""

    id: ConversationId


class OperatorPendingReplies(CallModel):
    """``operator.pendingReplies``: open requests, oldest first."""

    status: Annotated[list[str] | None, BeforeValidator(listed)] = None
    session_id: str | None = None
    older_than_seconds: AgeSeconds | None = None
    limit: PageSize = DEFAULT_OPERATOR_PAGE


class OperatorReplyStory(CallModel):
    """``operator.replyStory``: one request's story."""

    request_id: Text


class OperatorDoctor(CallModel):
    """``operator.doctor``: the checks of ``ccweb-store doctor``; ``full`` reads every stored
    JSON value, not a sample of each column."""

    full: bool = False
