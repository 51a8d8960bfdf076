"""The ``reply.*`` calls: list and read reply requests, retry, fail or expire them."""

from __future__ import annotations

from typing import Annotated

from pydantic import AfterValidator, BeforeValidator

from ccweb_store.domain.arguments import CENTURY_SECONDS
from ccweb_store.domain.call_models import (
    CallModel,
    ConversationId,
    PageSize,
    Text,
    between,
    listed,
    number,
    one_of,
)
from ccweb_store.domain.errors import INVALID_STATUS
from ccweb_store.domain.kinds import ReplyStatus

REPLY_STATUS_NAMES = tuple(ReplyStatus)
ReplyStatusName = Annotated[
    ReplyStatus,
    BeforeValidator(one_of(REPLY_STATUS_NAMES, INVALID_STATUS, "reply status", ReplyStatus)),
]
#: How many reply requests ``reply.list`` returns when it is not told.
DEFAULT_REPLY_PAGE = 50


class ListReplies(CallModel):
    """``reply.list``: requests oldest first, by status and conversation (either side)."""

    status: Annotated[list[ReplyStatusName] | None, BeforeValidator(listed)] = None
    session_id: ConversationId | None = None
    limit: PageSize = DEFAULT_REPLY_PAGE
    cursor: str | None = None


class GetReply(CallModel):
    """``reply.get``: one request by id."""

    request_id: Text


class RetryReply(CallModel):
    """``reply.retry``: try a request again (what that means per state: ``services/replies``);
    ``message``: the question to ask the target, for a request that stores none."""

    request_id: Text
    message: Text | None = None


class FailReply(CallModel):
    """``reply.fail``: fail a waiting or ready request, telling its source ``reason``."""

    request_id: Text
    reason: Text


class ExpireReplies(CallModel):
    """``reply.expire``: fail ``waiting`` requests made more than ``olderThanSeconds`` ago."""

    older_than_seconds: Annotated[
        float,
        BeforeValidator(number),
        AfterValidator(between(0, CENTURY_SECONDS, " (100 years)")),
    ]
