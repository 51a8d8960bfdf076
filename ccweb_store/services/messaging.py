"""Cross-conversation sends (SPEC §2.2, §2.3): one transaction per send.

A send appends the target's ``user`` message (with ``metadata.crossConversation``), creates
the ``waiting`` reply request for ``return_and_continue``, and queues the target's
``cross_conversation`` run, all or nothing. Every refusal (``target_busy``,
``hop_limit_exceeded``, …) happens before anything is written. The call never waits for the
target: replies come back through ``replies.py`` when the target's run completes.
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass

from ccweb_store.contract.objects import Reply
from ccweb_store.contract.tool_answers import (
    CreatedConversation,
    PendingReplyAnswer,
    PendingReplyList,
    SendAnswer,
)
from ccweb_store.contract.tools import CreateConversation, GetPendingReply, SendMessage
from ccweb_store.domain import errors
from ccweb_store.domain.boxes import within
from ccweb_store.domain.context import Source, refuse_other_conversation, require_source
from ccweb_store.domain.errors import Conflict, DomainError, InvalidInput, NotFound
from ccweb_store.domain.ids import MAX_PAGE, OPEN_REPLY_STATUSES, new_id
from ccweb_store.domain.kinds import ReplyMode
from ccweb_store.domain.prompts import target_prompt
from ccweb_store.domain.rows import Conversation, Party
from ccweb_store.domain.timestamps import utcnow
from ccweb_store.store.uow import Store, UnitOfWork

log = logging.getLogger(__name__)

#: The tool a send without ``replyMode`` is counted under.
SEND_TOOL = "ccweb_send_message"
DEFAULT_TITLE = "New conversation"
TITLE_FROM_CONTENT_CHARS = 60


@dataclass(frozen=True, slots=True)
class _Send:
    """A send that passed every check that needs no database."""

    source_id: str
    content: str
    reply_mode: ReplyMode
    hop_count: int  # of the target's run: the source's hop + 1


async def send_message(store: Store, source: Source, args: SendMessage) -> SendAnswer:
    """``ccweb_send_message``. One without ``replyMode`` is ``one_way`` (SPEC's compatibility
    rule), and logged and counted (``ccweb_sends_without_reply_mode_total``), so an operator
    sees which conversations still run on old tool definitions."""
    source_id = require_source(source)
    target_id = args.target_conversation_id
    if args.reply_mode_left_out:
        from ccweb_store.metrics import SENDS_WITHOUT_REPLY_MODE  # the server's, loaded then

        SENDS_WITHOUT_REPLY_MODE.labels(tool=SEND_TOOL).inc()
        log.warning(
            "ccweb_send_message without replyMode from conversation %s to %s: sent one_way; "
            "its agent's tool definitions predate replyMode (start a new session there)",
            source_id,
            target_id,
            extra={"fields": {"conversation": source_id, "target": target_id}},
        )
    if target_id == source_id:
        raise InvalidInput(
            "a conversation cannot send a message to itself; pick another targetConversationId",
            code=errors.CANNOT_TARGET_SELF,
        )
    send = _validate_send(store, source, source_id, args.content, args.reply_mode)
    # Every refusal comes before the first write (and the writes cannot be refused).
    async with store.uow() as uow:
        # Locking the target serialises concurrent sends to it (PostgreSQL; SQLite's
        # BEGIN IMMEDIATE already does), so only one of them finds it idle. The source is
        # read (and locked, in id order) by the same statement.
        parties = await uow.sessions.send_parties(source_id, target_id)
        if parties.source is None:
            raise _not_found(source_id, "source")
        if parties.target is None:
            raise _not_found(target_id, "target")
        if parties.target_busy:
            raise Conflict(
                f"conversation {target_id!r} is busy (it has a queued or running turn); "
                "nothing was sent. Try again after it finishes, or pick another conversation",
                code=errors.TARGET_BUSY,
            )
        result = await _deliver_to_target(uow, send, parties.source, parties.target)
        await uow.commit()
    return result


async def create_conversation(
    store: Store, source: Source, args: CreateConversation
) -> CreatedConversation:
    """``ccweb_create_conversation``: a new conversation, optionally sent its first message.

    ``requestReply`` (or the legacy ``waitForReply``) makes that send ``return_and_continue``;
    otherwise it is ``one_way``. Blank ``content`` creates the conversation without a message.
    A caller bound by a credential creates inside its own conversation's box: the creator's
    ``agent``, and its ``cwd`` or a folder inside it (``_confined``); the new conversation
    records that box, which the worker checks again when each of its runs starts.
    """
    content, agent, cwd = args.content, args.agent, args.cwd
    box = None
    send = None
    if content is not None and content.strip():
        source_id = require_source(source)
        mode = ReplyMode.RETURN_AND_CONTINUE if args.wants_reply else ReplyMode.ONE_WAY
        send = _validate_send(store, source, source_id, content, mode)
    title = (args.title or "").strip() or _title_from(content) or DEFAULT_TITLE
    async with store.uow() as uow:
        source_row = await _require_session(uow, send.source_id, "source") if send else None
        if source.bound:
            creator = source_row or await _require_session(uow, require_source(source), "source")
            agent, cwd, box = _confined(creator, agent, cwd)
        target = await uow.sessions.create(title=title, agent=agent, cwd=cwd, box=box)
        sent = None
        if send is not None and source_row is not None:
            sent = await _deliver_to_target(
                uow,
                send,
                Party(source_row.id, source_row.title),
                Party(target.id, target.title),
            )
        await uow.commit()
    return CreatedConversation.of(target.id, target.title, sent)


async def get_pending_reply(
    store: Store, source: Source, args: GetPendingReply
) -> PendingReplyAnswer:
    """``ccweb_get_pending_reply``: one request (seen by its source or target only), or the
    caller's open requests (``waiting``, ``ready``, ``failed``), oldest first.

    The tool takes no ``conversationId``; a caller bound by a credential that passes another
    conversation's is refused rather than quietly shown its own.
    """
    source_id = require_source(source)
    refuse_other_conversation(source, args.conversation_id, "reply requests")
    request_id = args.request_id
    async with store.read_uow() as uow:
        if request_id is not None:
            row = await uow.replies.get(request_id)
            if row is None or source_id not in (
                row.source_conversation_id,
                row.target_conversation_id,
            ):
                raise NotFound(
                    f"reply request {request_id!r} does not exist or is not visible to "
                    f"conversation {source_id!r}",
                    code=errors.REQUEST_NOT_FOUND,
                )
            return Reply.model_validate(row)
        rows, _ = await uow.replies.list_page(
            statuses=OPEN_REPLY_STATUSES,
            session_id=source_id,
            as_target=False,
            limit=MAX_PAGE,
        )
    return PendingReplyList(replies=[Reply.model_validate(row) for row in rows], count=len(rows))


def check_content_length(store: Store, content: str, what: str = "content") -> None:
    """``invalid_arguments`` when ``content`` is longer than ``CCWEB_MAX_CONTENT_CHARS``."""
    limit = store.settings.max_content_chars
    if len(content) > limit:
        raise InvalidInput(
            f"{what} is {len(content)} characters; the limit is {limit}. "
            "Send a shorter message or point to a file instead"
        )


def _validate_send(
    store: Store, source: Source, source_id: str, content: str, mode: ReplyMode
) -> _Send:
    """The checks of a send that need the settings: content length, hop limit."""
    check_content_length(store, content)
    hop_count = max(source.hop_count, 0) + 1
    if hop_count > store.settings.max_hops:
        raise Conflict(
            f"hop limit reached: this send would be hop {hop_count}, the limit is "
            f"{store.settings.max_hops}. Finish the work here instead of forwarding it",
            code=errors.HOP_LIMIT_EXCEEDED,
        )
    return _Send(source_id=source_id, content=content, reply_mode=mode, hop_count=hop_count)


def _confined(
    creator: Conversation, agent: str | None, cwd: str | None
) -> tuple[str | None, str | None, str | None]:
    """The ``agent``, ``cwd`` and box a credential's conversation may give a conversation it
    creates: its own agent, and its own folder or one inside it (``..`` and symlinks resolved
    first, and inside its own box when it has one), defaulting to its own. A credential must
    not reach another agent profile or another project through the worker, which runs the new
    conversation's agent in its cwd. The box is the creator's, or its resolved folder: a
    symlink put in the new conversation's path later cannot widen it (the worker checks).
    """
    if agent is not None and agent != creator.agent:
        raise DomainError(
            f"this conversation's credential creates conversations of its own agent only: "
            f"{agent!r} is not {creator.agent!r}. Leave agent out",
            code=errors.OUTSIDE_CREDENTIAL_SCOPE,
        )
    box = creator.box or (os.path.realpath(creator.cwd) if creator.cwd else None)
    if cwd is None or cwd == creator.cwd:
        return creator.agent, creator.cwd, box
    if creator.cwd is None:
        raise DomainError(
            "this conversation has no working directory, so its credential cannot choose "
            "one for a new conversation. Leave cwd out",
            code=errors.OUTSIDE_CREDENTIAL_SCOPE,
        )
    home = os.path.realpath(creator.cwd)
    wanted = os.path.realpath(os.path.join(home, cwd))
    if not within(wanted, home) or (box is not None and not within(wanted, box)):
        raise DomainError(
            f"this conversation's credential creates conversations in its own folder "
            f"{creator.cwd!r} or a folder inside it: {cwd!r} resolves to {wanted!r}, outside "
            "it. Leave cwd out, or name a folder inside your own",
            code=errors.OUTSIDE_CREDENTIAL_SCOPE,
        )
    return creator.agent, wanted, box


async def _require_session(uow: UnitOfWork, session_id: str, side: str) -> Conversation:
    row = await uow.sessions.get(session_id)
    if row is None:
        raise _not_found(session_id, side)
    return row


def _not_found(session_id: str, side: str) -> NotFound:
    return NotFound(
        f"{side} conversation {session_id!r} does not exist; "
        "ccweb_list_conversations shows the ones you can use",
        code=errors.CONVERSATION_NOT_FOUND,
    )


async def _deliver_to_target(
    uow: UnitOfWork, send: _Send, source: Party, target: Party
) -> SendAnswer:
    """Write the send: target message, reply request (``return_and_continue``), queued run.

    They all carry one time, taken once (``now``).
    """
    expects_reply = send.reply_mode is ReplyMode.RETURN_AND_CONTINUE
    request_id = new_id("req") if expects_reply else None
    message_id = new_id("msg")
    run_id = new_id("run")
    await uow.sends.deliver(
        source=source,
        target=target,
        content=send.content,
        metadata={
            "crossConversation": {
                "sourceConversationId": source.id,
                "sourceTitle": source.title,
                "hopCount": send.hop_count,
                "replyMode": send.reply_mode,
                "expectsReply": expects_reply,
                "replyRequestId": request_id,
            }
        },
        hop_count=send.hop_count,
        runtime_text=target_prompt(
            source_id=source.id,
            source_title=source.title,
            content=send.content,
            reply_mode=send.reply_mode,
            request_id=request_id,
        ),
        message_id=message_id,
        run_id=run_id,
        request_id=request_id,
        now=utcnow(),
    )
    return SendAnswer.of(send.reply_mode, message_id, run_id, target, request_id)


def _title_from(content: str | None) -> str | None:
    """A title from the first line of the first message, when none was given."""
    if not content or not content.strip():
        return None
    first = content.strip().splitlines()[0].strip()
    if len(first) <= TITLE_FROM_CONTENT_CHARS:
        return first
    return first[: TITLE_FROM_CONTENT_CHARS - 1].rstrip() + "…"
