"""The debugging views' rows (``services.debugging``): ``pending_replies`` (each open reply
request with what holds it up) and ``conversation_activity`` (what a conversation is doing).

The views come from migration 0003; here they are typed table constructs (not ORM metadata),
so timestamps and booleans read the same on SQLite and PostgreSQL. Everything here only reads.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any

import sqlalchemy as sa

from ccweb_store.domain.ids import OPEN_REPLY_STATUSES
from ccweb_store.domain.rows import ActivityRow, PendingReplyRow, ReplyRequest
from ccweb_store.store.column_types import UTCDateTime
from ccweb_store.store.repositories.base import REPLIES, Repository

pending_replies = sa.table(
    "pending_replies",
    sa.column("request_id", sa.String),
    sa.column("status", sa.String),
    sa.column("source_conversation_id", sa.String),
    sa.column("source_title", sa.Text),
    sa.column("target_conversation_id", sa.String),
    sa.column("target_title", sa.Text),
    sa.column("age_seconds", sa.BigInteger),
    sa.column("hop_count", sa.Integer),
    sa.column("source_auto_run", sa.Boolean),
    sa.column("original_request_known", sa.Boolean),
    sa.column("last_error", sa.Text),
    sa.column("created_at", UTCDateTime()),
    sa.column("target_run_id", sa.String),
    sa.column("target_run_status", sa.String),
    sa.column("target_run_worker_id", sa.String),
    sa.column("target_run_lease_expires_at", UTCDateTime()),
    sa.column("target_run_attempts", sa.Integer),
    sa.column("source_running", sa.Boolean),
)


def _open_count(status: str, side: str) -> str:
    """The ``conversation_activity`` column counting a conversation's open requests in
    ``status`` that it sent (``side`` "source") or was asked (``side`` "target")."""
    return f"{status}_as_{side}"


def _open_counts(row: Mapping[str, Any], side: str) -> dict[str, int]:
    """A ``conversation_activity`` row's open requests on ``side``, by status."""
    return {status: int(row[_open_count(status, side)]) for status in OPEN_REPLY_STATUSES}


conversation_activity = sa.table(
    "conversation_activity",
    sa.column("session_id", sa.String),
    sa.column("title", sa.Text),
    sa.column("message_count", sa.BigInteger),
    sa.column("last_message_at", UTCDateTime()),
    sa.column("active_run_id", sa.String),
    sa.column("active_run_kind", sa.String),
    sa.column("active_run_status", sa.String),
    *(
        sa.column(_open_count(status, side), sa.BigInteger)
        for side in ("source", "target")
        for status in OPEN_REPLY_STATUSES
    ),
)


class DebuggingRepository(Repository):
    """Rows of the debugging views."""

    async def activities(self, session_ids: Sequence[str]) -> list[ActivityRow]:
        """The ``conversation_activity`` rows of these conversations (those that exist)."""
        view = conversation_activity.c
        stmt = sa.select(conversation_activity).where(view.session_id.in_(list(session_ids)))
        rows = list((await self._execute(stmt)).mappings())
        return [
            ActivityRow(
                session_id=row["session_id"],
                title=row["title"],
                message_count=int(row["message_count"]),
                last_message_at=row["last_message_at"],
                active_run_id=row["active_run_id"],
                active_run_kind=row["active_run_kind"],
                active_run_status=row["active_run_status"],
                open_as_source=_open_counts(row, "source"),
                open_as_target=_open_counts(row, "target"),
            )
            for row in rows
        ]

    async def pending_replies(
        self,
        *,
        statuses: Sequence[str] | None,
        conversation_id: str | None,
        created_before: datetime | None,
        limit: int,
    ) -> list[PendingReplyRow]:
        """Up to ``limit`` rows of ``pending_replies``, oldest first: those in ``statuses``
        (any open one when none given), with ``conversation_id`` on either side, made before
        ``created_before``, when given."""
        view = pending_replies.c
        stmt = (
            sa.select(
                *REPLIES.c,
                view.age_seconds,
                view.source_title.label("view_source_title"),
                view.target_title.label("view_target_title"),
                view.original_request_known,
                view.source_running,
                view.target_run_id,
                view.target_run_status,
                view.target_run_worker_id,
                view.target_run_lease_expires_at,
                view.target_run_attempts,
            )
            .join(pending_replies, view.request_id == REPLIES.c.request_id)
            .order_by(view.created_at, view.request_id)
            .limit(limit)
        )
        if statuses:
            stmt = stmt.where(view.status.in_(statuses))
        if conversation_id is not None:
            stmt = stmt.where(
                sa.or_(
                    view.source_conversation_id == conversation_id,
                    view.target_conversation_id == conversation_id,
                )
            )
        if created_before is not None:
            stmt = stmt.where(view.created_at < created_before)
        width = len(REPLIES.c)
        rows = (await self._execute(stmt)).named()
        return [
            PendingReplyRow(
                reply=self._load(ReplyRequest, row[:width]),
                age_seconds=int(row.age_seconds),
                source_title=row.view_source_title,
                target_title=row.view_target_title,
                original_request_known=bool(row.original_request_known),
                source_running=bool(row.source_running),
                target_run_id=row.target_run_id,
                target_run_status=row.target_run_status,
                target_run_worker_id=row.target_run_worker_id,
                target_run_lease_expires_at=row.target_run_lease_expires_at,
                target_run_attempts=row.target_run_attempts,
            )
            for row in rows
        ]
