"""The answers of sends and of the reply lifecycle: ``ccweb_send_message``,
``ccweb_create_conversation``, ``ccweb_get_pending_reply``, ``reply.*``."""

from __future__ import annotations

from typing import Literal, NotRequired

from typing_extensions import TypedDict

from ccweb_store.domain.kinds import ReplyStatus, RunStatus
from ccweb_store.protocol.shapes.objects import ReplyOut, reply_out
from ccweb_store.protocol.shapes.wire import closed
from ccweb_store.services.messaging import CreatedConversation, SendResult
from ccweb_store.services.replies import ReplyPage
from ccweb_store.store.rows import ReplyRequest


@closed
class SendAnswer(TypedDict):
    """``ccweb_send_message``'s answer; the request's keys only for ``return_and_continue``."""

    ok: Literal[True]
    replyMode: str
    messageId: str
    runId: str
    targetConversationId: str
    targetTitle: str | None
    deliveryStatus: str
    requestId: NotRequired[str]
    status: NotRequired[str]
    replyDelivery: NotRequired[Literal["automatic"]]
    sourceAutoRun: NotRequired[Literal[True]]


@closed
class CreatedConversationAnswer(TypedDict):
    """``ccweb_create_conversation``'s answer; the send's keys only when it sent a message,
    the request's only when that send asked for a reply."""

    ok: Literal[True]
    conversationId: str
    title: str | None
    replyMode: NotRequired[str]
    messageId: NotRequired[str]
    runId: NotRequired[str]
    deliveryStatus: NotRequired[str]
    requestId: NotRequired[str]
    replyStatus: NotRequired[str]
    replyDelivery: NotRequired[Literal["automatic"]]
    sourceAutoRun: NotRequired[Literal[True]]


@closed
class PendingReplyListAnswer(TypedDict):
    """``ccweb_get_pending_reply``'s answer without a ``requestId``: the open requests."""

    replies: list[ReplyOut]
    count: int


#: ``ccweb_get_pending_reply``'s answer: the one request asked for, or the open ones.
PendingReplyToolAnswer = ReplyOut | PendingReplyListAnswer


@closed
class ReplyPageAnswer(TypedDict):
    """``reply.list``'s answer."""

    replies: list[ReplyOut]
    nextCursor: str | None


@closed
class ExpiredAnswer(TypedDict):
    """``reply.expire``'s answer."""

    expired: int


def send_out(sent: SendResult) -> SendAnswer:
    """``ccweb_send_message``'s answer: what was queued, and for ``return_and_continue`` the
    waiting request and how its reply comes back."""
    out: SendAnswer = {
        "ok": True,
        "replyMode": sent.reply_mode,
        "messageId": sent.message_id,
        "runId": sent.run_id,
        "targetConversationId": sent.target.id,
        "targetTitle": sent.target.title,
        "deliveryStatus": RunStatus.QUEUED,
    }
    if sent.request_id is not None:
        out |= {
            "requestId": sent.request_id,
            "status": ReplyStatus.WAITING,
            "replyDelivery": "automatic",
            "sourceAutoRun": True,
        }
    return out


def created_conversation_out(created: CreatedConversation) -> CreatedConversationAnswer:
    """``ccweb_create_conversation``'s answer: the conversation and, when it was sent a first
    message, that send (its reply request's status as ``replyStatus``)."""
    out: CreatedConversationAnswer = {
        "ok": True,
        "conversationId": created.conversation_id,
        "title": created.title,
    }
    sent = created.sent
    if sent is not None:
        shown = send_out(sent)
        out |= {
            "replyMode": shown["replyMode"],
            "messageId": shown["messageId"],
            "runId": shown["runId"],
            "deliveryStatus": shown["deliveryStatus"],
        }
        if sent.request_id is not None:
            out |= {
                "requestId": shown["requestId"],
                "replyStatus": shown["status"],
                "replyDelivery": shown["replyDelivery"],
                "sourceAutoRun": shown["sourceAutoRun"],
            }
    return out


def pending_reply_answer_out(found: ReplyRequest | list[ReplyRequest]) -> PendingReplyToolAnswer:
    """``ccweb_get_pending_reply``'s answer: the one request asked for, or ``{replies, count}``."""
    if isinstance(found, ReplyRequest):
        return reply_out(found)
    return {"replies": [reply_out(row) for row in found], "count": len(found)}


def reply_page_out(page: ReplyPage) -> ReplyPageAnswer:
    """``reply.list``'s answer: ``{replies, nextCursor}``."""
    return {"replies": [reply_out(row) for row in page.replies], "nextCursor": page.next_cursor}


def expired_out(expired: int) -> ExpiredAnswer:
    """``reply.expire``'s answer: how many requests it failed."""
    return {"expired": expired}
