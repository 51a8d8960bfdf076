"""Conversations and their messages: ``ccweb_list_conversations`` and the host's
``session.*`` / ``message.*`` methods (SPEC §2.3, §3).

Each takes its call's input model, owns its transaction and returns its output model.
"""

from __future__ import annotations

from ccweb_store.contract.messages import (
    AppendMessage,
    ListMessages,
    MessagesAfter,
    MessagesBefore,
    RecentMessages,
)
from ccweb_store.contract.objects import Message, Session
from ccweb_store.contract.sessions import (
    ArchiveSession,
    CreateSession,
    GetSession,
    ListSessions,
    SessionPage,
    UpdateSession,
)
from ccweb_store.contract.tool_answers import ConversationListing, ListedConversation
from ccweb_store.contract.tools import QUERY_MAX_CHARS, ListConversations
from ccweb_store.domain import json_values
from ccweb_store.domain.content import text_of
from ccweb_store.domain.context import Source
from ccweb_store.domain.timestamps import utcnow
from ccweb_store.store.uow import Store

#: The longest ``query`` of a conversation search (SQLite refuses LIKE patterns over
#: 50,000 bytes; no title needs a search of more than this).
MAX_QUERY_CHARS = QUERY_MAX_CHARS


async def list_conversations(
    store: Store, source: Source, args: ListConversations
) -> ConversationListing:
    """``ccweb_list_conversations``: metadata of the newest-active conversations, no text."""
    async with store.read_uow() as uow:
        rows, has_more = await uow.sessions.search(
            limit=args.limit, query=args.query, include_archived=args.include_archived
        )
        ids = [row.id for row in rows]
        running = set(await uow.runs.running_for_sessions(ids))
        counts = await uow.messages.count(ids)
    listed = [
        ListedConversation(
            conversation_id=row.id,
            title=row.title,
            agent=row.agent,
            created_at=row.created_at,
            updated_at=row.updated_at,
            running=row.id in running,
            message_count=counts.get(row.id, 0),
            is_source=row.id == source.session_id,
        )
        for row in rows
    ]
    return ConversationListing(conversations=listed, has_more=has_more)


async def create_session(store: Store, call: CreateSession) -> Session:
    """``session.create``: a new conversation (``conversation_exists`` on a taken id)."""
    async with store.uow() as uow:
        row = await uow.sessions.create(call.id, title=call.title, agent=call.agent, cwd=call.cwd)
        await uow.commit()
    return Session.of(row)


async def get_session(store: Store, call: GetSession) -> Session:
    """``session.get``: one conversation with its active run."""
    async with store.read_uow() as uow:
        row = await uow.sessions.require(call.id)
        active = await uow.runs.active_for_sessions([row.id])
    return Session.of(row, active.get(row.id))


async def archive_session(store: Store, call: ArchiveSession) -> Session:
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
    return Session.of(row, active.get(row.id))


async def update_session(store: Store, call: UpdateSession) -> Session:
    """``session.update``: set the agent session the conversation's next run resumes, or clear
    it so that the next run starts a new one (a host that runs agents itself keeps it here)."""
    async with store.uow() as uow:
        row = await uow.sessions.set_agent_session(call.id, call.agent_session_id)
        if row is None:
            await uow.sessions.require(call.id)  # conversation_not_found
        assert row is not None
        active = await uow.runs.active_for_sessions([row.id])
        await uow.commit()
    return Session.of(row, active.get(row.id))


async def list_sessions(store: Store, query: ListSessions) -> SessionPage:
    """``session.list``: newest created first, a page at a time."""
    async with store.read_uow() as uow:
        rows, next_cursor = await uow.sessions.list_page(limit=query.limit, cursor=query.cursor)
        active = await uow.runs.active_for_sessions(row.id for row in rows)
    sessions = [Session.of(row, active.get(row.id)) for row in rows]
    return SessionPage(sessions=sessions, next_cursor=next_cursor)


async def append_message(store: Store, call: AppendMessage) -> Message:
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
    return Message.model_validate(row)


async def recent_messages(store: Store, query: RecentMessages) -> MessagesBefore:
    """``message.recent``: the ``limit`` newest messages before ``beforeSeq`` (none: the
    newest of all), of ``role`` if given, oldest first, and where the page before starts."""
    session_id, before_seq, limit, role = (
        query.session_id,
        query.before_seq,
        query.limit,
        query.role,
    )
    async with store.read_uow() as uow:
        conversation = await uow.sessions.require(session_id)
        rows = await uow.messages.list_before(
            session_id, before_seq=before_seq, limit=limit + 1, role=role
        )
    older = len(rows) > limit
    rows = rows[:limit]
    return MessagesBefore(
        messages=[Message.model_validate(row) for row in rows[::-1]],
        next_before_seq=rows[-1].seq if older else None,
        title=conversation.title,
    )


async def list_messages(store: Store, query: ListMessages) -> MessagesAfter:
    """``message.list``: messages after ``afterSeq`` in order, and where the next page starts."""
    session_id, after_seq, limit = query.session_id, query.after_seq, query.limit
    async with store.read_uow() as uow:
        await uow.sessions.require(session_id)
        rows = await uow.messages.list_after(session_id, after_seq=after_seq, limit=limit)
    return MessagesAfter(
        messages=[Message.model_validate(row) for row in rows],
        next_after_seq=rows[-1].seq if rows else after_seq,
    )
