"""The operator's views: ``operator.*``, a request's story, ``doctor``'s report and ``repair-
json``'s summary."""

from __future__ import annotations

from typing import NotRequired

from typing_extensions import TypedDict

from ccweb_store.domain.kinds import RunStatus
from ccweb_store.domain.timestamps import iso
from ccweb_store.protocol.shapes.objects import (
    MessageOut,
    ReplyOut,
    RunOut,
    SessionFields,
    message_out,
    reply_out,
    run_out,
    session_fields,
)
from ccweb_store.protocol.shapes.wire import closed
from ccweb_store.services.debugging import ReplyStory
from ccweb_store.services.doctor import Check, Report
from ccweb_store.services.json_repair import ColumnCounts, RepairedRow, RepairSummary
from ccweb_store.services.operator import (
    ConversationDetail,
    ConversationsPage,
    ConversationState,
    PendingReplies,
)
from ccweb_store.store.repositories.debugging import ActivityRow, PendingReplyRow


@closed
class TargetRunOut(TypedDict):
    """The run of a pending request's target, as the operator sees it."""

    id: str
    status: str | None
    workerId: str | None
    leaseExpiresAt: str | None
    attempts: int | None


@closed
class PendingReplyOut(ReplyOut):
    """A Reply plus the ``pending_replies`` view's debugging columns."""

    ageSeconds: int
    originalRequestKnown: bool
    sourceRunning: bool
    targetRun: TargetRunOut | None


@closed
class ActiveRunOut(TypedDict):
    """A conversation's active run, in brief."""

    id: str
    kind: str | None
    status: str | None


@closed
class ActivityOut(TypedDict):
    """A ``conversation_activity`` row: what a conversation is doing now."""

    conversationId: str
    title: str | None
    messageCount: int
    lastMessageAt: str | None
    activeRun: ActiveRunOut | None
    openAsSource: dict[str, int]
    openAsTarget: dict[str, int]


@closed
class ConversationStateOut(SessionFields):
    """A conversation as the operator sees it."""

    archivedAt: str | None
    running: bool
    activeRun: ActiveRunOut | None
    messageCount: int
    lastMessageAt: str | None
    openAsSource: dict[str, int]
    openAsTarget: dict[str, int]


@closed
class ConversationsPageAnswer(TypedDict):
    """``operator.conversations``' answer."""

    conversations: list[ConversationStateOut]
    count: int
    hasMore: bool


@closed
class ConversationDetailAnswer(TypedDict):
    """``operator.conversation``'s answer."""

    conversation: ConversationStateOut
    openRequests: list[PendingReplyOut]
    runs: list[RunOut]


@closed
class PendingRepliesAnswer(TypedDict):
    """``operator.pendingReplies``' answer; ``conversation`` only when one was asked about."""

    replies: list[PendingReplyOut]
    count: int
    conversation: NotRequired[ActivityOut | None]


@closed
class ReplyStoryAnswer(TypedDict):
    """``operator.replyStory``'s answer."""

    reply: ReplyOut
    runs: list[RunOut]
    requestMessage: MessageOut | None
    replyMessage: MessageOut | None
    sourceMessages: list[MessageOut]


@closed
class CheckOut(TypedDict):
    """One doctor's check."""

    name: str
    status: str
    summary: str
    fix: str | None
    items: list[str]


@closed
class DoctorReportAnswer(TypedDict):
    """``operator.doctor``'s answer."""

    ok: bool
    version: str
    checks: list[CheckOut]


@closed
class RepairedPlaceOut(TypedDict):
    """A place in a JSON value ``repair-json`` kept as text, and why."""

    path: str
    reason: str


@closed
class RepairedRowOut(TypedDict):
    """A row ``repair-json`` rewrote (or would)."""

    table: str
    column: str
    id: str
    paths: list[RepairedPlaceOut]


@closed
class ColumnCountsOut(TypedDict):
    """What ``repair-json``'s scan of one column found."""

    table: str
    column: str
    rowsRead: int
    rowsRewritten: int
    rowsChangedMeanwhile: int


@closed
class RepairSummaryAnswer(TypedDict):
    """``repair-json --json``'s answer."""

    dryRun: bool
    rowsRewritten: int
    columns: list[ColumnCountsOut]
    rows: list[RepairedRowOut]


def pending_reply_out(row: PendingReplyRow) -> PendingReplyOut:
    """A ``pending_replies`` row on the wire: the Reply plus the view's debugging columns."""
    target_run: TargetRunOut | None = None
    if row.target_run_id is not None:
        target_run = {
            "id": row.target_run_id,
            "status": row.target_run_status,
            "workerId": row.target_run_worker_id,
            "leaseExpiresAt": iso(row.target_run_lease_expires_at),
            "attempts": row.target_run_attempts,
        }
    return {
        **reply_out(row.reply),
        "sourceTitle": row.source_title,
        "targetTitle": row.target_title,
        "ageSeconds": row.age_seconds,
        "originalRequestKnown": row.original_request_known,
        "sourceRunning": row.source_running,
        "targetRun": target_run,
    }


def activity_out(row: ActivityRow) -> ActivityOut:
    """A ``conversation_activity`` row on the wire: what a conversation is doing now."""
    active_run: ActiveRunOut | None = None
    if row.active_run_id is not None:
        active_run = {
            "id": row.active_run_id,
            "kind": row.active_run_kind,
            "status": row.active_run_status,
        }
    return {
        "conversationId": row.session_id,
        "title": row.title,
        "messageCount": row.message_count,
        "lastMessageAt": iso(row.last_message_at),
        "activeRun": active_run,
        "openAsSource": row.open_as_source,
        "openAsTarget": row.open_as_target,
    }


def conversation_state_out(state: ConversationState) -> ConversationStateOut:
    """A conversation as the operator sees it: the Session's fields, its active run, its
    messages and the open requests it made (``openAsSource``) and must answer
    (``openAsTarget``), by status."""
    row, activity = state.row, state.activity
    active_run = activity_out(activity)["activeRun"] if activity is not None else None
    return {
        **session_fields(row),
        "archivedAt": iso(row.archived_at),
        "running": active_run is not None and active_run["status"] == RunStatus.RUNNING,
        "activeRun": active_run,
        "messageCount": activity.message_count if activity is not None else 0,
        "lastMessageAt": iso(activity.last_message_at) if activity is not None else None,
        "openAsSource": activity.open_as_source if activity is not None else {},
        "openAsTarget": activity.open_as_target if activity is not None else {},
    }


def conversations_page_out(page: ConversationsPage) -> ConversationsPageAnswer:
    """``operator.conversations``' answer: ``{conversations, count, hasMore}``."""
    conversations = [conversation_state_out(state) for state in page.conversations]
    return {"conversations": conversations, "count": len(conversations), "hasMore": page.has_more}


def conversation_detail_out(detail: ConversationDetail) -> ConversationDetailAnswer:
    """``operator.conversation``'s answer: ``{conversation, openRequests, runs}``."""
    return {
        "conversation": conversation_state_out(detail.conversation),
        "openRequests": [pending_reply_out(item) for item in detail.open_requests],
        "runs": [run_out(run) for run in detail.runs],
    }


def pending_replies_out(pending: PendingReplies) -> PendingRepliesAnswer:
    """``operator.pendingReplies``' answer: ``{replies, count}``, and with a conversation asked
    about, its activity (``conversation``, null when it does not exist)."""
    out: PendingRepliesAnswer = {
        "replies": [pending_reply_out(item) for item in pending.replies],
        "count": len(pending.replies),
    }
    if pending.conversation_asked:
        activity = pending.activity
        out["conversation"] = activity_out(activity) if activity is not None else None
    return out


def reply_story_out(story: ReplyStory) -> ReplyStoryAnswer:
    """``operator.replyStory``'s answer: the request, its runs, the messages that carried it."""
    return {
        "reply": reply_out(story.reply),
        "runs": [run_out(run) for run in story.runs],
        "requestMessage": message_out(story.request_message) if story.request_message else None,
        "replyMessage": message_out(story.reply_message) if story.reply_message else None,
        "sourceMessages": [message_out(message) for message in story.source_messages],
    }


def check_out(check: Check) -> CheckOut:
    """One doctor's check: ``{name, status, summary, fix, items}``."""
    return {
        "name": check.name,
        "status": check.status,
        "summary": check.summary,
        "fix": check.fix,
        "items": check.items,
    }


def doctor_report_out(report: Report) -> DoctorReportAnswer:
    """``operator.doctor``'s answer: ``{ok, version, checks}``, ``ok`` when no check needs
    action."""
    return {
        "ok": report.ok,
        "version": report.version,
        "checks": [check_out(check) for check in report.checks],
    }


def repaired_row_out(row: RepairedRow) -> RepairedRowOut:
    """A row ``repair-json`` rewrote (or would): where, and why each place was kept as text."""
    return {
        "table": row.column.table,
        "column": row.column.column,
        "id": row.key,
        "paths": [{"path": path, "reason": reason} for path, reason in row.places],
    }


def column_counts_out(counts: ColumnCounts) -> ColumnCountsOut:
    """What ``repair-json``'s scan of one column found."""
    return {
        "table": counts.column.table,
        "column": counts.column.column,
        "rowsRead": counts.rows_read,
        "rowsRewritten": counts.rows_rewritten,
        "rowsChangedMeanwhile": counts.rows_changed_meanwhile,
    }


def repair_summary_out(summary: RepairSummary) -> RepairSummaryAnswer:
    """What ``repair-json`` found and rewrote, as its ``--json`` prints it."""
    return {
        "dryRun": summary.dry_run,
        "rowsRewritten": summary.rows_rewritten,
        "columns": [column_counts_out(counts) for counts in summary.columns],
        "rows": [repaired_row_out(row) for row in summary.rows],
    }
