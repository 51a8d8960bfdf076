"""The ``operator.*`` calls: the operator's views of conversations and open reply requests,
a request's story, and ``doctor``'s report."""

from __future__ import annotations

from typing import Annotated

from pydantic import AfterValidator, BeforeValidator, Field

from ccweb_store import __version__
from ccweb_store.contract.base import (
    ABSENT,
    AgeSeconds,
    ConversationId,
    Input,
    Output,
    PageSize,
    Text,
    Timestamp,
    listed,
    omitted,
    stripped_or_none,
)
from ccweb_store.contract.objects import Message, Reply, Run, SessionFields
from ccweb_store.contract.tools import QUERY_MAX_CHARS
from ccweb_store.domain.kinds import RunStatus
from ccweb_store.domain.rows import ActivityRow, Conversation, PendingReplyRow

#: How many rows the operator's listings return when they are not told.
DEFAULT_OPERATOR_PAGE = 100


class OperatorConversations(Input):
    """``operator.conversations``: conversations, newest activity first (``query``: id or
    title; archived ones only with ``includeArchived``)."""

    limit: PageSize = DEFAULT_OPERATOR_PAGE
    query: Annotated[
        str | None, Field(max_length=QUERY_MAX_CHARS), AfterValidator(stripped_or_none)
    ] = None
    include_archived: bool = False


class OperatorConversation(Input):
    """``operator.conversation``: one conversation, its open requests and newest runs."""

    id: ConversationId


class OperatorPendingReplies(Input):
    """``operator.pendingReplies``: open requests, oldest first."""

    status: Annotated[list[str] | None, BeforeValidator(listed)] = None
    session_id: str | None = None
    older_than_seconds: AgeSeconds | None = None
    limit: PageSize = DEFAULT_OPERATOR_PAGE


class OperatorReplyStory(Input):
    """``operator.replyStory``: one request's story."""

    request_id: Text


class OperatorDoctor(Input):
    """``operator.doctor``: the checks of ``ccweb-store doctor``; ``full`` reads every stored
    JSON value, not a sample of each column."""

    full: bool = False


class TargetRun(Output):
    """The run of a pending request's target, as the operator sees it."""

    id: str
    status: str | None
    worker_id: str | None
    lease_expires_at: Timestamp | None
    attempts: int | None


class PendingReply(Reply):
    """A Reply with the conversations' current titles and the ``pending_replies`` view's
    debugging columns."""

    age_seconds: int
    original_request_known: bool
    source_running: bool
    target_run: TargetRun | None

    @classmethod
    def of(cls, row: PendingReplyRow) -> PendingReply:
        target_run = None
        if row.target_run_id is not None:
            target_run = TargetRun(
                id=row.target_run_id,
                status=row.target_run_status,
                worker_id=row.target_run_worker_id,
                lease_expires_at=row.target_run_lease_expires_at,
                attempts=row.target_run_attempts,
            )
        reply = Reply.model_validate(row.reply).model_dump(by_alias=False)
        return cls(
            **{**reply, "source_title": row.source_title, "target_title": row.target_title},
            age_seconds=row.age_seconds,
            original_request_known=row.original_request_known,
            source_running=row.source_running,
            target_run=target_run,
        )


class ActiveRun(Output):
    """A conversation's active run, in brief."""

    id: str
    kind: str | None
    status: str | None


class Activity(Output):
    """A ``conversation_activity`` row: what a conversation is doing now."""

    conversation_id: str
    title: str | None
    message_count: int
    last_message_at: Timestamp | None
    active_run: ActiveRun | None
    open_as_source: dict[str, int]
    open_as_target: dict[str, int]

    @classmethod
    def of(cls, row: ActivityRow) -> Activity:
        active_run = None
        if row.active_run_id is not None:
            active_run = ActiveRun(
                id=row.active_run_id, kind=row.active_run_kind, status=row.active_run_status
            )
        return cls(
            conversation_id=row.session_id,
            title=row.title,
            message_count=row.message_count,
            last_message_at=row.last_message_at,
            active_run=active_run,
            open_as_source=row.open_as_source,
            open_as_target=row.open_as_target,
        )


class ConversationState(SessionFields):
    """A conversation as the operator sees it: the Session's fields, its active run, its
    messages and the open requests it made (``openAsSource``) and must answer
    (``openAsTarget``), by status."""

    archived_at: Timestamp | None
    running: bool
    active_run: ActiveRun | None
    message_count: int
    last_message_at: Timestamp | None
    open_as_source: dict[str, int]
    open_as_target: dict[str, int]

    @classmethod
    def of(cls, row: Conversation, activity: ActivityRow | None) -> ConversationState:
        """The conversation's row and its ``conversation_activity`` row (None: none)."""
        seen = Activity.of(activity) if activity is not None else None
        active_run = seen.active_run if seen is not None else None
        return cls(
            **cls.fields_of(row),
            archived_at=row.archived_at,
            running=active_run is not None and active_run.status == RunStatus.RUNNING,
            active_run=active_run,
            message_count=seen.message_count if seen is not None else 0,
            last_message_at=seen.last_message_at if seen is not None else None,
            open_as_source=seen.open_as_source if seen is not None else {},
            open_as_target=seen.open_as_target if seen is not None else {},
        )


class ConversationsPage(Output):
    """``operator.conversations``' answer: newest activity first, and whether more match."""

    conversations: list[ConversationState]
    count: int
    has_more: bool


class ConversationDetail(Output):
    """``operator.conversation``'s answer: the conversation, its open requests on either side
    (oldest first) and its newest runs."""

    conversation: ConversationState
    open_requests: list[PendingReply]
    runs: list[Run]


class PendingReplies(Output):
    """``operator.pendingReplies``' answer: the open requests and, when one conversation was
    asked about, its activity (null: it does not exist)."""

    replies: list[PendingReply]
    count: int
    conversation: Activity | None = omitted(ABSENT)


class ReplyStory(Output):
    """``operator.replyStory``'s answer: the request, every run that worked on it, and the
    messages that carried it on both sides (``sourceMessages``: every message the source
    received for it, in order)."""

    reply: Reply
    runs: list[Run]
    request_message: Message | None
    reply_message: Message | None
    source_messages: list[Message]


class Check(Output):
    """One of ``doctor``'s checks: what was checked, how it stands (``ok``, ``warning``,
    ``action``), and what fixes it."""

    name: str
    status: str
    summary: str
    fix: str | None
    items: list[str]

    @classmethod
    def of(
        cls, name: str, status: str, summary: str, fix: str | None = None,
        items: list[str] | None = None,
    ) -> Check:  # fmt: skip
        return cls(name=name, status=status, summary=summary, fix=fix, items=items or [])


class DoctorReport(Output):
    """``operator.doctor``'s answer: whether nothing needs action (warnings allowed), the
    version that checked, and the checks."""

    ok: bool
    version: str
    checks: list[Check]

    @classmethod
    def of(cls, checks: list[Check]) -> DoctorReport:
        """The report of ``checks``, made by this version: ``ok`` when none needs action."""
        ok = all(check.status != "action" for check in checks)
        return cls(ok=ok, version=__version__, checks=checks)
