"""The answers about conversations and their messages: ``session.*``, ``message.*``,
``ccweb_list_conversations``, ``ccweb_list_user_inputs``."""

from __future__ import annotations

from typing_extensions import TypedDict

from ccweb_store.domain.timestamps import iso
from ccweb_store.protocol.shapes.objects import MessageOut, SessionOut, message_out, session_out
from ccweb_store.protocol.shapes.wire import closed
from ccweb_store.services.conversations import (
    ConversationListing,
    MessagesAfter,
    MessagesBefore,
    SessionPage,
    SessionView,
)
from ccweb_store.services.user_inputs import UserInputs


@closed
class SessionPageAnswer(TypedDict):
    """``session.list``'s answer."""

    sessions: list[SessionOut]
    nextCursor: str | None


@closed
class MessagesBeforeAnswer(TypedDict):
    """``message.recent``'s answer."""

    messages: list[MessageOut]
    nextBeforeSeq: int | None
    title: str | None


@closed
class MessagesAfterAnswer(TypedDict):
    """``message.list``'s answer."""

    messages: list[MessageOut]
    nextAfterSeq: int


@closed
class ListedConversationOut(TypedDict):
    """A conversation as ``ccweb_list_conversations`` lists it: metadata only."""

    conversationId: str
    title: str | None
    agent: str | None
    createdAt: str
    updatedAt: str
    running: bool
    messageCount: int
    isSource: bool


@closed
class ConversationListingAnswer(TypedDict):
    """``ccweb_list_conversations``' answer."""

    conversations: list[ListedConversationOut]
    hasMore: bool


@closed
class UserInputOut(TypedDict):
    """One of the user's messages as ``ccweb_list_user_inputs`` returns it."""

    messageId: str
    createdAt: str | None
    content: str
    contentChars: int
    originalChars: int
    truncated: bool


@closed
class UserInputsAnswer(TypedDict):
    """``ccweb_list_user_inputs``' answer."""

    conversationId: str
    limit: int
    maxChars: int
    totalChars: int
    returned: int
    hasMore: bool
    inputs: list[UserInputOut]


def session_view_out(view: SessionView) -> SessionOut:
    """A Session with its active run (``session.get``, ``session.create``, ``session.archive``)."""
    return session_out(view.row, active_run=view.active_run)


def session_page_out(page: SessionPage) -> SessionPageAnswer:
    """``session.list``'s answer: ``{sessions, nextCursor}``."""
    return {
        "sessions": [session_view_out(view) for view in page.sessions],
        "nextCursor": page.next_cursor,
    }


def messages_before_out(page: MessagesBefore) -> MessagesBeforeAnswer:
    """``message.recent``'s answer: ``{messages, nextBeforeSeq, title}``."""
    return {
        "messages": [message_out(row) for row in page.messages],
        "nextBeforeSeq": page.next_before_seq,
        "title": page.title,
    }


def messages_after_out(page: MessagesAfter) -> MessagesAfterAnswer:
    """``message.list``'s answer: ``{messages, nextAfterSeq}``."""
    return {
        "messages": [message_out(row) for row in page.messages],
        "nextAfterSeq": page.next_after_seq,
    }


def conversation_listing_out(listing: ConversationListing) -> ConversationListingAnswer:
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


def user_inputs_out(found: UserInputs) -> UserInputsAnswer:
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
