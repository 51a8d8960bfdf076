"""What ``GET /metrics`` reads from the database at each scrape: the runs queued and running,
the reply requests still open, and how long the oldest ``waiting`` one has waited.

Three indexed reads (``repositories.monitoring``) in one read-only unit of work; finished
runs and returned replies are history, which the counts leave out so that a scrape costs the
same however long the service has run.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from ccweb_store.domain.ids import ACTIVE_RUN_STATUSES, OPEN_REPLY_STATUSES
from ccweb_store.domain.timestamps import utcnow
from ccweb_store.store.uow import Store


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
        run_counts = await uow.monitoring.active_runs_by_status()
        reply_counts = await uow.monitoring.open_replies_by_status()
        oldest = await uow.monitoring.oldest_waiting_since()
    runs: dict[str, int] = dict.fromkeys(ACTIVE_RUN_STATUSES, 0)
    runs.update(run_counts)
    replies: dict[str, int] = dict.fromkeys(OPEN_REPLY_STATUSES, 0)
    replies.update(reply_counts)
    waited = 0.0
    if oldest is not None:
        waited = max(0.0, ((now or utcnow()) - oldest).total_seconds())
    return Backlog(runs, replies, waited)
