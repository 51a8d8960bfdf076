"""The answers about conversations and their messages: ``session.*``, ``message.*``,
``ccweb_list_conversations``, ``ccweb_list_user_inputs``."""

from __future__ import annotations

from typing import Any

from ccweb_store.domain.timestamps import iso
from ccweb_store.protocol.shapes.objects import message_out, session_out
from ccweb_store.services.conversations import (
    ConversationListing,
    MessagesAfter,
    MessagesBefore,
    SessionPage,
    SessionView,
)
from ccweb_store.services.user_inputs import UserInputs


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
