"""The ``reply.*`` calls: list and read reply requests, retry, fail or expire them."""

from __future__ import annotations

from typing import Annotated

from pydantic import AfterValidator, BeforeValidator

from ccweb_store.contract.base import (
    ConversationId,
    Input,
    Output,
    PageSize,
    Text,
    between,
    listed,
    number,
    one_of,
)
from ccweb_store.contract.objects import Reply
from ccweb_store.domain.arguments import CENTURY_SECONDS
from ccweb_store.domain.errors import INVALID_STATUS
from ccweb_store.domain.kinds import ReplyStatus

REPLY_STATUS_NAMES = tuple(ReplyStatus)
ReplyStatusName = Annotated[
    ReplyStatus,
    BeforeValidator(one_of(REPLY_STATUS_NAMES, INVALID_STATUS, "reply status", ReplyStatus)),
]
#: How many reply requests ``reply.list`` returns when it is not told.
DEFAULT_REPLY_PAGE = 50


class ListReplies(Input):
    """``reply.list``: requests oldest first, by status and conversation (either side)."""

    status: Annotated[list[ReplyStatusName] | None, BeforeValidator(listed)] = None
    session_id: ConversationId | None = None
    limit: PageSize = DEFAULT_REPLY_PAGE
    cursor: str | None = None


class GetReply(Input):
    """``reply.get``: one request by id."""

    request_id: Text


class RetryReply(Input):
    """``reply.retry``: try a request again (what that means per state: ``services/replies``);
    ``message``: the question to ask the target, for a request that stores none."""

    request_id: Text
    message: Text | None = None


class FailReply(Input):
    """``reply.fail``: fail a waiting or ready request, telling its source ``reason``."""

    request_id: Text
    reason: Text


class ExpireReplies(Input):
    """``reply.expire``: fail ``waiting`` requests made more than ``olderThanSeconds`` ago."""

    older_than_seconds: Annotated[
        float,
        BeforeValidator(number),
        AfterValidator(between(0, CENTURY_SECONDS, " (100 years)")),
    ]


class ReplyPage(Output):
    """``reply.list``'s answer: requests oldest first, and the cursor of the next page (None:
    the last page)."""

    replies: list[Reply]
    next_cursor: str | None


class Expired(Output):
    """``reply.expire``'s answer: how many ``waiting`` requests it failed."""

    expired: int
