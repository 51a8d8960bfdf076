"""The operator's reads of the work the service holds: the backlog ``GET /metrics`` counts at
each scrape (``services.monitoring``) and what ``doctor`` finds stuck (``services.doctor``).

The backlog is three indexed reads (``runs (status, …)``, ``reply_requests (status,
created_at)``); finished runs and returned replies are history, which the counts leave out so
that a scrape costs the same however long the service has run. Everything here only reads.
"""

from __future__ import annotations

from datetime import datetime
from typing import NamedTuple

import sqlalchemy as sa

from ccweb_store.domain.ids import ACTIVE_RUN_STATUSES, OPEN_REPLY_STATUSES
from ccweb_store.domain.kinds import ReplyStatus, RunStatus
from ccweb_store.store.repositories.base import MESSAGES, REPLIES, RUNS, Repository, prebuilt

_RUNS_BY_STATUS = prebuilt(
    sa.select(RUNS.c.status, sa.func.count())
    .where(RUNS.c.status.in_(ACTIVE_RUN_STATUSES))
    .group_by(RUNS.c.status)
)
_OPEN_REPLIES_BY_STATUS = prebuilt(
    sa.select(REPLIES.c.status, sa.func.count())
    .where(REPLIES.c.status.in_(OPEN_REPLY_STATUSES))
    .group_by(REPLIES.c.status)
)
_OLDEST_WAITING = prebuilt(
    sa.select(sa.func.min(REPLIES.c.created_at)).where(REPLIES.c.status == ReplyStatus.WAITING)
)


class ExpiredLease(NamedTuple):
    """A running run whose lease has passed."""

    run_id: str
    session_id: str
    worker_id: str | None
    lease_expires_at: datetime | None


class UnansweredRequest(NamedTuple):
    """A ``waiting`` reply request that no queued or running run names."""

    request_id: str
    source_conversation_id: str
    source_title: str | None
    target_conversation_id: str
    target_title: str | None
    created_at: datetime
    #: Its original request, or the message that carried it, is stored: a retry can ask it.
    question_stored: bool


class MonitoringRepository(Repository):
    """Counts and findings across the runs and reply requests."""

    async def active_runs_by_status(self) -> dict[str, int]:
        """How many runs are in each of ``ACTIVE_RUN_STATUSES`` (those with none left out)."""
        rows = await self._execute(_RUNS_BY_STATUS)
        return {str(status): int(count) for status, count in rows}

    async def open_replies_by_status(self) -> dict[str, int]:
        """How many reply requests are in each of ``OPEN_REPLY_STATUSES`` (those with none
        left out)."""
        rows = await self._execute(_OPEN_REPLIES_BY_STATUS)
        return {str(status): int(count) for status, count in rows}

    async def oldest_waiting_since(self) -> datetime | None:
        """When the oldest ``waiting`` request was made; None when none waits."""
        oldest: datetime | None = (await self._execute(_OLDEST_WAITING)).scalar()
        return oldest

    async def expired_leases(self, now: datetime) -> list[ExpiredLease]:
        """Running runs whose lease passed before ``now``, the longest expired first."""
        stmt = (
            sa.select(RUNS.c.id, RUNS.c.session_id, RUNS.c.worker_id, RUNS.c.lease_expires_at)
            .where(RUNS.c.status == RunStatus.RUNNING, RUNS.c.lease_expires_at < now)
            .order_by(RUNS.c.lease_expires_at)
        )
        return [ExpiredLease(*row) for row in await self._execute(stmt)]

    async def unanswered_waiting_requests(self) -> list[UnansweredRequest]:
        """``waiting`` requests with no queued or running run naming them, oldest first."""
        open_run = sa.exists().where(
            RUNS.c.reply_request_id == REPLIES.c.request_id, RUNS.c.status.in_(ACTIVE_RUN_STATUSES)
        )
        carried = sa.exists().where(MESSAGES.c.id == REPLIES.c.message_id)
        stmt = (
            sa.select(
                REPLIES.c.request_id,
                REPLIES.c.source_conversation_id,
                REPLIES.c.source_title,
                REPLIES.c.target_conversation_id,
                REPLIES.c.target_title,
                REPLIES.c.created_at,
                sa.or_(REPLIES.c.original_request.is_not(None), carried),
            )
            .where(REPLIES.c.status == ReplyStatus.WAITING, ~open_run)
            .order_by(REPLIES.c.created_at, REPLIES.c.request_id)
        )
        return [
            UnansweredRequest._make((*row[:-1], bool(row[-1]))) for row in await self._execute(stmt)
        ]
