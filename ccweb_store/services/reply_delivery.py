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
had no notices). Every state change is a conditional UPDATE that only one writer can win, and
the winner alone appends the message and queues the run, in the same transaction; so no reply
is delivered twice and none is lost, even across several server processes.

Lock order (PostgreSQL): a run row, then session rows in id order, then reply rows. Whoever
updates a reply row first locks the session of that reply's source; this orders a target's
completion against the source's own completion, so a reply that finds its source running is
always seen by that run's completion.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any, NamedTuple

from ccweb_store.domain.ids import new_id
from ccweb_store.domain.kinds import ReplyStatus, RunStatus
from ccweb_store.domain.prompts import failure_notice, reply_message_text, source_auto_run_prompt
from ccweb_store.domain.rows import ReplyRequest
from ccweb_store.domain.timestamps import utcnow
from ccweb_store.store.uow import UnitOfWork


async def conversation_title(
    uow: UnitOfWork, recorded: str | None, conversation_id: str
) -> str | None:
    """The title a prompt names a conversation by: the one the request recorded, else the
    conversation's current one (a request imported without titles, or sent while the
    conversation had none)."""
    if recorded is not None and recorded.strip():
        return recorded
    session = await uow.sessions.get(conversation_id)
    return session.title if session is not None else None


class Delivery(NamedTuple):
    """What ``deliver_reply`` did: whether it delivered the request, and the request as that
    call left it (moved to ``returned`` or ``failed``, or as it was given)."""

    delivered: bool
    request: ReplyRequest


async def deliver_reply(
    uow: UnitOfWork, request: ReplyRequest, *, delivered_by_run_id: str | None = None
) -> Delivery:
    """Try to deliver one ``ready`` reply or ``failed`` notice.

    The caller commits. ``delivered_by_run_id`` tags the message with the completion that
    delivered it, so a repeated ``run.complete`` can report the same replies.
    """
    source_id = request.source_conversation_id
    source = await uow.sessions.lock(source_id)
    if request.status == ReplyStatus.READY:
        if source is None:
            failed = await uow.replies.transition(
                request.request_id,
                [ReplyStatus.READY],
                ReplyStatus.FAILED,
                last_error=f"the source conversation {source_id!r} no longer exists",
            )
            return Delivery(False, failed or request)
        state = await uow.replies.source_state(source_id, request.request_id)
        if state.running:
            return Delivery(False, request)
        answered = state.answer_id
        message_id = answered or new_id("msg")
        returned = await uow.replies.transition(
            request.request_id,
            [ReplyStatus.READY],
            ReplyStatus.RETURNED,
            returned_at=utcnow(),
            reply_message_id=message_id,
        )
        if returned is None:
            return Delivery(False, request)  # another writer delivered it
        if not answered:  # else the source already holds an answer; nothing more to send
            await _send_reply(uow, returned, message_id, delivered_by_run_id)
        return Delivery(True, returned)
    if request.status == ReplyStatus.FAILED and request.reply_message_id is None:
        if source is None or await _source_is_running(uow, source_id):
            return Delivery(False, request)
        message_id = new_id("msg")
        claimed = await uow.replies.claim_failure_notice(request.request_id, message_id)
        if claimed is None:
            return Delivery(False, request)
        notice = failure_notice(
            request_id=claimed.request_id,
            target_id=claimed.target_conversation_id,
            target_title=await conversation_title(
                uow, claimed.target_title, claimed.target_conversation_id
            ),
            original_request=claimed.original_request,
            error=claimed.last_error,
        )
        await _return_to_source(
            uow,
            claimed,
            message_id,
            notice,
            auto_run_text=notice,
            failed=True,
            delivered_by_run_id=delivered_by_run_id,
        )
        return Delivery(True, claimed)
    return Delivery(False, request)


async def deliver_ready_replies(
    uow: UnitOfWork, source_session_id: str, *, delivered_by_run_id: str | None = None
) -> list[ReplyRequest]:
    """Deliver every reply and failure notice owed to ``source_session_id``; return those sent."""
    await uow.sessions.lock(source_session_id)
    delivered = []
    for request in await uow.replies.deliverable_for_source(source_session_id):
        delivery = await deliver_reply(uow, request, delivered_by_run_id=delivered_by_run_id)
        if delivery.delivered:
            delivered.append(delivery.request)
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
    have been read before that lock: a transition that moves it returns the moved row
    (``RETURNING``), and one that does not re-reads it. Returns the request as this call left
    it; None if it no longer exists.
    """
    request_id = request.request_id
    now = utcnow()
    if completed:
        text = output or ""
        if request.status == ReplyStatus.WAITING:
            returned = await _return_at_once(uow, request, text, now, delivered_by_run_id)
            if returned is not None:
                return returned
        moved = await uow.replies.transition(
            request_id, [ReplyStatus.WAITING], ReplyStatus.READY, reply_text=text, completed_at=now
        ) or await uow.replies.transition(
            request_id, [ReplyStatus.FAILED], ReplyStatus.FAILED, reply_text=text
        )
    else:
        moved = await uow.replies.transition(
            request_id,
            [ReplyStatus.WAITING],
            ReplyStatus.FAILED,
            last_error=error or "the target conversation's run failed",
            completed_at=now,
        )
    if moved is None:
        moved = await uow.replies.get(request_id, for_update=True)
        if moved is None:
            return None
    return (await deliver_reply(uow, moved, delivered_by_run_id=delivered_by_run_id)).request


async def _return_at_once(
    uow: UnitOfWork,
    request: ReplyRequest,
    text: str,
    now: datetime,
    delivered_by_run_id: str | None,
) -> ReplyRequest | None:
    """Answer a ``waiting`` request and deliver it in one step, ``waiting → returned``, when
    nothing would hold it ``ready``: its source exists, runs nothing, and holds no answer yet.

    The same outcome as ``ready`` then ``deliver_reply``, with one conditional UPDATE instead
    of two. The returned request; None (nothing written) when delivery must wait or the
    request moved meanwhile: the caller then takes the two steps.
    """
    source_id = request.source_conversation_id
    if await uow.sessions.lock(source_id) is None:
        return None
    state = await uow.replies.source_state(source_id, request.request_id)
    if state.running or state.answer_id is not None:
        return None
    message_id = new_id("msg")
    returned = await uow.replies.transition(
        request.request_id,
        [ReplyStatus.WAITING],
        ReplyStatus.RETURNED,
        reply_text=text,
        completed_at=now,
        returned_at=now,
        reply_message_id=message_id,
    )
    if returned is not None:
        await _send_reply(uow, returned, message_id, delivered_by_run_id)
    return returned


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
            target_title=await conversation_title(
                uow, request.target_title, request.target_conversation_id
            ),
            original_request=request.original_request,
            reply_text=request.reply_text or "",
        ),
        delivered_by_run_id=delivered_by_run_id,
    )


async def _source_is_running(uow: UnitOfWork, source_id: str) -> bool:
    return await uow.runs.has_run_in(source_id, (RunStatus.RUNNING,))


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
