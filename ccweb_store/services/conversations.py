"""Conversations and their messages: ``ccweb_list_conversations`` and the host's
``session.*`` / ``message.*`` methods (SPEC §2.3, §3).

Each host method is ``async def fn(store, params) -> result`` and owns its transaction.
"""

from __future__ import annotations

from typing import Any

from ccweb_store.domain import json_values
from ccweb_store.domain.content import text_of
from ccweb_store.domain.context import Source
from ccweb_store.domain.host_calls import (
    AppendMessage,
    ArchiveSession,
    CreateSession,
    GetSession,
    ListMessages,
    ListSessions,
    RecentMessages,
)
from ccweb_store.domain.timestamps import iso, utcnow
from ccweb_store.domain.tool_arguments import QUERY_MAX_CHARS, ListConversations
from ccweb_store.services.schemas import message_out, session_out
from ccweb_store.store.uow import Store

#: The longest ``query`` of a conversation search (SQLite refuses LIKE patterns over
#: 50,000 bytes; no title needs a search of more than this).
MAX_QUERY_CHARS = QUERY_MAX_CHARS


async def list_conversations(
    store: Store, source: Source, args: ListConversations
) -> dict[str, Any]:
    """``ccweb_list_conversations``: metadata of the newest-active conversations, no text."""
    async with store.read_uow() as uow:
        rows, has_more = await uow.sessions.search(
            limit=args.limit, query=args.query, include_archived=args.include_archived
        )
        ids = [row.id for row in rows]
        running = await uow.runs.running_for_sessions(ids)
        counts = await uow.messages.count(ids)
    return {
        "conversations": [
            {
                "conversationId": row.id,
                "title": row.title,
                "agent": row.agent,
                "createdAt": iso(row.created_at),
                "updatedAt": iso(row.updated_at),
                "running": row.id in running,
                "messageCount": counts.get(row.id, 0),
                "isSource": row.id == source.session_id,
            }
            for row in rows
        ],
        "hasMore": has_more,
    }


async def create_session(store: Store, call: CreateSession) -> dict[str, Any]:
    """``session.create``: a new conversation (``conversation_exists`` on a taken id)."""
    async with store.uow() as uow:
        row = await uow.sessions.create(call.id, title=call.title, agent=call.agent, cwd=call.cwd)
        await uow.commit()
    return session_out(row)


async def get_session(store: Store, call: GetSession) -> dict[str, Any]:
    """``session.get``: one conversation with its active run."""
    async with store.read_uow() as uow:
        row = await uow.sessions.require(call.id)
        active = await uow.runs.active_for_sessions([row.id])
    return session_out(row, active_run=active.get(row.id))


async def archive_session(store: Store, call: ArchiveSession) -> dict[str, Any]:
    """``session.archive``: hide a conversation from ``ccweb_list_conversations`` and the
    operator's list (``archived: false`` brings it back). Nothing else changes: its messages,
    runs and reply requests stay, and it can still be written to and run."""
    session_id, archived = call.id, call.archived
    async with store.uow() as uow:
        row = await uow.sessions.set_archived(session_id, utcnow() if archived else None)
        if row is None:
            await uow.sessions.require(session_id)  # conversation_not_found
        assert row is not None
        active = await uow.runs.active_for_sessions([row.id])
        await uow.commit()
    return session_out(row, active_run=active.get(row.id))


async def list_sessions(store: Store, query: ListSessions) -> dict[str, Any]:
    """``session.list``: newest created first, ``{sessions, nextCursor}``."""
    async with store.read_uow() as uow:
        rows, next_cursor = await uow.sessions.list_page(limit=query.limit, cursor=query.cursor)
        active = await uow.runs.active_for_sessions(row.id for row in rows)
    return {
        "sessions": [session_out(row, active_run=active.get(row.id)) for row in rows],
        "nextCursor": next_cursor,
    }


async def append_message(store: Store, call: AppendMessage) -> dict[str, Any]:
    """``message.append``: add a message at the session's next ``seq``.

    ``content`` may be text or cc-web's list of ``{type: "text", text}`` blocks; blocks are
    stored as their joined text and kept verbatim in ``metadata.contentBlocks``.
    """
    session_id, role, metadata, message_id = call.session_id, call.role, call.metadata, call.id
    content = call.content
    if isinstance(content, list):
        metadata = {**(metadata or {}), "contentBlocks": content}
        content = text_of(content)
    if metadata is not None:
        json_values.require_storable(metadata, "metadata")
    async with store.uow() as uow:
        row = await uow.messages.append(
            session_id, role, content, metadata=metadata, id=message_id or None
        )
        await uow.commit()
    return message_out(row)


async def recent_messages(store: Store, query: RecentMessages) -> dict[str, Any]:
    """``message.recent``: the ``limit`` newest messages before ``beforeSeq`` (none: the
    newest of all), of ``role`` if given, oldest first; ``{messages, nextBeforeSeq}``, where
    ``nextBeforeSeq`` asks for the page before (None: no older message)."""
    session_id, before_seq, limit, role = (
        query.session_id,
        query.before_seq,
        query.limit,
        query.role,
    )
    async with store.read_uow() as uow:
        await uow.sessions.require(session_id)
        rows = await uow.messages.list_before(
            session_id, before_seq=before_seq, limit=limit + 1, role=role
        )
    older = len(rows) > limit
    rows = rows[:limit]
    return {
        "messages": [message_out(row) for row in reversed(rows)],
        "nextBeforeSeq": rows[-1].seq if older else None,
    }


async def list_messages(store: Store, query: ListMessages) -> dict[str, Any]:
    """``message.list``: messages after ``afterSeq`` in order, ``{messages, nextAfterSeq}``."""
    session_id, after_seq, limit = query.session_id, query.after_seq, query.limit
    async with store.read_uow() as uow:
        await uow.sessions.require(session_id)
        rows = await uow.messages.list_after(session_id, after_seq=after_seq, limit=limit)
    return {
        "messages": [message_out(row) for row in rows],
        "nextAfterSeq": rows[-1].seq if rows else after_seq,
    }
