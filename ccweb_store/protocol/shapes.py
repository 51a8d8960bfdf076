"""The wire's camelCase JSON, shaped from what the services return: the objects of SPEC §3
(Session, Message, Reply, Run), credentials, and the answers of the tools and host methods.

Services speak Python (rows and small dataclasses); the edges (``http/rpc.py``'s table, the
tool registry, the console, the CLI's ``--json``) shape their results here, so nothing else
decides how an answer looks on the wire.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from ccweb_store.domain.kinds import ReplyStatus, RunStatus
from ccweb_store.domain.timestamps import iso
from ccweb_store.services.conversations import (
    ConversationListing,
    MessagesAfter,
    MessagesBefore,
    SessionPage,
    SessionView,
)
from ccweb_store.services.credentials import CredentialList, MintedCredential
from ccweb_store.services.debugging import ReplyStory
from ccweb_store.services.doctor import Check, Report
from ccweb_store.services.event_reads import EventPage
from ccweb_store.services.json_repair import ColumnCounts, RepairedRow, RepairSummary
from ccweb_store.services.messaging import CreatedConversation, SendResult
from ccweb_store.services.operator import (
    ConversationDetail,
    ConversationsPage,
    ConversationState,
    PendingReplies,
)
from ccweb_store.services.prompt_forms import PromptAnswer, PromptCard
from ccweb_store.services.replies import ReplyPage
from ccweb_store.services.run_endings import Completion
from ccweb_store.services.runs import ClaimResult
from ccweb_store.services.user_inputs import UserInputs
from ccweb_store.store.event_feed import Event
from ccweb_store.store.repositories.debugging import ActivityRow, PendingReplyRow
from ccweb_store.store.rows import Conversation, ConversationCredential, Message, ReplyRequest, Run

# ---- the objects of SPEC §3 and credentials ------------------------------------------------


def session_fields(row: Conversation) -> dict[str, Any]:
    """What every answer about a conversation says of it."""
    return {
        "id": row.id,
        "title": row.title,
        "agent": row.agent,
        "cwd": row.cwd,
        "createdAt": iso(row.created_at),
        "updatedAt": iso(row.updated_at),
        "archived": row.archived_at is not None,
    }


def session_out(row: Conversation, *, active_run: Run | None = None) -> dict[str, Any]:
    return session_fields(row) | {
        "running": active_run is not None and active_run.status == RunStatus.RUNNING,
        "activeRunId": active_run.id if active_run is not None else None,
    }


def message_out(row: Message) -> dict[str, Any]:
    return {
        "id": row.id,
        "sessionId": row.session_id,
        "seq": row.seq,
        "role": row.role,
        "content": row.content,
        "createdAt": iso(row.created_at),
        "metadata": row.metadata_ or {},
    }


def reply_out(row: ReplyRequest) -> dict[str, Any]:
    return {
        "requestId": row.request_id,
        "status": row.status,
        "sourceConversationId": row.source_conversation_id,
        "sourceTitle": row.source_title,
        "targetConversationId": row.target_conversation_id,
        "targetTitle": row.target_title,
        "messageId": row.message_id,
        "hopCount": row.hop_count,
        "sourceAutoRun": row.source_auto_run,
        "originalRequest": row.original_request,
        "replyText": row.reply_text,
        "createdAt": iso(row.created_at),
        "completedAt": iso(row.completed_at),
        "returnedAt": iso(row.returned_at),
        "replyMessageId": row.reply_message_id,
        "lastError": row.last_error,
    }


def run_out(row: Run) -> dict[str, Any]:
    return {
        "id": row.id,
        "sessionId": row.session_id,
        "kind": row.kind,
        "status": row.status,
        "runtimeText": row.runtime_text,
        "replyRequestId": row.reply_request_id,
        "hopCount": row.hop_count,
        "workerId": row.worker_id,
        "leaseExpiresAt": iso(row.lease_expires_at),
        "attempts": row.attempts,
        "createdAt": iso(row.created_at),
        "startedAt": iso(row.started_at),
        "finishedAt": iso(row.finished_at),
        "output": row.output,
        "error": row.error,
    }


def credential_out(row: ConversationCredential, *, now: datetime | None = None) -> dict[str, Any]:
    """A conversation credential without its token (which is shown once, when minted)."""
    current = now or datetime.now(UTC)
    return {
        "id": row.id,
        "sessionId": row.session_id,
        "label": row.label,
        "hopCount": row.hop_count,
        "createdAt": iso(row.created_at),
        "expiresAt": iso(row.expires_at),
        "revokedAt": iso(row.revoked_at),
        "active": row.revoked_at is None and (row.expires_at is None or row.expires_at > current),
    }


def runs_out(rows: list[Run]) -> dict[str, Any]:
    """``run.list``'s answer."""
    return {"runs": [run_out(row) for row in rows]}


def completion_out(result: Completion) -> dict[str, Any]:
    """The answer of ``run.complete`` and ``run.cancel``: the run, its output message, the
    replies it moved."""
    return {
        "run": run_out(result.run),
        "message": message_out(result.message) if result.message is not None else None,
        "replies": [reply_out(reply) for reply in result.replies],
    }


def minted_out(minted: MintedCredential) -> dict[str, Any]:
    """``credential.mint``'s answer: the credential, its token (shown only here) and, when
    the mint replaced a label's credentials, those it revoked."""
    out: dict[str, Any] = {"credential": credential_out(minted.row), "token": minted.token}
    if minted.revoked is not None:
        out["revoked"] = [credential_out(old) for old in minted.revoked]
    return out


def claim_out(result: ClaimResult) -> dict[str, Any]:
    """``run.claim``'s answer: ``{run}`` (None: nothing to claim), with ``conversation`` and
    ``credential`` when the claim was asked for them and took a run."""
    if result.run is None:
        return {"run": None}
    out: dict[str, Any] = {"run": run_out(result.run)}
    if result.conversation is not None:
        out["conversation"] = session_out(result.conversation)
    if result.credential is not None:
        out["credential"] = minted_out(result.credential)
    return out


def credentials_out(listed: CredentialList) -> dict[str, Any]:
    """``credential.list``'s answer: each credential active or not as of its reading."""
    return {"credentials": [credential_out(row, now=listed.as_of) for row in listed.rows]}


# ---- conversations and messages ------------------------------------------------------------


def session_view_out(view: SessionView) -> dict[str, Any]:
    """A Session with its active run (``session.get``, ``session.create``, ``session.archive``)."""
    return session_out(view.row, active_run=view.active_run)


def session_page_out(page: SessionPage) -> dict[str, Any]:
    """``session.list``'s answer: ``{sessions, nextCursor}``."""
    return {
        "sessions": [session_view_out(view) for view in page.sessions],
        "nextCursor": page.next_cursor,
    }


def messages_before_out(page: MessagesBefore) -> dict[str, Any]:
    """``message.recent``'s answer: ``{messages, nextBeforeSeq}``."""
    return {
        "messages": [message_out(row) for row in page.messages],
        "nextBeforeSeq": page.next_before_seq,
    }


def messages_after_out(page: MessagesAfter) -> dict[str, Any]:
    """``message.list``'s answer: ``{messages, nextAfterSeq}``."""
    return {
        "messages": [message_out(row) for row in page.messages],
        "nextAfterSeq": page.next_after_seq,
    }


def conversation_listing_out(listing: ConversationListing) -> dict[str, Any]:
    """``ccweb_list_conversations``'s answer: metadata only, never message text."""
    return {
        "conversations": [
            {
                "conversationId": row.id,
                "title": row.title,
                "agent": row.agent,
                "createdAt": iso(row.created_at),
                "updatedAt": iso(row.updated_at),
                "running": row.id in listing.running,
                "messageCount": listing.message_counts.get(row.id, 0),
                "isSource": row.id == listing.source_id,
            }
            for row in listing.rows
        ],
        "hasMore": listing.has_more,
    }


def user_inputs_out(found: UserInputs) -> dict[str, Any]:
    """``ccweb_list_user_inputs``'s answer."""
    return {
        "conversationId": found.conversation_id,
        "limit": found.limit,
        "maxChars": found.max_chars,
        "totalChars": found.total_chars,
        "returned": len(found.inputs),
        "hasMore": found.has_more,
        "inputs": [
            {
                "messageId": item.message_id,
                "createdAt": item.created_at,
                "content": item.content,
                "contentChars": len(item.content),
                "originalChars": item.original_chars,
                "truncated": len(item.content) < item.original_chars,
            }
            for item in found.inputs
        ],
    }


# ---- sends and replies ---------------------------------------------------------------------


def send_out(sent: SendResult) -> dict[str, Any]:
    """``ccweb_send_message``'s answer: what was queued, and for ``return_and_continue`` the
    waiting request and how its reply comes back."""
    out: dict[str, Any] = {
        "ok": True,
        "replyMode": sent.reply_mode,
        "messageId": sent.message_id,
        "runId": sent.run_id,
        "targetConversationId": sent.target.id,
        "targetTitle": sent.target.title,
        "deliveryStatus": RunStatus.QUEUED,
    }
    if sent.request_id is not None:
        out |= {
            "requestId": sent.request_id,
            "status": ReplyStatus.WAITING,
            "replyDelivery": "automatic",
            "sourceAutoRun": True,
        }
    return out


def created_conversation_out(created: CreatedConversation) -> dict[str, Any]:
    """``ccweb_create_conversation``'s answer: the conversation and, when it was sent a first
    message, that send (its reply request's status as ``replyStatus``)."""
    out: dict[str, Any] = {
        "ok": True,
        "conversationId": created.conversation_id,
        "title": created.title,
    }
    sent = created.sent
    if sent is not None:
        shown = send_out(sent)
        out |= {
            "replyMode": shown["replyMode"],
            "messageId": shown["messageId"],
            "runId": shown["runId"],
            "deliveryStatus": shown["deliveryStatus"],
        }
        if sent.request_id is not None:
            out |= {
                "requestId": shown["requestId"],
                "replyStatus": shown["status"],
                "replyDelivery": shown["replyDelivery"],
                "sourceAutoRun": shown["sourceAutoRun"],
            }
    return out


def pending_reply_answer_out(found: ReplyRequest | list[ReplyRequest]) -> dict[str, Any]:
    """``ccweb_get_pending_reply``'s answer: the one request asked for, or ``{replies, count}``."""
    if isinstance(found, ReplyRequest):
        return reply_out(found)
    return {"replies": [reply_out(row) for row in found], "count": len(found)}


def reply_page_out(page: ReplyPage) -> dict[str, Any]:
    """``reply.list``'s answer: ``{replies, nextCursor}``."""
    return {"replies": [reply_out(row) for row in page.replies], "nextCursor": page.next_cursor}


def expired_out(expired: int) -> dict[str, Any]:
    """``reply.expire``'s answer: how many requests it failed."""
    return {"expired": expired}


# ---- prompt forms --------------------------------------------------------------------------


def prompt_card_out(card: PromptCard) -> dict[str, Any]:
    """``ccweb_prompt_user``'s answer."""
    return {"ok": True, "promptId": card.prompt_id, "messageId": card.message_id}


def prompt_answer_out(answer: PromptAnswer) -> dict[str, Any]:
    """``prompt.respond``'s answer: the user message with the answers and the run it queued."""
    return {"message": message_out(answer.message), "run": run_out(answer.run)}


# ---- the operator's views ------------------------------------------------------------------


def pending_reply_out(row: PendingReplyRow) -> dict[str, Any]:
    """A ``pending_replies`` row on the wire: the Reply plus the view's debugging columns."""
    target_run = None
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


def activity_out(row: ActivityRow) -> dict[str, Any]:
    """A ``conversation_activity`` row on the wire: what a conversation is doing now."""
    active_run = None
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


def conversation_state_out(state: ConversationState) -> dict[str, Any]:
    """A conversation as the operator sees it: the Session's fields, its active run, its
    messages and the open requests it made (``openAsSource``) and must answer
    (``openAsTarget``), by status."""
    row, activity = state.row, state.activity
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


def conversations_page_out(page: ConversationsPage) -> dict[str, Any]:
    """``operator.conversations``' answer: ``{conversations, count, hasMore}``."""
    conversations = [conversation_state_out(state) for state in page.conversations]
    return {"conversations": conversations, "count": len(conversations), "hasMore": page.has_more}


def conversation_detail_out(detail: ConversationDetail) -> dict[str, Any]:
    """``operator.conversation``'s answer: ``{conversation, openRequests, runs}``."""
    return {
        "conversation": conversation_state_out(detail.conversation),
        "openRequests": [pending_reply_out(item) for item in detail.open_requests],
        "runs": [run_out(run) for run in detail.runs],
    }


def pending_replies_out(pending: PendingReplies) -> dict[str, Any]:
    """``operator.pendingReplies``' answer: ``{replies, count}``, and with a conversation asked
    about, its activity (``conversation``, null when it does not exist)."""
    out: dict[str, Any] = {
        "replies": [pending_reply_out(item) for item in pending.replies],
        "count": len(pending.replies),
    }
    if pending.conversation_asked:
        activity = pending.activity
        out["conversation"] = activity_out(activity) if activity is not None else None
    return out


def reply_story_out(story: ReplyStory) -> dict[str, Any]:
    """``operator.replyStory``'s answer: the request, its runs, the messages that carried it."""
    return {
        "reply": reply_out(story.reply),
        "runs": [run_out(run) for run in story.runs],
        "requestMessage": message_out(story.request_message) if story.request_message else None,
        "replyMessage": message_out(story.reply_message) if story.reply_message else None,
        "sourceMessages": [message_out(message) for message in story.source_messages],
    }


def check_out(check: Check) -> dict[str, Any]:
    """One doctor's check: ``{name, status, summary, fix, items}``."""
    return {
        "name": check.name,
        "status": check.status,
        "summary": check.summary,
        "fix": check.fix,
        "items": check.items,
    }


def doctor_report_out(report: Report) -> dict[str, Any]:
    """``operator.doctor``'s answer: ``{ok, version, checks}``, ``ok`` when no check needs
    action."""
    return {
        "ok": report.ok,
        "version": report.version,
        "checks": [check_out(check) for check in report.checks],
    }


def repaired_row_out(row: RepairedRow) -> dict[str, Any]:
    """A row ``repair-json`` rewrote (or would): where, and why each place was kept as text."""
    return {
        "table": row.column.table,
        "column": row.column.column,
        "id": row.key,
        "paths": [{"path": path, "reason": reason} for path, reason in row.places],
    }


def column_counts_out(counts: ColumnCounts) -> dict[str, Any]:
    """What ``repair-json``'s scan of one column found."""
    return {
        "table": counts.column.table,
        "column": counts.column.column,
        "rowsRead": counts.rows_read,
        "rowsRewritten": counts.rows_rewritten,
        "rowsChangedMeanwhile": counts.rows_changed_meanwhile,
    }


def repair_summary_out(summary: RepairSummary) -> dict[str, Any]:
    """What ``repair-json`` found and rewrote, as its ``--json`` prints it."""
    return {
        "dryRun": summary.dry_run,
        "rowsRewritten": summary.rows_rewritten,
        "columns": [column_counts_out(counts) for counts in summary.columns],
        "rows": [repaired_row_out(row) for row in summary.rows],
    }


# ---- events --------------------------------------------------------------------------------


def event_out(event: Event) -> dict[str, Any]:
    """An event as clients see it: its id, type and time, and the ids it concerns."""
    out: dict[str, Any] = {"id": int(event["id"]), "type": event["type"]}
    for column, key in _ID_KEYS:
        value = event[column]
        if value is not None:
            out[key] = value
    out["createdAt"] = iso(event["created_at"])
    if event["payload"]:
        out["payload"] = event["payload"]
    return out


_ID_KEYS = (
    ("conversation_id", "conversationId"),
    ("peer_conversation_id", "peerConversationId"),
    ("message_id", "messageId"),
    ("run_id", "runId"),
    ("request_id", "requestId"),
)


def event_page_out(page: EventPage) -> dict[str, Any]:
    """``events.list``'s answer: ``{events, nextAfter, latestId}``."""
    return {
        "events": [event_out(event) for event in page.events],
        "nextAfter": page.next_after,
        "latestId": page.latest_id,
    }
