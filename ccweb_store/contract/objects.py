"""The objects of SPEC §3 as the wire shows them: Session, Message, Reply, Run, and a
conversation credential without its token. Message, Reply and Run are their rows, read by
attribute (``Run.model_validate(row)``); a Session adds its active run, a credential whether it
is active at a time."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Annotated, Any

from pydantic import BeforeValidator, Field

from ccweb_store.contract.base import Output, Timestamp
from ccweb_store.domain.kinds import RunStatus
from ccweb_store.domain.rows import Conversation, ConversationCredential
from ccweb_store.domain.rows import Run as RunRow


class SessionFields(Output):
    """What every answer about a conversation says of it."""

    id: str
    title: str | None
    agent: str | None
    cwd: str | None
    created_at: Timestamp
    updated_at: Timestamp
    archived: bool
    agent_session_id: str | None
    box: str | None

    @staticmethod
    def fields_of(row: Conversation) -> dict[str, Any]:
        """The fields a conversation's row gives, by name."""
        return {
            "id": row.id,
            "title": row.title,
            "agent": row.agent,
            "cwd": row.cwd,
            "created_at": row.created_at,
            "updated_at": row.updated_at,
            "archived": row.archived_at is not None,
            "agent_session_id": row.agent_session_id,
            "box": row.box,
        }


class Session(SessionFields):
    """A Session: the conversation, and its active run (queued or running), if any."""

    running: bool
    active_run_id: str | None

    @classmethod
    def of(cls, row: Conversation, active_run: RunRow | None = None) -> Session:
        running = active_run is not None and active_run.status == RunStatus.RUNNING
        active_id = active_run.id if active_run is not None else None
        return cls(**cls.fields_of(row), running=running, active_run_id=active_id)


def _metadata(value: object) -> object:
    return {} if value is None else value


class Message(Output):
    """A Message."""

    id: str
    session_id: str
    seq: int
    role: str
    content: str
    created_at: Timestamp | None
    #: The row's ``metadata_`` (the name its table's class gives the column); none is ``{}``.
    metadata: Annotated[dict[str, Any], BeforeValidator(_metadata)] = Field(
        validation_alias="metadata_"
    )


class Reply(Output):
    """A reply request."""

    request_id: str
    status: str
    source_conversation_id: str
    source_title: str | None
    target_conversation_id: str
    target_title: str | None
    message_id: str | None
    hop_count: int
    source_auto_run: bool
    original_request: str | None
    reply_text: str | None
    created_at: Timestamp
    completed_at: Timestamp | None
    returned_at: Timestamp | None
    reply_message_id: str | None
    last_error: str | None


class Run(Output):
    """A Run."""

    id: str
    session_id: str
    kind: str
    status: str
    runtime_text: str | None
    reply_request_id: str | None
    hop_count: int
    worker_id: str | None
    lease_expires_at: Timestamp | None
    attempts: int
    created_at: Timestamp
    started_at: Timestamp | None
    finished_at: Timestamp | None
    output: str | None
    error: str | None


class Credential(Output):
    """A conversation credential, without its token (shown once, when minted)."""

    id: str
    session_id: str
    label: str | None
    hop_count: int
    created_at: Timestamp
    expires_at: Timestamp | None
    revoked_at: Timestamp | None
    active: bool

    @classmethod
    def of(cls, row: ConversationCredential, *, now: datetime | None = None) -> Credential:
        """The credential as of ``now``: active unless revoked or expired."""
        current = now or datetime.now(UTC)
        active = row.revoked_at is None and (row.expires_at is None or row.expires_at > current)
        return cls(
            id=row.id,
            session_id=row.session_id,
            label=row.label,
            hop_count=row.hop_count,
            created_at=row.created_at,
            expires_at=row.expires_at,
            revoked_at=row.revoked_at,
            active=active,
        )
