"""What the operator's commands show, as host API methods (``operator.*``): conversations
with their running state and open requests, the pending replies with their target runs, one
request's story. ``ccweb-store conversations`` and ``replies`` print these results whether
they read the database or a running server's ``/rpc`` (``--server``), so both ways show the
same thing. Everything here only reads.
"""

from __future__ import annotations

from typing import Any

from ccweb_store.domain.host_calls import (
    ListRuns,
    OperatorConversation,
    OperatorConversations,
    OperatorPendingReplies,
    OperatorReplyStory,
)
from ccweb_store.domain.kinds import RunStatus
from ccweb_store.domain.timestamps import iso
from ccweb_store.services import debugging
from ccweb_store.services.debugging import activity_out, pending_reply_out
from ccweb_store.services.runs import list_runs
from ccweb_store.services.schemas import run_out, session_fields
from ccweb_store.store.models import SessionRow
from ccweb_store.store.repositories.debugging import ActivityRow
from ccweb_store.store.uow import Store

DEFAULT_CONVERSATIONS = 100
DEFAULT_PENDING = 100
#: Runs shown with one conversation, newest first.
CONVERSATION_RUNS = 10


def conversation_out(row: SessionRow, activity: ActivityRow | None) -> dict[str, Any]:
    """A conversation as the operator sees it: the Session's fields, its active run, its
    messages and the open requests it made (``openAsSource``) and must answer
    (``openAsTarget``), by status."""
    active_run = activity_out(activity)["activeRun"] if activity is not None else None
    return session_fields(row) | {
        "archivedAt": iso(row.archived_at),
        "running": active_run is not None and active_run["status"] == RunStatus.RUNNING,
        "activeRun": active_run,
        "messageCount": activity.message_count if activity is not None else 0,
        "lastMessageAt": iso(activity.last_message_at) if activity is not None else None,
        "openAsSource": activity.open_as_source if activity is not None else {},
        "openAsTarget": activity.open_as_target if activity is not None else {},
    }


async def list_conversations(store: Store, query: OperatorConversations) -> dict[str, Any]:
    """``operator.conversations``: conversations, newest activity first (archived ones only
    with ``includeArchived``; ``query`` matches id or title): ``{conversations, count,
    hasMore}``."""
    async with store.read_uow() as uow:
        rows, has_more = await uow.sessions.search(
            limit=query.limit, query=query.query, include_archived=query.include_archived
        )
    activity = await debugging.activities_of(store, [row.id for row in rows])
    conversations = [conversation_out(row, activity.get(row.id)) for row in rows]
    return {"conversations": conversations, "count": len(conversations), "hasMore": has_more}


async def show_conversation(store: Store, call: OperatorConversation) -> dict[str, Any]:
    """``operator.conversation``: one conversation (``conversation_not_found``), its open
    requests on either side (oldest first) and its newest runs: ``{conversation,
    openRequests, runs}``."""
    session_id = call.id
    async with store.read_uow() as uow:
        row = await uow.sessions.require(session_id)
    activity = await debugging.activity_of(store, session_id)
    pending = await debugging.list_pending_replies(store, conversation_id=session_id)
    runs = await list_runs(store, ListRuns(session_id=session_id, limit=CONVERSATION_RUNS))
    return {
        "conversation": conversation_out(row, activity),
        "openRequests": [pending_reply_out(item) for item in pending],
        "runs": [run_out(run) for run in runs],
    }


async def pending_replies(store: Store, query: OperatorPendingReplies) -> dict[str, Any]:
    """``operator.pendingReplies``: open requests from the ``pending_replies`` view, oldest
    first, filtered by ``status`` (a list), ``sessionId`` (either side) and
    ``olderThanSeconds``: ``{replies, count}``, and with ``sessionId`` that conversation's
    activity (``conversation``, null when it does not exist)."""
    statuses, session_id = query.status, query.session_id
    older_than, limit = query.older_than_seconds, query.limit
    pending = await debugging.list_pending_replies(
        store,
        statuses=statuses,
        conversation_id=session_id,
        older_than_seconds=older_than,
        limit=limit,
    )
    result: dict[str, Any] = {
        "replies": [pending_reply_out(item) for item in pending],
        "count": len(pending),
    }
    if session_id is not None:
        activity = await debugging.activity_of(store, session_id)
        result["conversation"] = activity_out(activity) if activity is not None else None
    return result


async def reply_story(store: Store, call: OperatorReplyStory) -> dict[str, Any]:
    """``operator.replyStory``: one request, every run that worked on it and the messages
    on both sides (``request_not_found``)."""
    story = await debugging.reply_story(store, call.request_id)
    return story.to_json()
