"""What ``GET /metrics`` reads from the database at each scrape: the runs queued and running,
the reply requests still open, and how long the oldest ``waiting`` one has waited.

Three indexed reads (``runs (status, …)``, ``reply_requests (status, created_at)``) in one
read-only unit of work; finished runs and returned replies are history, which the counts
leave out so that a scrape costs the same however long the service has run.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

import sqlalchemy as sa

from ccweb_store.domain.ids import ACTIVE_RUN_STATUSES, OPEN_REPLY_STATUSES
from ccweb_store.domain.timestamps import utcnow
from ccweb_store.store.models import ReplyRequest, Run
from ccweb_store.store.statements import prebuilt
from ccweb_store.store.uow import Store

_RUNS_BY_STATUS = prebuilt(
    sa.select(Run.status, sa.func.count())
    .where(Run.status.in_(ACTIVE_RUN_STATUSES))
    .group_by(Run.status)
)
_OPEN_REPLIES_BY_STATUS = prebuilt(
    sa.select(ReplyRequest.status, sa.func.count())
    .where(ReplyRequest.status.in_(OPEN_REPLY_STATUSES))
    .group_by(ReplyRequest.status)
)
_OLDEST_WAITING = prebuilt(
    sa.select(sa.func.min(ReplyRequest.created_at)).where(ReplyRequest.status == "waiting")
)


@dataclass(frozen=True)
class Backlog:
    """The work the service holds now."""

    #: Runs by status, every one of ``ACTIVE_RUN_STATUSES`` (0 when none).
    runs: dict[str, int]
    #: Reply requests by status, every one of ``OPEN_REPLY_STATUSES`` (0 when none).
    replies: dict[str, int]
    #: Seconds since the oldest ``waiting`` request was made; 0 when none waits.
    oldest_waiting_seconds: float


async def backlog(store: Store, *, now: datetime | None = None) -> Backlog:
    """Read the backlog; raises ``DatabaseUnavailable`` when the database cannot answer."""
    async with store.read_uow() as uow:
        run_rows = await uow.execute(_RUNS_BY_STATUS)
        reply_rows = await uow.execute(_OPEN_REPLIES_BY_STATUS)
        oldest_rows = await uow.execute(_OLDEST_WAITING)
    runs = dict.fromkeys(ACTIVE_RUN_STATUSES, 0)
    runs.update((str(status), int(count)) for status, count in run_rows)
    replies = dict.fromkeys(OPEN_REPLY_STATUSES, 0)
    replies.update((str(status), int(count)) for status, count in reply_rows)
    oldest: datetime | None = oldest_rows.scalar()
    waited = 0.0
    if oldest is not None:
        waited = max(0.0, ((now or utcnow()) - oldest).total_seconds())
    return Backlog(runs, replies, waited)
