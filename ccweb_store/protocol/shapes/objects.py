"""The objects of SPEC §3 (Session, Message, Reply, Run) and credentials as the wire shows them,
and the answers made of runs and credentials (``run.*``, ``credential.*``)."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any, NotRequired

from typing_extensions import TypedDict

from ccweb_store.domain.kinds import RunStatus
from ccweb_store.domain.timestamps import iso
from ccweb_store.protocol.shapes.wire import closed
from ccweb_store.services.credentials import CredentialList, MintedCredential
from ccweb_store.services.run_endings import Completion
from ccweb_store.services.runs import ClaimResult
from ccweb_store.store.rows import Conversation, ConversationCredential, Message, ReplyRequest, Run


@closed
class SessionFields(TypedDict):
    """What every answer about a conversation says of it."""

    id: str
    title: str | None
    agent: str | None
    cwd: str | None
    createdAt: str
    updatedAt: str
    archived: bool
    agentSessionId: str | None
    #: The real path its runs must stay under (a worker refuses to run outside it), or None.
    box: str | None


@closed
class SessionOut(SessionFields):
    """A Session (SPEC §3): its fields and whether it runs now."""

    running: bool
    activeRunId: str | None


@closed
class MessageOut(TypedDict):
    """A Message (SPEC §3)."""

    id: str
    sessionId: str
    seq: int
    role: str
    content: str
    createdAt: str | None
    metadata: dict[str, Any]


@closed
class ReplyOut(TypedDict):
    """A Reply request (SPEC §3)."""

    requestId: str
    status: str
    sourceConversationId: str
    sourceTitle: str | None
    targetConversationId: str
    targetTitle: str | None
    messageId: str | None
    hopCount: int
    sourceAutoRun: bool
    originalRequest: str | None
    replyText: str | None
    createdAt: str
    completedAt: str | None
    returnedAt: str | None
    replyMessageId: str | None
    lastError: str | None


@closed
class RunOut(TypedDict):
    """A Run (SPEC §3)."""

    id: str
    sessionId: str
    kind: str
    status: str
    runtimeText: str | None
    replyRequestId: str | None
    hopCount: int
    workerId: str | None
    leaseExpiresAt: str | None
    attempts: int
    createdAt: str
    startedAt: str | None
    finishedAt: str | None
    output: str | None
    error: str | None


@closed
class CredentialOut(TypedDict):
    """A conversation credential, without its token."""

    id: str
    sessionId: str
    label: str | None
    hopCount: int
    createdAt: str
    expiresAt: str | None
    revokedAt: str | None
    active: bool


@closed
class RunListAnswer(TypedDict):
    """``run.list``'s answer."""

    runs: list[RunOut]


@closed
class CompletionAnswer(TypedDict):
    """``run.complete``'s and ``run.cancel``'s answer."""

    run: RunOut
    message: MessageOut | None
    replies: list[ReplyOut]


@closed
class MintedAnswer(TypedDict):
    """``credential.mint``'s answer (and a claim's ``credential``)."""

    credential: CredentialOut
    token: str
    revoked: NotRequired[list[CredentialOut]]


@closed
class ClaimAnswer(TypedDict):
    """``run.claim``'s answer."""

    run: RunOut | None
    conversation: NotRequired[SessionOut]
    credential: NotRequired[MintedAnswer]


@closed
class CredentialListAnswer(TypedDict):
    """``credential.list``'s answer."""

    credentials: list[CredentialOut]


def session_fields(row: Conversation) -> SessionFields:
    """What every answer about a conversation says of it."""
    return {
        "id": row.id,
        "title": row.title,
        "agent": row.agent,
        "cwd": row.cwd,
        "createdAt": iso(row.created_at),
        "updatedAt": iso(row.updated_at),
        "archived": row.archived_at is not None,
        "agentSessionId": row.agent_session_id,
        "box": row.box,
    }


def session_out(row: Conversation, *, active_run: Run | None = None) -> SessionOut:
    return {
        **session_fields(row),
        "running": active_run is not None and active_run.status == RunStatus.RUNNING,
        "activeRunId": active_run.id if active_run is not None else None,
    }


def message_out(row: Message) -> MessageOut:
    return {
        "id": row.id,
        "sessionId": row.session_id,
        "seq": row.seq,
        "role": row.role,
        "content": row.content,
        "createdAt": iso(row.created_at),
        "metadata": row.metadata_ or {},
    }


def reply_out(row: ReplyRequest) -> ReplyOut:
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


def run_out(row: Run) -> RunOut:
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


def credential_out(row: ConversationCredential, *, now: datetime | None = None) -> CredentialOut:
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


def runs_out(rows: list[Run]) -> RunListAnswer:
    """``run.list``'s answer."""
    return {"runs": [run_out(row) for row in rows]}


def completion_out(result: Completion) -> CompletionAnswer:
    """The answer of ``run.complete`` and ``run.cancel``: the run, its output message, the
    replies it moved."""
    return {
        "run": run_out(result.run),
        "message": message_out(result.message) if result.message is not None else None,
        "replies": [reply_out(reply) for reply in result.replies],
    }


def minted_out(minted: MintedCredential) -> MintedAnswer:
    """``credential.mint``'s answer: the credential, its token (shown only here) and, when
    the mint replaced a label's credentials, those it revoked."""
    out: MintedAnswer = {"credential": credential_out(minted.row), "token": minted.token}
    if minted.revoked is not None:
        out["revoked"] = [credential_out(old) for old in minted.revoked]
    return out


def claim_out(result: ClaimResult) -> ClaimAnswer:
    """``run.claim``'s answer: ``{run}`` (None: nothing to claim), with ``conversation`` and
    ``credential`` when the claim was asked for them and took a run."""
    if result.run is None:
        return {"run": None}
    out: ClaimAnswer = {"run": run_out(result.run)}
    if result.conversation is not None:
        out["conversation"] = session_out(result.conversation)
    if result.credential is not None:
        out["credential"] = minted_out(result.credential)
    return out


def credentials_out(listed: CredentialList) -> CredentialListAnswer:
    """``credential.list``'s answer: each credential active or not as of its reading."""
    return {"credentials": [credential_out(row, now=listed.as_of) for row in listed.rows]}
