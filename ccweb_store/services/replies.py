"""The host API of reply requests (``reply.*``): list, get, retry, fail, expire. How a reply
moves and reaches its source is ``reply_delivery``'s.

Retry (``reply.retry``) by state:

- ``ready``: deliver now (it stays ``ready`` while the source is running).
- ``failed`` with reply text (the target answered but delivery failed, was failed by hand, or
  the answer arrived after the request expired): back to ``ready``, then delivered.
- ``failed`` without reply text, and ``waiting`` whose target run is gone: ask the target
  again, i.e. queue a new ``cross_conversation`` run on it with the same target prompt
  (``failed`` goes back to ``waiting``, unsettled, so a new failure is notified). The prompt
  holds the request's question (``prompts.retried_question``); a request that stores none (a
  legacy one whose message is gone) is asked with the ``message`` the retry gives, which is
  refused when the request has its question or the retry asks nothing.
- ``returned``: nothing to retry (``invalid_state``).
- In any other state, while a target run for the request is still queued or running (the
  request was failed by hand or expired under it): ``target_busy``, nothing changed. That
  run's end answers the request; retrying then delivers its answer once.

Fail (``reply.fail``) moves ``waiting`` or ``ready`` to ``failed`` with the given reason and
delivers the notice; a ``failed`` request is left as it is; ``returned`` is ``invalid_state``.
Expire (``reply.expire``) fails only ``waiting`` requests made before the cutoff, with
``last_error = "expired"``; ``expirable_replies`` lists the same selection without writing.
"""

from __future__ import annotations

from datetime import datetime, timedelta

from ccweb_store.contract.objects import Reply
from ccweb_store.contract.replies import (
    Expired,
    ExpireReplies,
    FailReply,
    GetReply,
    ListReplies,
    ReplyPage,
    RetryReply,
)
from ccweb_store.domain import errors
from ccweb_store.domain.errors import Conflict, InvalidInput, NotFound
from ccweb_store.domain.kinds import ReplyStatus, RunKind, RunStatus
from ccweb_store.domain.prompts import (
    RETURN_AND_CONTINUE,
    retried_question,
    retry_asks_again,
    target_prompt,
)
from ccweb_store.domain.rows import ReplyRequest
from ccweb_store.domain.timestamps import utcnow
from ccweb_store.services.messaging import check_content_length
from ccweb_store.services.reply_delivery import conversation_title, deliver_reply
from ccweb_store.store.uow import Store, UnitOfWork

EXPIRED = "expired"
EXPIRE_BATCH = 200


async def list_replies(store: Store, query: ListReplies) -> ReplyPage:
    """``reply.list``: requests oldest first, by status and/or conversation (either side)."""
    async with store.read_uow() as uow:
        rows, next_cursor = await uow.replies.list_page(
            statuses=query.status,
            session_id=query.session_id,
            limit=query.limit,
            cursor=query.cursor,
        )
    return ReplyPage(replies=[Reply.model_validate(row) for row in rows], next_cursor=next_cursor)


async def get_reply(store: Store, call: GetReply) -> Reply:
    """``reply.get``: one request by id (``request_not_found`` otherwise)."""
    async with store.read_uow() as uow:
        return Reply.model_validate(await uow.replies.require(call.request_id))


async def retry_reply(store: Store, call: RetryReply) -> Reply:
    """``reply.retry``: re-attempt the request (what that means per state: module docstring)."""
    request_id = call.request_id
    if call.message is not None:
        check_content_length(store, call.message, "the message")
    async with store.uow() as uow:
        request = await _lock_request(uow, request_id)
        if request.status == ReplyStatus.RETURNED:
            raise Conflict(
                f"reply request {request_id!r} was already returned; there is nothing to retry",
                code=errors.INVALID_STATE,
            )
        await _refuse_while_answering(uow, request)
        if call.message is not None and not retry_asks_again(request.status, request.reply_text):
            raise InvalidInput(
                f"reply request {request_id!r} is {request.status} with its answer: a retry "
                "delivers it and asks the target nothing, so it takes no message; retry "
                "without it"
            )
        if request.status == ReplyStatus.FAILED and request.reply_text is not None:
            request = (
                await uow.replies.transition(
                    request_id,
                    [ReplyStatus.FAILED],
                    ReplyStatus.READY,
                    last_error=None,
                    reply_message_id=None,
                    returned_at=None,
                )
                or request
            )
        if request.status == ReplyStatus.READY:
            request = (await deliver_reply(uow, request)).request
        else:
            request = await _ask_target_again(uow, request, call.message)
        await uow.commit()
        return Reply.model_validate(request)


async def _lock_request(uow: UnitOfWork, request_id: str) -> ReplyRequest:
    """The request, read again after locking its source session (the lock order of
    ``reply_delivery``)."""
    request = await uow.replies.require(request_id)
    await uow.sessions.lock(request.source_conversation_id)
    return await uow.replies.require(request_id, for_update=True)


async def _refuse_while_answering(uow: UnitOfWork, request: ReplyRequest) -> None:
    """``target_busy`` while a target run for the request is still queued or running.

    That run's end answers (or fails) the request; a retry now would queue a second run, and
    the two ends would race: a second notice and auto-run at the source, and the retry's
    answer lost. The caller holds the request's lock, so no retry queues a run meanwhile.
    """
    open_runs = await uow.runs.open_for_request(request.request_id)
    if not open_runs:
        return
    run = open_runs[0]
    held = "" if run.worker_id is None else f", held by worker {run.worker_id!r}"
    force = " --force" if run.status == RunStatus.RUNNING else ""
    end = f"`ccweb-store runs cancel {run.id}{force}`, or run.cancel"
    raise Conflict(
        f"reply request {request.request_id!r} is still being answered: run {run.id!r} in the "
        f"target {request.target_conversation_id!r} is {run.status}{held}. Nothing was "
        "changed: retry after that run ends (its end answers or fails the request), or end "
        f"it first ({end})",
        code=errors.TARGET_BUSY,
        data={
            "runId": run.id,
            "runStatus": run.status,
            "targetConversationId": request.target_conversation_id,
        },
    )


async def _ask_target_again(
    uow: UnitOfWork, request: ReplyRequest, message: str | None
) -> ReplyRequest:
    """Queue a new target run for a ``waiting`` request or an unanswered failed one (the
    caller made sure no target run for it is open), asking its question, else ``message``;
    the request, ``waiting`` again."""
    stored = None
    if request.original_request is None and request.message_id is not None:
        carried = await uow.messages.get(request.message_id)
        stored = carried.content if carried is not None else None
    question = retried_question(request.original_request, stored)
    if question is not None and message is not None:
        raise InvalidInput(
            f"reply request {request.request_id!r} has its question stored; a retry asks it "
            "again, so it takes no message: retry without it"
        )
    if await uow.sessions.get(request.target_conversation_id) is None:
        raise NotFound(
            f"the target conversation {request.target_conversation_id!r} no longer exists; "
            "fail the request instead",
            code=errors.CONVERSATION_NOT_FOUND,
        )
    if request.status == ReplyStatus.FAILED:
        waiting = await uow.replies.transition(
            request.request_id,
            [ReplyStatus.FAILED],
            ReplyStatus.WAITING,
            last_error=None,
            completed_at=None,
            reply_message_id=None,
            returned_at=None,
        )
        if waiting is None:
            raise Conflict(
                f"reply request {request.request_id!r} changed while retrying; try again",
                code=errors.INVALID_STATE,
            )
        request = waiting
    content = question if question is not None else message
    await uow.runs.enqueue_id(
        request.target_conversation_id,
        RunKind.CROSS_CONVERSATION,
        runtime_text=target_prompt(
            source_id=request.source_conversation_id,
            source_title=await conversation_title(
                uow, request.source_title, request.source_conversation_id
            ),
            content=content if content is not None else "(the original message is unavailable)",
            reply_mode=RETURN_AND_CONTINUE,
            request_id=request.request_id,
        ),
        hop_count=request.hop_count,
        reply_request_id=request.request_id,
    )
    return request


async def fail_reply(store: Store, call: FailReply) -> Reply:
    """``reply.fail``: fail a waiting or ready request with ``reason``; the source gets a notice."""
    request_id, reason = call.request_id, call.reason
    async with store.uow() as uow:
        request = await _lock_request(uow, request_id)
        if request.status == ReplyStatus.RETURNED:
            raise Conflict(
                f"reply request {request_id!r} was already returned and cannot fail",
                code=errors.INVALID_STATE,
            )
        failed = await uow.replies.transition(
            request_id,
            [ReplyStatus.WAITING, ReplyStatus.READY],
            ReplyStatus.FAILED,
            last_error=reason,
            completed_at=utcnow(),
        )
        if failed is not None:
            request = (await deliver_reply(uow, failed)).request
        await uow.commit()
        return Reply.model_validate(request)


def _expiry_cutoff(call: ExpireReplies, now: datetime | None) -> datetime:
    """The creation time before which a ``waiting`` request expires (``olderThanSeconds``)."""
    return (now or utcnow()) - timedelta(seconds=call.older_than_seconds)


async def _expirable_page(
    uow: UnitOfWork, cutoff: datetime, cursor: str | None
) -> tuple[list[ReplyRequest], str | None]:
    """One batch of what ``reply.expire`` fails: ``waiting`` requests made before ``cutoff``."""
    return await uow.replies.list_page(
        statuses=[ReplyStatus.WAITING], older_than=cutoff, limit=EXPIRE_BATCH, cursor=cursor
    )


async def expirable_replies(
    store: Store, call: ExpireReplies, *, now: datetime | None = None
) -> list[ReplyRequest]:
    """What ``expire_replies`` with these params would fail right now, oldest first; writes nothing.

    The same selection as ``expire_replies``, so a dry run lists exactly what a real run takes
    (unless a request moves in between).
    """
    cutoff = _expiry_cutoff(call, now)
    found: list[ReplyRequest] = []
    cursor: str | None = None
    async with store.read_uow() as uow:
        while True:
            rows, cursor = await _expirable_page(uow, cutoff, cursor)
            found.extend(rows)
            if cursor is None:
                return found


async def expire_replies(
    store: Store, call: ExpireReplies, *, now: datetime | None = None
) -> Expired:
    """``reply.expire``: fail ``waiting`` requests older than ``olderThanSeconds`` ("expired");
    how many it failed.

    Each batch is one transaction; each expired request's source gets a failure notice.
    """
    cutoff = _expiry_cutoff(call, now)
    expired = 0
    cursor: str | None = None
    while True:
        async with store.uow() as uow:
            rows, cursor = await _expirable_page(uow, cutoff, cursor)
            await uow.sessions.lock_many(row.source_conversation_id for row in rows)
            for row in rows:
                failed = await uow.replies.transition(
                    row.request_id,
                    [ReplyStatus.WAITING],
                    ReplyStatus.FAILED,
                    last_error=EXPIRED,
                    completed_at=utcnow(),
                )
                if failed is not None:
                    expired += 1
                    await deliver_reply(uow, failed)
            await uow.commit()
        if cursor is None:
            return Expired(expired=expired)
