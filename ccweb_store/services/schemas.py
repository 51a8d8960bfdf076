"""The camelCase JSON shapes of SPEC §3 (Session, Message, Reply, Run) and of conversation
credentials, built from rows.

Protocol modules and the CLI use these; nothing else decides how an object looks on the wire.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

import sqlalchemy as sa
from sqlalchemy.types import TypeDecorator

from ccweb_store.store.models import (
    ConversationCredential,
    Message,
    ReplyRequest,
    Run,
    Session,
    UTCDateTime,
    sqlite_text_to_datetime,
)

#: The fields of ``iso`` of a UTC datetime, looked up rather than formatted: a quarter of the
#: cost of ``isoformat(timespec="milliseconds")`` with "Z" for the zone, which it gives.
_TWO_DIGITS = tuple(f"{n:02d}" for n in range(100))
_THREE_DIGITS = tuple(f"{n:03d}" for n in range(1000))


def iso(value: datetime | None) -> str | None:
    """ISO 8601 UTC with milliseconds and a ``Z``, as cc-web writes timestamps."""
    if value is None:
        return None
    if value.tzinfo is UTC:  # every datetime read from the database
        return (
            f"{value.year:04d}-{_TWO_DIGITS[value.month]}-{_TWO_DIGITS[value.day]}"
            f"T{_TWO_DIGITS[value.hour]}:{_TWO_DIGITS[value.minute]}:"
            f"{_TWO_DIGITS[value.second]}.{_THREE_DIGITS[value.microsecond // 1000]}Z"
        )
    return value.isoformat(timespec="milliseconds").replace("+00:00", "Z")


class IsoText(TypeDecorator[str]):
    """A timestamp column read as the text ``iso`` makes of it, for a query whose rows go out
    as they are (``sa.type_coerce(column, IsoText())``).

    SQLite stores a timestamp as ``YYYY-MM-DD HH:MM:SS.ffffff`` in UTC, whose ``iso`` is the
    same characters rearranged: that takes a fifth of parsing a datetime and formatting it
    back. Text of another shape, and PostgreSQL's datetimes, go the usual way.
    """

    impl = sa.DateTime(timezone=True)
    cache_ok = True

    def result_processor(self, dialect: sa.Dialect, coltype: Any) -> Callable[[Any], Any]:
        if dialect.name == "sqlite":
            return iso_of_sqlite_text
        as_datetime = UTCDateTime().result_processor(dialect, coltype)

        def read(value: Any) -> str | None:
            return iso(as_datetime(value) if as_datetime is not None else value)

        return read


def iso_of_sqlite_text(value: str | None) -> str | None:
    """``iso`` of a timestamp as SQLite stores it (``IsoText``): the characters rearranged when
    it has the store's shape, else parsed (``UTCDateTime``'s reading) and formatted."""
    if value is not None and len(value) == 26 and value[10] == " " and value[19] == ".":
        return f"{value[:10]}T{value[11:23]}Z"
    return iso(sqlite_text_to_datetime(value))


def session_out(row: Session, *, active_run: Run | None = None) -> dict[str, Any]:
    return {
        "id": row.id,
        "title": row.title,
        "agent": row.agent,
        "cwd": row.cwd,
        "createdAt": iso(row.created_at),
        "updatedAt": iso(row.updated_at),
        "archived": row.archived_at is not None,
        "running": active_run is not None and active_run.status == "running",
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
