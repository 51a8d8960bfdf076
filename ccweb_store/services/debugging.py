"""Read-side queries for debugging pending replies: the views, a request's story.

The ``pending_replies`` and ``conversation_activity`` views come from migration 0003 and are
read by ``repositories.debugging``. Everything in this module only reads.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime, timedelta

from ccweb_store.contract.objects import Message, Reply, Run
from ccweb_store.contract.operator import OperatorReplyStory, ReplyStory
from ccweb_store.domain import errors
from ccweb_store.domain.errors import InvalidInput, NotFound
from ccweb_store.domain.ids import (
    OPEN_REPLY_STATUSES,
    validate_choice,
    validate_session_id,
)
from ccweb_store.domain.rows import ActivityRow, PendingReplyRow
from ccweb_store.domain.timestamps import utcnow
from ccweb_store.store.uow import Store


async def activity_of(store: Store, session_id: str) -> ActivityRow | None:
    """The conversation's row of ``conversation_activity``, or None when it does not exist."""
    validate_session_id(session_id)
    return (await activities_of(store, [session_id])).get(session_id)


async def activities_of(store: Store, session_ids: Sequence[str]) -> dict[str, ActivityRow]:
    """The rows of ``conversation_activity`` for these conversations, by id (those that
    exist)."""
    if not session_ids:
        return {}
    async with store.read_uow() as uow:
        rows = await uow.debugging.activities(session_ids)
    return {row.session_id: row for row in rows}


def _cutoff(older_than_seconds: int | None, now: datetime | None) -> datetime | None:
    if older_than_seconds is None:
        return None
    return (now or utcnow()) - timedelta(seconds=older_than_seconds)


def _check_limit(limit: int) -> None:
    if limit < 1:
        raise InvalidInput(f"limit must be at least 1, got {limit}")


async def list_pending_replies(
    store: Store,
    *,
    statuses: Sequence[str] | None = None,
    conversation_id: str | None = None,
    older_than_seconds: int | None = None,
    limit: int = 100,
    now: datetime | None = None,
) -> list[PendingReplyRow]:
    """Open requests (``waiting``/``ready``/``failed``) from the view, oldest first.

    ``conversation_id`` matches either side; ``older_than_seconds`` keeps requests created
    at least that long ago.
    """
    _check_limit(limit)
    if statuses:
        for status in statuses:
            validate_choice(status, OPEN_REPLY_STATUSES, errors.INVALID_STATUS, "open status")
    if conversation_id is not None:
        validate_session_id(conversation_id)
    async with store.read_uow() as uow:
        return await uow.debugging.pending_replies(
            statuses=statuses,
            conversation_id=conversation_id,
            created_before=_cutoff(older_than_seconds, now),
            limit=limit,
        )


async def reply_story(store: Store, call: OperatorReplyStory) -> ReplyStory:
    """The request, every run naming it (oldest first), and the messages that carried it.

    The reply message is the one ``reply_message_id`` names, else the first source message
    whose ``metadata.replyToRequestId`` is this request. Raises ``request_not_found``.
    """
    request_id = call.request_id
    async with store.read_uow() as uow:
        reply = await uow.replies.get(request_id)
        if reply is None:
            raise NotFound(
                f"reply request {request_id!r} does not exist", code=errors.REQUEST_NOT_FOUND
            )
        runs = await uow.runs.for_request(request_id)
        request_message = await uow.messages.get(reply.message_id) if reply.message_id else None
        source_messages = await uow.messages.replies_to_request(
            reply.source_conversation_id, request_id
        )
        reply_message = source_messages[0] if source_messages else None
        if reply.reply_message_id:
            reply_message = await uow.messages.get(reply.reply_message_id)
            if reply_message is not None and reply_message not in source_messages:
                source_messages.append(reply_message)
    return ReplyStory(
        reply=Reply.model_validate(reply),
        runs=[Run.model_validate(run) for run in runs],
        request_message=Message.model_validate(request_message) if request_message else None,
        reply_message=Message.model_validate(reply_message) if reply_message else None,
        source_messages=[Message.model_validate(message) for message in source_messages],
    )
