"""The rows the store's repositories return: one immutable value per table row.

Each is a ``NamedTuple`` whose fields are its table's columns, snake_case, in the table's
column order (the order of ``SELECT *`` and of ``RETURNING *``), so a repository builds one
from the driver's row with the type's own constructor, ``Run._make(row)``. A value is a
snapshot: a statement that changes its row later leaves it as it is, and a repository method
that changes a row returns the row as changed. ``models.py`` declares the tables (its classes,
``RunRow`` and so on, are for the schema and Alembic only); ``tests/test_rows.py`` holds each
value's fields to its table's columns.

No SQLAlchemy here: the services, the contract's answers (built from these by their
attributes), the console and the CLI read these.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any, NamedTuple


class Conversation(NamedTuple):
    """A conversation (``sessions``; ``conversationId`` = ``id``)."""

    id: str
    title: str | None
    agent: str | None
    cwd: str | None
    created_at: datetime
    updated_at: datetime
    archived_at: datetime | None
    extra: dict[str, Any] | None
    agent_session_id: str | None
    #: The real path its runs must stay under (``SessionRow.box``), or None.
    box: str | None
    last_message_at: datetime | None


class Message(NamedTuple):
    """One message of a conversation (``messages``); ``seq`` orders it within its session."""

    id: str
    session_id: str
    seq: int
    role: str
    content: str
    created_at: datetime | None
    #: The ``metadata`` column (the name the table's ORM class gives it).
    metadata_: dict[str, Any] | None


class ReplyRequest(NamedTuple):
    """A ``return_and_continue`` request (``reply_requests``)."""

    request_id: str
    message_id: str | None
    source_conversation_id: str
    source_title: str | None
    target_conversation_id: str
    target_title: str | None
    status: str
    hop_count: int
    source_auto_run: bool
    reply_text: str | None
    created_at: datetime
    completed_at: datetime | None
    returned_at: datetime | None
    reply_message_id: str | None
    last_error: str | None
    original_request: str | None
    extra: dict[str, Any] | None


class Run(NamedTuple):
    """One agent turn in one conversation (``runs``)."""

    id: str
    session_id: str
    kind: str
    status: str
    runtime_text: str | None
    reply_request_id: str | None
    hop_count: int
    worker_id: str | None
    lease_expires_at: datetime | None
    attempts: int
    created_at: datetime
    started_at: datetime | None
    finished_at: datetime | None
    output: str | None
    error: str | None


class ConversationCredential(NamedTuple):
    """A credential bound to one conversation (``conversation_credentials``)."""

    id: str
    session_id: str
    label: str | None
    hop_count: int
    created_at: datetime
    expires_at: datetime | None
    revoked_at: datetime | None


class CopyMarker(NamedTuple):
    """The copy ``copy`` wrote, or is writing, into this database (``copy_marker``)."""

    name: str
    source_id: str
    source_url: str
    state: str
    started_at: datetime
    finished_at: datetime | None


#: Every value type, each with the name of the table whose rows it holds.
class PendingReplyRow(NamedTuple):
    """One row of ``pending_replies`` with the full request it describes."""

    reply: ReplyRequest
    age_seconds: int
    #: The conversations' current titles, else the ones stored with the request.
    source_title: str | None
    target_title: str | None
    original_request_known: bool
    source_running: bool
    target_run_id: str | None
    target_run_status: str | None
    target_run_worker_id: str | None
    target_run_lease_expires_at: datetime | None
    target_run_attempts: int | None


class ActivityRow(NamedTuple):
    """One row of ``conversation_activity``."""

    session_id: str
    title: str | None
    message_count: int
    last_message_at: datetime | None
    active_run_id: str | None
    active_run_kind: str | None
    active_run_status: str | None
    #: Open reply requests by status (every one of ``OPEN_REPLY_STATUSES``) that the
    #: conversation sent, and that it was asked.
    open_as_source: dict[str, int]
    open_as_target: dict[str, int]


class Party(NamedTuple):
    """A conversation as a send names it: what the rows the send writes copy of it."""

    id: str
    title: str | None


TABLE_OF: dict[type[tuple[Any, ...]], str] = {
    Conversation: "sessions",
    Message: "messages",
    ReplyRequest: "reply_requests",
    Run: "runs",
    ConversationCredential: "conversation_credentials",
    CopyMarker: "copy_marker",
}
