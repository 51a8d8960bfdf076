"""What the operator's commands show, as host API methods (``operator.*``): conversations
with their running state and open requests, the pending replies with their target runs, one
request's story. ``ccweb-store conversations`` and ``replies`` print these results whether
they read the database or a running server's ``/rpc`` (``--server``), so both ways show the
same thing. Everything here only reads.
"""

from __future__ import annotations

from ccweb_store.contract.operator import (
    Activity,
    ConversationDetail,
    ConversationsPage,
    ConversationState,
    OperatorConversation,
    OperatorConversations,
    OperatorPendingReplies,
    PendingReplies,
    PendingReply,
)
from ccweb_store.contract.runs import ListRuns
from ccweb_store.services import debugging
from ccweb_store.services.runs import list_runs
from ccweb_store.store.uow import Store

DEFAULT_CONVERSATIONS = 100
DEFAULT_PENDING = 100
#: Runs shown with one conversation, newest first.
CONVERSATION_RUNS = 10


async def list_conversations(store: Store, query: OperatorConversations) -> ConversationsPage:
    """``operator.conversations``: conversations, newest activity first (archived ones only
    with ``includeArchived``; ``query`` matches id or title)."""
    async with store.read_uow() as uow:
        rows, has_more = await uow.sessions.search(
            limit=query.limit, query=query.query, include_archived=query.include_archived
        )
    activity = await debugging.activities_of(store, [row.id for row in rows])
    states = [ConversationState.of(row, activity.get(row.id)) for row in rows]
    return ConversationsPage(conversations=states, count=len(states), has_more=has_more)


async def show_conversation(store: Store, call: OperatorConversation) -> ConversationDetail:
    """``operator.conversation``: one conversation (``conversation_not_found``), its open
    requests on either side (oldest first) and its newest runs."""
    session_id = call.id
    async with store.read_uow() as uow:
        row = await uow.sessions.require(session_id)
    activity = await debugging.activity_of(store, session_id)
    pending = await debugging.list_pending_replies(store, conversation_id=session_id)
    runs = await list_runs(store, ListRuns(session_id=session_id, limit=CONVERSATION_RUNS))
    return ConversationDetail(
        conversation=ConversationState.of(row, activity),
        open_requests=[PendingReply.of(item) for item in pending],
        runs=runs.runs,
    )


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
    replies = [PendingReply.of(item) for item in pending]
    if session_id is None:
        return PendingReplies(replies=replies, count=len(replies))
    activity = await debugging.activity_of(store, session_id)
    conversation = Activity.of(activity) if activity is not None else None
    return PendingReplies(replies=replies, count=len(replies), conversation=conversation)


#: ``operator.replyStory``: one request, every run that worked on it and the messages on
#: both sides (``request_not_found``).
reply_story = debugging.reply_story
