"""The reply lifecycle (SPEC §4): ``waiting → ready → returned``, ``waiting|ready → failed``.

A target's answer makes a request ``ready``; delivery makes it ``returned``. When nothing
would hold it ``ready`` (its source exists and runs nothing), the answer and the delivery are
one conditional UPDATE, ``waiting → returned`` (``_return_at_once``); the outcome is the same.

Delivery puts a ready reply (or a failed request's notice) into the source conversation as a
display-only assistant message and, when the request asked for it, queues the source's
``reply_auto_run``. A failed request reaches its source the same way, as a notice (metadata
``replyFailed: true``; its id is kept in ``reply_message_id`` so it goes out once), with an
auto-run so the source is not left waiting; a ``failed`` request with a ``returned_at`` is
settled and owed no notice (``import-json`` marks so the failures cc-web already ended, which
had no notices). Every state change is a conditional UPDATE that
only one writer can win, and the winner alone appends the message and queues the run, in the
same transaction; so no reply is delivered twice and none is lost, even across several server
processes.

Lock order (PostgreSQL): a run row, then session rows in id order, then reply rows. Whoever
updates a reply row first locks the session of that reply's source; this orders a target's
completion against the source's own completion, so a reply that finds its source running is
always seen by that run's completion.

Retry (``reply.retry``) by state:

- ``ready``: deliver now (it stays ``ready`` while the source is running).
- ``failed`` with reply text (the target answered but delivery failed, was failed by hand, or
  the answer arrived after the request expired): back to ``ready``, then delivered.
- ``failed`` without reply text, and ``waiting`` whose target run is gone: ask the target
  again, i.e. queue a new ``cross_conversation`` run on it with the same target prompt
  (``failed`` goes back to ``waiting``, unsettled, so a new failure is notified).
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

from collections.abc import Mapping
from datetime import datetime, timedelta
from typing import Any

from ccweb_store.domain import errors
from ccweb_store.domain.arguments import (
    CENTURY_SECONDS,
    bounded_int,
    optional_number,
    optional_str,
    optional_str_list,
    require_mapping,
    require_str,
)
from ccweb_store.domain.errors import Conflict, NotFound
from ccweb_store.domain.ids import MAX_PAGE, new_id, validate_session_id
from ccweb_store.domain.prompts import (
    RETURN_AND_CONTINUE,
    failure_notice,
    reply_message_text,
    source_auto_run_prompt,
    target_prompt,
)
from ccweb_store.domain.timestamps import utcnow
from ccweb_store.services.schemas import reply_out
from ccweb_store.store.models import ReplyRequest
from ccweb_store.store.uow import Store, UnitOfWork

EXPIRED = "expired"
EXPIRE_BATCH = 200


# --- delivery -------------------------------------------------------------------------------


async def deliver_reply(
    uow: UnitOfWork, request: ReplyRequest, *, delivered_by_run_id: str | None = None
) -> bool:
    """Try to deliver one ``ready`` reply or ``failed`` notice; True if this call delivered it.

    The caller commits. ``delivered_by_run_id`` tags the message with the completion that
    delivered it, so a repeated ``run.complete`` can report the same replies.
    """
    source_id = request.source_conversation_id
    source = await uow.sessions.lock(source_id)
    if request.status == "ready":
        if source is None:
            await uow.replies.transition(
                request.request_id,
                ["ready"],
                "failed",
                last_error=f"the source conversation {source_id!r} no longer exists",
            )
            return False
        state = await uow.replies.source_state(source_id, request.request_id)
        if state.running:
            return False
        answered = state.answer_id
        message_id = answered or new_id("msg")
        returned = await uow.replies.transition(
            request.request_id,
            ["ready"],
            "returned",
            returned_at=utcnow(),
            reply_message_id=message_id,
        )
        if not returned:
            return False  # another writer delivered it
        if answered:
            return True  # the source already holds an answer; nothing more to send
        await _send_reply(uow, request, message_id, delivered_by_run_id)
        return True
    if request.status == "failed" and request.reply_message_id is None:
        if source is None or await _source_is_running(uow, source_id):
            return False
        message_id = new_id("msg")
        if not await uow.replies.claim_failure_notice(request.request_id, message_id):
            return False
        notice = failure_notice(
            request_id=request.request_id,
            target_id=request.target_conversation_id,
            target_title=request.target_title,
            original_request=request.original_request,
            error=request.last_error,
        )
        await _return_to_source(
            uow,
            request,
            message_id,
            notice,
            auto_run_text=notice,
            failed=True,
            delivered_by_run_id=delivered_by_run_id,
        )
        return True
    return False


async def deliver_ready_replies(
    uow: UnitOfWork, source_session_id: str, *, delivered_by_run_id: str | None = None
) -> list[ReplyRequest]:
    """Deliver every reply and failure notice owed to ``source_session_id``; return those sent."""
    await uow.sessions.lock(source_session_id)
    delivered = []
    for request in await uow.replies.deliverable_for_source(source_session_id):
        if await deliver_reply(uow, request, delivered_by_run_id=delivered_by_run_id):
            delivered.append(request)
    return delivered


async def record_target_answer(
    uow: UnitOfWork,
    request: ReplyRequest,
    *,
    completed: bool,
    output: str | None,
    error: str | None,
    delivered_by_run_id: str | None = None,
) -> ReplyRequest | None:
    """A ``cross_conversation`` run answering ``request_id`` ended: move the request and deliver it.

    A completed run makes a ``waiting`` request ``ready`` with its output; a failed run makes
    it ``failed``. An answer that arrives after the request failed (expired, failed by hand) is
    kept as its reply text, so ``reply.retry`` can still deliver it. The caller must already
    hold the source session's lock (see the module docstring) and commits. ``request`` may
    have been read before that lock: a transition that moves it refreshes it (``RETURNING``),
    and one that does not re-reads it; None if it no longer exists.
    """
    request_id = request.request_id
    now = utcnow()
    if completed:
        text = output or ""
        if request.status == "waiting" and await _return_at_once(
            uow, request, text, now, delivered_by_run_id
        ):
            return request
        moved = await uow.replies.transition(
            request_id, ["waiting"], "ready", reply_text=text, completed_at=now
        ) or await uow.replies.transition(request_id, ["failed"], "failed", reply_text=text)
    else:
        moved = await uow.replies.transition(
            request_id,
            ["waiting"],
            "failed",
            last_error=error or "the target conversation's run failed",
            completed_at=now,
        )
    if not moved:
        fresh = await uow.replies.get(request_id, for_update=True)
        if fresh is None:
            return None
        request = fresh
    await deliver_reply(uow, request, delivered_by_run_id=delivered_by_run_id)
    return request


async def _return_at_once(
    uow: UnitOfWork,
    request: ReplyRequest,
    text: str,
    now: datetime,
    delivered_by_run_id: str | None,
) -> bool:
    """Answer a ``waiting`` request and deliver it in one step, ``waiting → returned``, when
    nothing would hold it ``ready``: its source exists, runs nothing, and holds no answer yet.

    The same outcome as ``ready`` then ``deliver_reply``, with one conditional UPDATE instead
    of two. False (nothing written) when delivery must wait or the request moved meanwhile;
    the caller then takes the two steps.
    """
    source_id = request.source_conversation_id
    if await uow.sessions.lock(source_id) is None:
        return False
    state = await uow.replies.source_state(source_id, request.request_id)
    if state.running or state.answer_id is not None:
        return False
    message_id = new_id("msg")
    if not await uow.replies.transition(
        request.request_id,
        ["waiting"],
        "returned",
        reply_text=text,
        completed_at=now,
        returned_at=now,
        reply_message_id=message_id,
    ):
        return False
    await _send_reply(uow, request, message_id, delivered_by_run_id)
    return True


async def _send_reply(
    uow: UnitOfWork, request: ReplyRequest, message_id: str, delivered_by_run_id: str | None
) -> None:
    """Put the reply of a request just moved to ``returned`` into its source, with the
    source's auto-run when the request asked for one."""
    await _return_to_source(
        uow,
        request,
        message_id,
        reply_message_text(request.reply_text),
        auto_run_text=source_auto_run_prompt(
            request_id=request.request_id,
            target_id=request.target_conversation_id,
            target_title=request.target_title,
            original_request=request.original_request,
            reply_text=request.reply_text or "",
        ),
        delivered_by_run_id=delivered_by_run_id,
    )


async def _source_is_running(uow: UnitOfWork, source_id: str) -> bool:
    return await uow.runs.has_run_in(source_id, ("running",))


async def _return_to_source(
    uow: UnitOfWork,
    request: ReplyRequest,
    message_id: str,
    content: str,
    *,
    auto_run_text: str,
    failed: bool = False,
    delivered_by_run_id: str | None = None,
) -> None:
    """Append ``content`` to the request's source (read and locked by the caller) as the
    display-only message ``message_id``, and queue the source's ``reply_auto_run`` with
    ``auto_run_text`` when the request asked for one: one ``SendRepository.return_reply``."""
    metadata: dict[str, Any] = {
        "ccwebDisplayOnly": True,
        "replyToRequestId": request.request_id,
        "processed": True,
        "autoRun": bool(request.source_auto_run),
    }
    if failed:
        metadata["replyFailed"] = True
    if delivered_by_run_id is not None:
        metadata["deliveredByRunId"] = delivered_by_run_id
    await uow.sends.return_reply(
        source_id=request.source_conversation_id,
        request_id=request.request_id,
        message_id=message_id,
        content=content,
        metadata=metadata,
        auto_run=(auto_run_text, request.hop_count) if request.source_auto_run else None,
        now=utcnow(),
    )


# --- host API (reply.*) ---------------------------------------------------------------------


async def list_replies(store: Store, params: Mapping[str, Any]) -> dict[str, Any]:
    """``reply.list``: requests oldest first, by status and/or conversation (either side)."""
    params = require_mapping(params, "params")
    statuses = optional_str_list(params, "status")
    session_id = optional_str(params, "sessionId")
    if session_id is not None:
        validate_session_id(session_id)
    limit = bounded_int(params, "limit", 50, MAX_PAGE)
    async with store.read_uow() as uow:
        rows, next_cursor = await uow.replies.list_page(
            statuses=statuses,
            session_id=session_id,
            limit=limit,
            cursor=optional_str(params, "cursor"),
        )
    return {"replies": [reply_out(row) for row in rows], "nextCursor": next_cursor}


async def get_reply(store: Store, params: Mapping[str, Any]) -> dict[str, Any]:
    """``reply.get``: one request by id (``request_not_found`` otherwise)."""
    request_id = require_str(require_mapping(params, "params"), "requestId")
    async with store.read_uow() as uow:
        return reply_out(await uow.replies.require(request_id))


async def retry_reply(store: Store, params: Mapping[str, Any]) -> dict[str, Any]:
    """``reply.retry``: re-attempt the request (what that means per state: module docstring)."""
    request_id = require_str(require_mapping(params, "params"), "requestId")
    async with store.uow() as uow:
        request = await _lock_request(uow, request_id)
        if request.status == "returned":
            raise Conflict(
                f"reply request {request_id!r} was already returned; there is nothing to retry",
                code=errors.INVALID_STATE,
            )
        await _refuse_while_answering(uow, request)
        if request.status == "failed" and request.reply_text is not None:
            await uow.replies.transition(
                request_id,
                ["failed"],
                "ready",
                last_error=None,
                reply_message_id=None,
                returned_at=None,
            )
        if request.status == "ready":
            await deliver_reply(uow, request)
        else:
            await _ask_target_again(uow, request)
        await uow.commit()
        return reply_out(request)


async def _lock_request(uow: UnitOfWork, request_id: str) -> ReplyRequest:
    """The request, read again after locking its source session (the lock order above)."""
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
    if run.worker_id is None:
        held, end = "", "run.complete with status failed"
    else:
        held = f", held by worker {run.worker_id!r}"
        end = f"run.complete with status failed and workerId {run.worker_id!r}"
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


async def _ask_target_again(uow: UnitOfWork, request: ReplyRequest) -> None:
    """Queue a new target run for a ``waiting`` request or an unanswered failed one (the
    caller made sure no target run for it is open)."""
    if await uow.sessions.get(request.target_conversation_id) is None:
        raise NotFound(
            f"the target conversation {request.target_conversation_id!r} no longer exists; "
            "fail the request instead",
            code=errors.CONVERSATION_NOT_FOUND,
        )
    if request.status == "failed" and not await uow.replies.transition(
        request.request_id,
        ["failed"],
        "waiting",
        last_error=None,
        completed_at=None,
        reply_message_id=None,
        returned_at=None,
    ):
        raise Conflict(
            f"reply request {request.request_id!r} changed while retrying; try again",
            code=errors.INVALID_STATE,
        )
    content = request.original_request
    if content is None and request.message_id is not None:
        message = await uow.messages.get(request.message_id)
        content = message.content if message is not None else None
    await uow.runs.enqueue_id(
        request.target_conversation_id,
        "cross_conversation",
        runtime_text=target_prompt(
            source_id=request.source_conversation_id,
            source_title=request.source_title,
            content=content if content is not None else "(the original message is unavailable)",
            reply_mode=RETURN_AND_CONTINUE,
            request_id=request.request_id,
        ),
        hop_count=request.hop_count,
        reply_request_id=request.request_id,
    )


async def fail_reply(store: Store, params: Mapping[str, Any]) -> dict[str, Any]:
    """``reply.fail``: fail a waiting or ready request with ``reason``; the source gets a notice."""
    params = require_mapping(params, "params")
    request_id = require_str(params, "requestId")
    reason = require_str(params, "reason")
    async with store.uow() as uow:
        request = await _lock_request(uow, request_id)
        if request.status == "returned":
            raise Conflict(
                f"reply request {request_id!r} was already returned and cannot fail",
                code=errors.INVALID_STATE,
            )
        if await uow.replies.transition(
            request_id, ["waiting", "ready"], "failed", last_error=reason, completed_at=utcnow()
        ):
            await deliver_reply(uow, request)
        await uow.commit()
        return reply_out(request)


def _expiry_cutoff(params: Mapping[str, Any], now: datetime | None) -> datetime:
    """The creation time before which a ``waiting`` request expires (``olderThanSeconds``)."""
    seconds = optional_number(
        require_mapping(params, "params"),
        "olderThanSeconds",
        minimum=0,
        maximum=CENTURY_SECONDS,
        unit=" (100 years)",
    )
    if seconds is None:
        raise errors.InvalidInput("olderThanSeconds is required")
    return (now or utcnow()) - timedelta(seconds=seconds)


async def _expirable_page(
    uow: UnitOfWork, cutoff: datetime, cursor: str | None
) -> tuple[list[ReplyRequest], str | None]:
    """One batch of what ``reply.expire`` fails: ``waiting`` requests made before ``cutoff``."""
    return await uow.replies.list_page(
        statuses=["waiting"], older_than=cutoff, limit=EXPIRE_BATCH, cursor=cursor
    )


async def expirable_replies(
    store: Store, params: Mapping[str, Any], *, now: datetime | None = None
) -> list[ReplyRequest]:
    """What ``expire_replies`` with these params would fail right now, oldest first; writes nothing.

    The same selection as ``expire_replies``, so a dry run lists exactly what a real run takes
    (unless a request moves in between).
    """
    cutoff = _expiry_cutoff(params, now)
    found: list[ReplyRequest] = []
    cursor: str | None = None
    async with store.read_uow() as uow:
        while True:
            rows, cursor = await _expirable_page(uow, cutoff, cursor)
            found.extend(rows)
            if cursor is None:
                return found


async def expire_replies(
    store: Store, params: Mapping[str, Any], *, now: datetime | None = None
) -> dict[str, int]:
    """``reply.expire``: fail ``waiting`` requests older than ``olderThanSeconds`` ("expired").

    Each batch is one transaction; each expired request's source gets a failure notice.
    """
    cutoff = _expiry_cutoff(params, now)
    expired = 0
    cursor: str | None = None
    while True:
        async with store.uow() as uow:
            rows, cursor = await _expirable_page(uow, cutoff, cursor)
            await uow.sessions.lock_many(row.source_conversation_id for row in rows)
            for row in rows:
                if await uow.replies.transition(
                    row.request_id, ["waiting"], "failed", last_error=EXPIRED, completed_at=utcnow()
                ):
                    expired += 1
                    await deliver_reply(uow, row)
            await uow.commit()
        if cursor is None:
            return {"expired": expired}
