"""Runs' leases: claim the oldest claimable run, extend and end a lease, requeue the runs
whose worker is gone. ``RunRepository`` (``runs``) adds the queue and its reads."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime, timedelta
from functools import lru_cache
from typing import Any, TypeVar

import sqlalchemy as sa
from sqlalchemy.exc import IntegrityError
from sqlalchemy.sql.expression import bindparam

from ccweb_store.domain import errors
from ccweb_store.domain.events import RunEvent, RunFinished, RunRequeued, RunStarted
from ccweb_store.domain.ids import (
    ACTIVE_RUN_STATUSES,
    FINISHED_RUN_STATUSES,
    RUN_KINDS,
    validate_choice,
)
from ccweb_store.domain.kinds import RunStatus
from ccweb_store.domain.rows import Run
from ccweb_store.domain.timestamps import utcnow
from ccweb_store.store.event_rows import EVENTS, run_started_event
from ccweb_store.store.repositories.base import RUNS, Repository, constant, one_of, prebuilt
from ccweb_store.store.repositories.events import ordered_insert

_EARLIEST_LEASE_EXPIRY = prebuilt(
    sa.select(sa.func.min(RUNS.c.lease_expires_at)).where(
        RUNS.c.status == constant(RunStatus.RUNNING)
    )
)
_running = RUNS.alias("running")
_E = TypeVar("_E", bound=RunEvent)


def _claimable_runs(runs: sa.FromClause, kinds: tuple[str, ...]) -> sa.Select[Any]:
    """The ids of queued runs of these kinds whose session runs nothing, oldest first."""
    return (
        sa.select(runs.c.id)
        .where(
            runs.c.status == constant(RunStatus.QUEUED),
            one_of(runs.c.kind, kinds),
            ~sa.exists().where(
                _running.c.session_id == runs.c.session_id,
                _running.c.status == constant(RunStatus.RUNNING),
            ),
        )
        .order_by(runs.c.created_at, runs.c.id)
    )


@lru_cache(maxsize=16)
def _claim_oldest_statement(kinds: tuple[str, ...]) -> sa.Update:
    """Lease the oldest claimable run in one statement (built once per set of kinds).

    SQLite: ``BEGIN IMMEDIATE`` holds every other writer off, so the run it picks is still
    claimable when it is updated. PostgreSQL: the candidate is locked ``FOR UPDATE SKIP
    LOCKED``, so claimers at the same time take different runs; two of them taking two runs of
    one conversation meet at the unique index of running runs, where the later one fails
    (``ClaimRace``).
    """
    return prebuilt(_set_running_where(RUNS.c.id == oldest_claimable(kinds).scalar_subquery()))


@lru_cache(maxsize=16)
def _claim_oldest_with_event_statement(kinds: tuple[str, ...]) -> sa.Select[Any]:
    """``_claim_oldest_statement`` and its ``run.started`` event as one statement, for a unit
    of work whose statements each commit by themselves (``Transaction.events_in_statements``):
    ``WITH claimed AS (UPDATE runs … RETURNING …), started AS (INSERT INTO events … FROM
    claimed) SELECT … FROM claimed``. The event takes the ordering lock only when a run was
    claimed, and holds it until the statement commits (bound besides the claim's values:
    ``p_event_at``, ``origin``). PostgreSQL only: a data-modifying ``WITH``."""
    claimed = _claim_oldest_statement(kinds).cte("claimed")
    started = run_started_event(
        claimed.c,
        sa.bindparam("p_event_at", type_=EVENTS.c.created_at.type),
        sa.func.jsonb_build_object,
    )
    return prebuilt(sa.select(claimed).add_cte(ordered_insert(started).cte("started")))


def oldest_claimable(kinds: tuple[str, ...]) -> sa.Select[Any]:
    """The id of the oldest claimable run of these kinds, locked unless another claimer holds
    it (``FOR UPDATE SKIP LOCKED``, which SQLite leaves out)."""
    return (
        _claimable_runs(RUNS.alias("candidate"), kinds).limit(1).with_for_update(skip_locked=True)
    )


def run_event(event: type[_E], run: Run, **fields: Any) -> _E:
    """The ``event`` of ``run``: its conversation, id, reply request and kind, and
    ``fields``."""
    return event(
        conversation_id=run.session_id,
        run_id=run.id,
        request_id=run.reply_request_id,
        kind=run.kind,
        **fields,
    )


class ClaimRace(Exception):
    """Another claimer started a run of the same conversation while this claim ran
    (PostgreSQL): the transaction is lost; claiming again in a new one finds another run."""


# Conditional UPDATEs of one row are Core statements on the table returning every column:
# the caller gets the row as the statement left it (``Repository._load``).
def _set_running_where(which: sa.ColumnElement[bool]) -> sa.Update:
    """Lease the queued run ``which`` selects (bound: worker, now, lease expiry)."""
    return (
        sa.update(RUNS)
        .where(which, RUNS.c.status == constant(RunStatus.QUEUED))
        .values(
            status=RunStatus.RUNNING,
            worker_id=bindparam("p_worker_id"),
            started_at=bindparam("p_now"),
            lease_expires_at=bindparam("p_lease_expires_at"),
        )
        .returning(*RUNS.c)
    )


_FINISH_RUN = prebuilt(
    sa.update(RUNS)
    .where(
        RUNS.c.id == bindparam("p_run_id"),
        one_of(RUNS.c.status, ACTIVE_RUN_STATUSES),
        # The lease holder (None: a run no worker holds), so a worker whose run was requeued
        # and claimed by another cannot close it: ``IS NOT DISTINCT FROM`` (SQLite ``IS``).
        RUNS.c.worker_id.is_not_distinct_from(bindparam("p_worker_id")),
    )
    .values(
        status=bindparam("p_status"),
        output=bindparam("p_output"),
        error=bindparam("p_error"),
        finished_at=bindparam("p_now"),
        lease_expires_at=None,
    )
    .returning(*RUNS.c)
)


class RunLeases(Repository):
    """The lease of a run: who runs it, until when."""

    async def claim(
        self,
        worker_id: str,
        *,
        lease_seconds: int,
        kinds: Sequence[str] | None = None,
        now: datetime | None = None,
    ) -> Run | None:
        """Take the oldest queued run of a session that has no running run, leased to ``worker_id``.

        One statement (``_claim_oldest_statement``), its event noted for the commit; where
        each statement commits by itself (``Transaction.events_in_statements``), one statement
        that writes the event too (``_claim_oldest_with_event_statement``); where a trigger
        writes it (``Transaction.claim_event_by_trigger``: SQLite's writer), the plain
        statement, whose event the trigger wrote, at the claim's time. On PostgreSQL a
        claim that loses a race with another for a run of the same session raises
        ``ClaimRace``.
        """
        now = now or utcnow()
        for kind in kinds or ():
            validate_choice(kind, RUN_KINDS, errors.INVALID_KIND, "run kind")
        params = self._lease_params(worker_id, lease_seconds, now)
        kinds_claimed = tuple(kinds or RUN_KINDS)
        by_trigger = self.transaction.claim_event_by_trigger
        in_statement = self.transaction.events_in_statements and not by_trigger
        event_at = now if by_trigger else None
        statement: sa.Executable
        if in_statement:
            event_at = utcnow()
            params |= {"p_event_at": event_at, "origin": self.transaction.event_origin}
            statement = _claim_oldest_with_event_statement(kinds_claimed)
        else:
            statement = _claim_oldest_statement(kinds_claimed)
        try:
            run = await self._first(Run, statement, params)
        except IntegrityError as exc:
            raise ClaimRace(f"worker {worker_id!r} lost a claim race") from exc
        if run is not None:
            started = run_event(RunStarted, run, worker_id=worker_id, at=event_at or utcnow())
            self.state.note(started, written=in_statement or by_trigger)
        return run

    @staticmethod
    def _lease_params(worker_id: str, lease_seconds: int, now: datetime) -> dict[str, Any]:
        return {
            "p_worker_id": worker_id,
            "p_now": now,
            "p_lease_expires_at": now + timedelta(seconds=lease_seconds),
        }

    async def heartbeat(
        self, run_id: str, worker_id: str, *, lease_seconds: int, now: datetime | None = None
    ) -> Run | None:
        """Extend the lease if ``worker_id`` still holds the running run; the run with its new
        lease, or None when it does not."""
        now = now or utcnow()
        stmt = (
            sa.update(RUNS)
            .where(
                RUNS.c.id == run_id,
                RUNS.c.status == constant(RunStatus.RUNNING),
                RUNS.c.worker_id == worker_id,
            )
            .values(lease_expires_at=now + timedelta(seconds=lease_seconds))
        )
        return await self._update_returning(Run, stmt)

    async def finish(
        self,
        run_id: str,
        status: str,
        *,
        worker_id: str | None,
        output: str | None = None,
        error: str | None = None,
        now: datetime | None = None,
    ) -> Run | None:
        """Close the run as ``completed``/``failed``/``cancelled`` if it is still open and
        ``worker_id`` holds it (None: no worker holds it); the closed run, or None if it was
        not open or another worker holds it (one conditional UPDATE: two callers cannot both
        close it)."""
        validate_choice(status, FINISHED_RUN_STATUSES, errors.INVALID_STATUS, "run status")
        params = {
            "p_run_id": run_id,
            "p_status": status,
            "p_output": output,
            "p_error": error,
            "p_now": now or utcnow(),
            "p_worker_id": worker_id,
        }
        run = await self._first(Run, _FINISH_RUN, params)
        if run is not None:
            self.state.note(run_event(RunFinished, run, status=status))
        return run

    async def earliest_lease_expiry(self) -> datetime | None:
        """When the first lease of a running run expires (None: no running run has one)."""
        earliest: datetime | None = (await self._execute(_EARLIEST_LEASE_EXPIRY)).scalar()
        return earliest

    async def expired(self, *, now: datetime | None = None, limit: int = 100) -> list[Run]:
        """Running runs whose lease has passed (skipping rows another process holds)."""
        stmt = (
            sa.select(RUNS)
            .where(RUNS.c.status == RunStatus.RUNNING, RUNS.c.lease_expires_at < (now or utcnow()))
            .order_by(RUNS.c.lease_expires_at)
            .limit(limit)
            .with_for_update(skip_locked=True)
        )
        return await self._all(Run, stmt)

    async def requeue(self, run_id: str) -> Run | None:
        """Put a running run back in the queue (its worker is gone), counting an attempt; the
        queued run, or None when it was not running."""
        stmt = (
            sa.update(RUNS)
            .where(RUNS.c.id == run_id, RUNS.c.status == constant(RunStatus.RUNNING))
            .values(
                status=RunStatus.QUEUED,
                worker_id=None,
                lease_expires_at=None,
                attempts=RUNS.c.attempts + 1,
            )
        )
        run = await self._update_returning(Run, stmt)
        if run is not None:
            self.state.note(run_event(RunRequeued, run, attempts=run.attempts))
        return run
