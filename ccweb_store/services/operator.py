"""What the operator's commands show, as host API methods (``operator.*``): conversations
with their running state and open requests, the pending replies with their target runs, one
request's story. ``ccweb-store conversations`` and ``replies`` print these results whether
they read the database or a running server's ``/rpc`` (``--server``), so both ways show the
same thing. Everything here only reads.
"""

from __future__ import annotations

from dataclasses import dataclass

from ccweb_store.domain.host_calls import (
    ListRuns,
    OperatorConversation,
    OperatorConversations,
    OperatorPendingReplies,
    OperatorReplyStory,
)
from ccweb_store.services import debugging
from ccweb_store.services.runs import list_runs
from ccweb_store.store.repositories.debugging import ActivityRow, PendingReplyRow
from ccweb_store.store.rows import Conversation, Run
from ccweb_store.store.uow import Store

DEFAULT_CONVERSATIONS = 100
DEFAULT_PENDING = 100
#: Runs shown with one conversation, newest first.
CONVERSATION_RUNS = 10


@dataclass(frozen=True, slots=True)
class ConversationState:
    """A conversation as the operator sees it: its row and its ``conversation_activity`` row
    (its active run, its messages, its open requests; None: the view has none for it)."""

    row: Conversation
    activity: ActivityRow | None


@dataclass(frozen=True, slots=True)
class ConversationsPage:
    """``operator.conversations``: conversations newest activity first, and whether more
    match."""

    conversations: list[ConversationState]
    has_more: bool


@dataclass(frozen=True, slots=True)
class ConversationDetail:
    """``operator.conversation``: one conversation, its open requests on either side (oldest
    first) and its newest runs."""

    conversation: ConversationState
    open_requests: list[PendingReplyRow]
    runs: list[Run]


@dataclass(frozen=True, slots=True)
class PendingReplies:
    """``operator.pendingReplies``: the open requests, and when one conversation was asked
    about (``conversation_asked``), its activity (None: it does not exist)."""

    replies: list[PendingReplyRow]
    conversation_asked: bool
    activity: ActivityRow | None


async def list_conversations(store: Store, query: OperatorConversations) -> ConversationsPage:
    """``operator.conversations``: conversations, newest activity first (archived ones only
    with ``includeArchived``; ``query`` matches id or title)."""
    async with store.read_uow() as uow:
        rows, has_more = await uow.sessions.search(
            limit=query.limit, query=query.query, include_archived=query.include_archived
        )
    activity = await debugging.activities_of(store, [row.id for row in rows])
    return ConversationsPage(
        [ConversationState(row, activity.get(row.id)) for row in rows], has_more
    )


async def show_conversation(store: Store, call: OperatorConversation) -> ConversationDetail:
    """``operator.conversation``: one conversation (``conversation_not_found``), its open
    requests on either side (oldest first) and its newest runs."""
    session_id = call.id
    async with store.read_uow() as uow:
        row = await uow.sessions.require(session_id)
    activity = await debugging.activity_of(store, session_id)
    pending = await debugging.list_pending_replies(store, conversation_id=session_id)
    runs = await list_runs(store, ListRuns(session_id=session_id, limit=CONVERSATION_RUNS))
    return ConversationDetail(ConversationState(row, activity), pending, runs)


async def pending_replies(store: Store, query: OperatorPendingReplies) -> PendingReplies:
    """``operator.pendingReplies``: open requests from the ``pending_replies`` view, oldest
    first, filtered by ``status`` (a list), ``sessionId`` (either side) and
    ``olderThanSeconds``, and with ``sessionId`` that conversation's activity."""
    statuses, session_id = query.status, query.session_id
    older_than, limit = query.older_than_seconds, query.limit
    pending = await debugging.list_pending_replies(
        store,
        statuses=statuses,
        conversation_id=session_id,
        older_than_seconds=older_than,
        limit=limit,
    )
    activity = None
    if session_id is not None:
        activity = await debugging.activity_of(store, session_id)
    return PendingReplies(pending, session_id is not None, activity)


async def reply_story(store: Store, call: OperatorReplyStory) -> debugging.ReplyStory:
    """``operator.replyStory``: one request, every run that worked on it and the messages
    on both sides (``request_not_found``)."""
    return await debugging.reply_story(store, call.request_id)
