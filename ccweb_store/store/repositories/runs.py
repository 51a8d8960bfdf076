"""Runs: the queue — enqueue, claim with a lease, heartbeat, finish, requeue."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from datetime import datetime, timedelta
from functools import lru_cache
from typing import Any

import sqlalchemy as sa
from sqlalchemy.exc import IntegrityError
from sqlalchemy.sql.expression import bindparam

from ccweb_store.domain import errors
from ccweb_store.domain.errors import Conflict, DomainError, NotFound
from ccweb_store.domain.ids import (
    ACTIVE_RUN_STATUSES,
    RUN_KINDS,
    RUN_STATUSES,
    new_id,
    validate_choice,
)
from ccweb_store.domain.timestamps import utcnow
from ccweb_store.store.models import Run
from ccweb_store.store.repositories.base import (
    RUNS,
    Repository,
    constant,
    one_of,
    prebuilt,
)
from ccweb_store.store.repositories.batch_steps import BatchStep

_GET_RUN = prebuilt(sa.select(RUNS).where(RUNS.c.id == bindparam("run_id")))
_LOCK_RUN = prebuilt(_GET_RUN.with_for_update())
_ACTIVE_RUNS_OF_SESSION = prebuilt(
    sa.select(RUNS)
    .where(
        RUNS.c.session_id == bindparam("session_id"),
        one_of(RUNS.c.status, ACTIVE_RUN_STATUSES),
    )
    .order_by(RUNS.c.created_at, RUNS.c.id)
)
_RUNNING_RUNS_OF_SESSIONS = sa.select(RUNS).where(
    RUNS.c.session_id.in_(bindparam("ids", expanding=True)), RUNS.c.status == constant("running")
)
_EARLIEST_LEASE_EXPIRY = prebuilt(
    sa.select(sa.func.min(RUNS.c.lease_expires_at)).where(RUNS.c.status == constant("running"))
)
_running = RUNS.alias("running")


@lru_cache(maxsize=16)
def _has_run_in_statement(statuses: tuple[str, ...]) -> sa.Select[Any]:
    """Whether a session has a run in one of ``statuses`` (built once per set)."""
    return prebuilt(
        sa.select(
            sa.exists().where(
                RUNS.c.session_id == bindparam("session_id"), one_of(RUNS.c.status, statuses)
            )
        )
    )


def _claimable_runs(runs: sa.FromClause, kinds: tuple[str, ...]) -> sa.Select[Any]:
    """The ids of queued runs of these kinds whose session runs nothing, oldest first."""
    return (
        sa.select(runs.c.id)
        .where(
            runs.c.status == constant("queued"),
            one_of(runs.c.kind, kinds),
            ~sa.exists().where(
                _running.c.session_id == runs.c.session_id,
                _running.c.status == constant("running"),
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


def oldest_claimable(kinds: tuple[str, ...]) -> sa.Select[Any]:
    """The id of the oldest claimable run of these kinds, locked unless another claimer holds
    it (``FOR UPDATE SKIP LOCKED``, which SQLite leaves out)."""
    return (
        _claimable_runs(RUNS.alias("candidate"), kinds).limit(1).with_for_update(skip_locked=True)
    )


class ClaimRace(Exception):
    """Another claimer started a run of the same conversation while this claim ran
    (PostgreSQL): the transaction is lost; claiming again in a new one finds another run."""


# Conditional UPDATEs of one row are Core statements on the table returning every column,
# which refreshes the object the unit of work holds for the row (``Repository._load``).
def _set_running_where(which: sa.ColumnElement[bool]) -> sa.Update:
    """Lease the queued run ``which`` selects (bound: worker, now, lease expiry)."""
    return (
        sa.update(RUNS)
        .where(which, RUNS.c.status == constant("queued"))
        .values(
            status="running",
            worker_id=bindparam("p_worker_id"),
            started_at=bindparam("p_now"),
            lease_expires_at=bindparam("p_lease_expires_at"),
        )
        .returning(*RUNS.c)
    )


_SET_RUNNING = prebuilt(_set_running_where(RUNS.c.id == bindparam("p_run_id")))
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


#: A queued run, as ``enqueue_id`` writes it: only the columns a new queued run sets, each a
#: bound parameter (the others keep their defaults: no worker, no lease, no attempt yet).
ENQUEUE = prebuilt(
    sa.insert(RUNS).values(
        id=bindparam("p_id"),
        session_id=bindparam("p_session_id"),
        kind=bindparam("p_kind"),
        status=constant("queued"),
        runtime_text=bindparam("p_runtime_text"),
        reply_request_id=bindparam("p_reply_request_id"),
        hop_count=bindparam("p_hop_count"),
        created_at=bindparam("p_created_at"),
    )
)


def enqueue_step(session: str) -> BatchStep:
    """A ``direct.Batch`` step: the session the values' ``session`` names gets the queued run
    ``run_id`` of ``kind`` (``runtime_text``, ``hop_count``, made ``now``), answering
    ``request_id`` (None: no request) (``ENQUEUE``)."""
    return ENQUEUE, {
        "p_id": "run_id",
        "p_session_id": session,
        "p_kind": "kind",
        "p_runtime_text": "runtime_text",
        "p_reply_request_id": "request_id",
        "p_hop_count": "hop_count",
        "p_created_at": "now",
    }


def _new_run(
    session_id: str,
    kind: str,
    status: str,
    runtime_text: str | None,
    hop_count: int,
    reply_request_id: str | None,
    worker_id: str | None = None,
) -> dict[str, Any]:
    """A new run's values, by attribute name."""
    validate_choice(kind, RUN_KINDS, errors.INVALID_KIND, "run kind")
    now = utcnow()
    return {
        "id": new_id("run"),
        "session_id": session_id,
        "kind": kind,
        "status": status,
        "runtime_text": runtime_text,
        "hop_count": hop_count,
        "reply_request_id": reply_request_id,
        "worker_id": worker_id,
        "attempts": 0,
        "created_at": now,
        "started_at": now if status == "running" else None,
    }


def _busy(session_id: str) -> Callable[[], DomainError]:
    """The error for a second running run of a session (the partial unique index)."""
    return lambda: Conflict(
        f"conversation {session_id!r} already has a running run", code=errors.CONVERSATION_BUSY
    )


class RunRepository(Repository):
    async def enqueue(
        self,
        session_id: str,
        kind: str,
        *,
        runtime_text: str | None = None,
        hop_count: int = 0,
        reply_request_id: str | None = None,
    ) -> Run:
        """A new ``queued`` run."""
        return await self._add(
            session_id, kind, "queued", runtime_text, hop_count, reply_request_id
        )

    async def enqueue_id(
        self,
        session_id: str,
        kind: str,
        *,
        runtime_text: str | None = None,
        hop_count: int = 0,
        reply_request_id: str | None = None,
        now: datetime | None = None,
    ) -> str:
        """``enqueue`` without reading the row back: the new run's id (made ``now``, default
        the current time)."""
        validate_choice(kind, RUN_KINDS, errors.INVALID_KIND, "run kind")
        run_id = new_id("run")
        params = {
            "p_id": run_id,
            "p_session_id": session_id,
            "p_kind": kind,
            "p_runtime_text": runtime_text,
            "p_reply_request_id": reply_request_id,
            "p_hop_count": hop_count,
            "p_created_at": now or utcnow(),
        }
        try:
            await self._execute(ENQUEUE, params)
        except IntegrityError as exc:
            raise _busy(session_id)() from exc
        return run_id

    async def start(
        self,
        session_id: str,
        kind: str,
        *,
        runtime_text: str | None = None,
        hop_count: int = 0,
        reply_request_id: str | None = None,
        worker_id: str | None = None,
    ) -> Run:
        """A new run that is already ``running``; ``conversation_busy`` if one runs."""
        return await self._add(
            session_id, kind, "running", runtime_text, hop_count, reply_request_id, worker_id
        )

    async def _add(
        self,
        session_id: str,
        kind: str,
        status: str,
        runtime_text: str | None,
        hop_count: int,
        reply_request_id: str | None,
        worker_id: str | None = None,
    ) -> Run:
        values = _new_run(
            session_id, kind, status, runtime_text, hop_count, reply_request_id, worker_id
        )
        return await self._insert(Run, values, _busy(session_id))

    async def get(self, run_id: str, *, for_update: bool = False) -> Run | None:
        stmt = _LOCK_RUN if for_update else _GET_RUN
        return await self._first(Run, stmt, {"run_id": run_id})

    async def require(self, run_id: str, *, for_update: bool = False) -> Run:
        row = await self.get(run_id, for_update=for_update)
        if row is None:
            raise NotFound(f"run {run_id!r} does not exist", code=errors.RUN_NOT_FOUND)
        return row

    async def active_for_session(self, session_id: str) -> list[Run]:
        """The session's queued and running runs, oldest first."""
        params = {"session_id": session_id}
        return await self._all(Run, _ACTIVE_RUNS_OF_SESSION, params)

    async def has_run_in(self, session_id: str, statuses: Sequence[str]) -> bool:
        """Whether the session has a run in one of ``statuses`` (an index probe)."""
        stmt = _has_run_in_statement(tuple(statuses))
        return bool((await self._execute(stmt, {"session_id": session_id})).scalar())

    async def open_for_request(self, request_id: str) -> list[Run]:
        """Queued or running ``cross_conversation`` runs that answer ``request_id``."""
        stmt = sa.select(RUNS).where(
            Run.reply_request_id == request_id,
            Run.kind == "cross_conversation",
            Run.status.in_(ACTIVE_RUN_STATUSES),
        )
        return await self._all(Run, stmt)

    async def for_request(self, request_id: str) -> list[Run]:
        """Every run naming reply request ``request_id``, oldest first."""
        stmt = (
            sa.select(RUNS)
            .where(RUNS.c.reply_request_id == request_id)
            .order_by(RUNS.c.created_at, RUNS.c.id)
        )
        return await self._all(Run, stmt)

    async def running_for_sessions(self, session_ids: Iterable[str]) -> dict[str, Run]:
        ids = list(session_ids)
        if not ids:
            return {}
        rows = await self._all(Run, _RUNNING_RUNS_OF_SESSIONS, {"ids": ids})
        return {run.session_id: run for run in rows}

    async def active_for_sessions(self, session_ids: Iterable[str]) -> dict[str, Run]:
        """Each session's active run: its running run, else its oldest queued one."""
        ids = list(session_ids)
        if not ids:
            return {}
        stmt = (
            sa.select(RUNS)
            .where(Run.session_id.in_(ids), Run.status.in_(ACTIVE_RUN_STATUSES))
            .order_by(Run.created_at, Run.id)
        )
        active: dict[str, Run] = {}
        for run in await self._all(Run, stmt):
            current = active.get(run.session_id)
            if current is None or (run.status == "running" and current.status != "running"):
                active[run.session_id] = run
        return active

    async def claim(
        self,
        worker_id: str,
        *,
        lease_seconds: int,
        kinds: Sequence[str] | None = None,
        now: datetime | None = None,
    ) -> Run | None:
        """Take the oldest queued run of a session that has no running run, leased to ``worker_id``.

        One statement (``_claim_oldest_statement``). On PostgreSQL a claim that loses a race
        with another for a run of the same session raises ``ClaimRace``.
        """
        now = now or utcnow()
        for kind in kinds or ():
            validate_choice(kind, RUN_KINDS, errors.INVALID_KIND, "run kind")
        params = self._lease_params(worker_id, lease_seconds, now)
        statement = _claim_oldest_statement(tuple(kinds or RUN_KINDS))
        try:
            return await self._first(Run, statement, params)
        except IntegrityError as exc:
            raise ClaimRace(f"worker {worker_id!r} lost a claim race") from exc

    @staticmethod
    def _lease_params(worker_id: str, lease_seconds: int, now: datetime) -> dict[str, Any]:
        return {
            "p_worker_id": worker_id,
            "p_now": now,
            "p_lease_expires_at": now + timedelta(seconds=lease_seconds),
        }

    async def _set_running(
        self, run_id: str, worker_id: str, lease_seconds: int, now: datetime
    ) -> Run | None:
        """Lease the run if it is still queued; the running run, or None."""
        params = {"p_run_id": run_id, **self._lease_params(worker_id, lease_seconds, now)}
        return await self._first(Run, _SET_RUNNING, params)

    async def heartbeat(
        self, run_id: str, worker_id: str, *, lease_seconds: int, now: datetime | None = None
    ) -> bool:
        """Extend the lease if ``worker_id`` still holds the running run."""
        now = now or utcnow()
        stmt = (
            sa.update(RUNS)
            .where(
                RUNS.c.id == run_id,
                RUNS.c.status == constant("running"),
                RUNS.c.worker_id == worker_id,
            )
            .values(lease_expires_at=now + timedelta(seconds=lease_seconds))
        )
        return (await self._update_returning(Run, stmt)) is not None

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
        validate_choice(
            status, ("completed", "failed", "cancelled"), errors.INVALID_STATUS, "run status"
        )
        params = {
            "p_run_id": run_id,
            "p_status": status,
            "p_output": output,
            "p_error": error,
            "p_now": now or utcnow(),
            "p_worker_id": worker_id,
        }
        return await self._first(Run, _FINISH_RUN, params)

    async def earliest_lease_expiry(self) -> datetime | None:
        """When the first lease of a running run expires (None: no running run has one)."""
        earliest: datetime | None = (await self._execute(_EARLIEST_LEASE_EXPIRY)).scalar()
        return earliest

    async def expired(self, *, now: datetime | None = None, limit: int = 100) -> list[Run]:
        """Running runs whose lease has passed (skipping rows another process holds)."""
        stmt = (
            sa.select(RUNS)
            .where(Run.status == "running", Run.lease_expires_at < (now or utcnow()))
            .order_by(Run.lease_expires_at)
            .limit(limit)
            .with_for_update(skip_locked=True)
        )
        return await self._all(Run, stmt)

    async def requeue(self, run_id: str) -> bool:
        """Put a running run back in the queue (its worker is gone), counting an attempt."""
        stmt = (
            sa.update(RUNS)
            .where(RUNS.c.id == run_id, RUNS.c.status == constant("running"))
            .values(
                status="queued",
                worker_id=None,
                lease_expires_at=None,
                attempts=RUNS.c.attempts + 1,
            )
        )
        return (await self._update_returning(Run, stmt)) is not None

    async def list_recent(
        self,
        *,
        session_id: str | None = None,
        statuses: Sequence[str] | None = None,
        created_before: datetime | None = None,
        limit: int = 50,
    ) -> list[Run]:
        """Newest first."""
        stmt = sa.select(RUNS).order_by(Run.created_at.desc(), Run.id.desc()).limit(limit)
        if session_id is not None:
            stmt = stmt.where(Run.session_id == session_id)
        if created_before is not None:
            stmt = stmt.where(Run.created_at < created_before)
        if statuses:
            for status in statuses:
                validate_choice(status, RUN_STATUSES, errors.INVALID_STATUS, "run status")
            stmt = stmt.where(Run.status.in_(statuses))
        return await self._all(Run, stmt)
