"""The wire's camelCase JSON, shaped from what the services return: the objects of SPEC §3
(Session, Message, Reply, Run), credentials, and the answers of the tools and host methods.

Services speak Python (rows and small dataclasses); the edges (``http/rpc.py``'s table, the
tool registry, the console, the CLI's ``--json``) shape their results here, so nothing else
decides how an answer looks on the wire.
"""

from __future__ import annotations

from typing import Any

from ccweb_store.domain.kinds import ReplyStatus, RunStatus
from ccweb_store.domain.timestamps import iso
from ccweb_store.services.conversations import (
    ConversationListing,
    MessagesAfter,
    MessagesBefore,
    SessionPage,
    SessionView,
)
from ccweb_store.services.credentials import CredentialList, MintedCredential
from ccweb_store.services.messaging import CreatedConversation, SendResult
from ccweb_store.services.prompt_forms import PromptAnswer, PromptCard
from ccweb_store.services.replies import ReplyPage
from ccweb_store.services.run_endings import Completion
from ccweb_store.services.runs import ClaimResult
from ccweb_store.services.schemas import (
    credential_out,
    message_out,
    reply_out,
    run_out,
    session_fields,
    session_out,
)
from ccweb_store.services.user_inputs import UserInputs
from ccweb_store.store.models import ReplyRequest, Run

__all__ = ["credential_out", "message_out", "reply_out", "run_out", "session_fields", "session_out"]


def runs_out(rows: list[Run]) -> dict[str, Any]:
    """``run.list``'s answer."""
    return {"runs": [run_out(row) for row in rows]}


def completion_out(result: Completion) -> dict[str, Any]:
    """The answer of ``run.complete`` and ``run.cancel``: the run, its output message, the
    replies it moved."""
    return {
        "run": run_out(result.run),
        "message": message_out(result.message) if result.message is not None else None,
        "replies": [reply_out(reply) for reply in result.replies],
    }


def minted_out(minted: MintedCredential) -> dict[str, Any]:
    """``credential.mint``'s answer: the credential, its token (shown only here) and, when
    the mint replaced a label's credentials, those it revoked."""
    out: dict[str, Any] = {"credential": credential_out(minted.row), "token": minted.token}
    if minted.revoked is not None:
        out["revoked"] = [credential_out(old) for old in minted.revoked]
    return out


def claim_out(result: ClaimResult) -> dict[str, Any]:
    """``run.claim``'s answer: ``{run}`` (None: nothing to claim), with ``conversation`` and
    ``credential`` when the claim was asked for them and took a run."""
    if result.run is None:
        return {"run": None}
    out: dict[str, Any] = {"run": run_out(result.run)}
    if result.conversation is not None:
        out["conversation"] = session_out(result.conversation)
    if result.credential is not None:
        out["credential"] = minted_out(result.credential)
    return out


def credentials_out(listed: CredentialList) -> dict[str, Any]:
    """``credential.list``'s answer: each credential active or not as of its reading."""
    return {"credentials": [credential_out(row, now=listed.as_of) for row in listed.rows]}


# ---- conversations and messages ------------------------------------------------------------


def session_view_out(view: SessionView) -> dict[str, Any]:
    """A Session with its active run (``session.get``, ``session.create``, ``session.archive``)."""
    return session_out(view.row, active_run=view.active_run)


def session_page_out(page: SessionPage) -> dict[str, Any]:
    """``session.list``'s answer: ``{sessions, nextCursor}``."""
    return {
        "sessions": [session_view_out(view) for view in page.sessions],
        "nextCursor": page.next_cursor,
    }


def messages_before_out(page: MessagesBefore) -> dict[str, Any]:
    """``message.recent``'s answer: ``{messages, nextBeforeSeq}``."""
    return {
        "messages": [message_out(row) for row in page.messages],
        "nextBeforeSeq": page.next_before_seq,
    }


def messages_after_out(page: MessagesAfter) -> dict[str, Any]:
    """``message.list``'s answer: ``{messages, nextAfterSeq}``."""
    return {
        "messages": [message_out(row) for row in page.messages],
        "nextAfterSeq": page.next_after_seq,
    }


def conversation_listing_out(listing: ConversationListing) -> dict[str, Any]:
    """``ccweb_list_conversations``'s answer: metadata only, never message text."""
    return {
        "conversations": [
            {
                "conversationId": row.id,
                "title": row.title,
                "agent": row.agent,
                "createdAt": iso(row.created_at),
                "updatedAt": iso(row.updated_at),
                "running": row.id in listing.running,
                "messageCount": listing.message_counts.get(row.id, 0),
                "isSource": row.id == listing.source_id,
            }
            for row in listing.rows
        ],
        "hasMore": listing.has_more,
    }


def user_inputs_out(found: UserInputs) -> dict[str, Any]:
    """``ccweb_list_user_inputs``'s answer."""
    return {
        "conversationId": found.conversation_id,
        "limit": found.limit,
        "maxChars": found.max_chars,
        "totalChars": found.total_chars,
        "returned": len(found.inputs),
        "hasMore": found.has_more,
        "inputs": [
            {
                "messageId": item.message_id,
                "createdAt": item.created_at,
                "content": item.content,
                "contentChars": len(item.content),
                "originalChars": item.original_chars,
                "truncated": len(item.content) < item.original_chars,
            }
            for item in found.inputs
        ],
    }


# ---- sends and replies ---------------------------------------------------------------------


def send_out(sent: SendResult) -> dict[str, Any]:
    """``ccweb_send_message``'s answer: what was queued, and for ``return_and_continue`` the
    waiting request and how its reply comes back."""
    out: dict[str, Any] = {
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


def created_conversation_out(created: CreatedConversation) -> dict[str, Any]:
    """``ccweb_create_conversation``'s answer: the conversation and, when it was sent a first
    message, that send (its reply request's status as ``replyStatus``)."""
    out: dict[str, Any] = {
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


def pending_reply_answer_out(found: ReplyRequest | list[ReplyRequest]) -> dict[str, Any]:
    """``ccweb_get_pending_reply``'s answer: the one request asked for, or ``{replies, count}``."""
    if isinstance(found, ReplyRequest):
        return reply_out(found)
    return {"replies": [reply_out(row) for row in found], "count": len(found)}


def reply_page_out(page: ReplyPage) -> dict[str, Any]:
    """``reply.list``'s answer: ``{replies, nextCursor}``."""
    return {"replies": [reply_out(row) for row in page.replies], "nextCursor": page.next_cursor}


def expired_out(expired: int) -> dict[str, Any]:
    """``reply.expire``'s answer: how many requests it failed."""
    return {"expired": expired}


# ---- prompt forms --------------------------------------------------------------------------


def prompt_card_out(card: PromptCard) -> dict[str, Any]:
    """``ccweb_prompt_user``'s answer."""
    return {"ok": True, "promptId": card.prompt_id, "messageId": card.message_id}


def prompt_answer_out(answer: PromptAnswer) -> dict[str, Any]:
    """``prompt.respond``'s answer: the user message with the answers and the run it queued."""
    return {"message": message_out(answer.message), "run": run_out(answer.run)}
