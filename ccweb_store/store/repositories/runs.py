"""Runs: the queue — enqueue, start, read. Their leases (claim, heartbeat, finish, requeue)
are ``run_leases.RunLeases``."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from datetime import datetime
from functools import lru_cache
from typing import Any

import sqlalchemy as sa
from sqlalchemy.exc import IntegrityError
from sqlalchemy.sql.expression import bindparam

from ccweb_store.domain import errors
from ccweb_store.domain.errors import Conflict, DomainError, NotFound
from ccweb_store.domain.events import RunQueued, RunStarted
from ccweb_store.domain.ids import (
    ACTIVE_RUN_STATUSES,
    RUN_KINDS,
    RUN_STATUSES,
    new_id,
    validate_choice,
)
from ccweb_store.domain.kinds import RunKind, RunStatus
from ccweb_store.domain.rows import Run
from ccweb_store.domain.timestamps import utcnow
from ccweb_store.store.repositories.base import (
    RUNS,
    constant,
    decode_cursor,
    one_of,
    prebuilt,
)
from ccweb_store.store.repositories.batch_steps import BatchStep
from ccweb_store.store.repositories.run_leases import RunLeases, run_event

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
    RUNS.c.session_id.in_(bindparam("ids", expanding=True)),
    RUNS.c.status == constant(RunStatus.RUNNING),
)


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


#: A queued run, as ``enqueue_id`` writes it: only the columns a new queued run sets, each a
#: bound parameter (the others keep their defaults: no worker, no lease, no attempt yet).
ENQUEUE = prebuilt(
    sa.insert(RUNS).values(
        id=bindparam("p_id"),
        session_id=bindparam("p_session_id"),
        kind=bindparam("p_kind"),
        status=constant(RunStatus.QUEUED),
        runtime_text=bindparam("p_runtime_text"),
        reply_request_id=bindparam("p_reply_request_id"),
        hop_count=bindparam("p_hop_count"),
        created_at=bindparam("p_created_at"),
    )
)


def enqueue_step(session: str) -> BatchStep:
    """A ``statements.Batch`` step: the session the values' ``session`` names gets the queued run
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
        "started_at": now if status == RunStatus.RUNNING else None,
    }


def _busy(session_id: str) -> Callable[[], DomainError]:
    """The error for a second running run of a session (the partial unique index)."""
    return lambda: Conflict(
        f"conversation {session_id!r} already has a running run", code=errors.CONVERSATION_BUSY
    )


class RunRepository(RunLeases):
    """The queue of runs and its reads, on top of their leases (``RunLeases``)."""

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
        run = await self._add(
            session_id, kind, RunStatus.QUEUED, runtime_text, hop_count, reply_request_id
        )
        self.state.note(run_event(RunQueued, run))
        return run

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
        self.state.note(
            RunQueued(
                conversation_id=session_id, run_id=run_id, request_id=reply_request_id, kind=kind
            )
        )
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
        run = await self._add(
            session_id,
            kind,
            RunStatus.RUNNING,
            runtime_text,
            hop_count,
            reply_request_id,
            worker_id,
        )
        self.state.note(run_event(RunStarted, run, worker_id=worker_id))
        return run

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
            RUNS.c.reply_request_id == request_id,
            RUNS.c.kind == RunKind.CROSS_CONVERSATION,
            RUNS.c.status.in_(ACTIVE_RUN_STATUSES),
        )
        return await self._all(Run, stmt)

    async def open_for_requests(self, request_ids: Sequence[str]) -> dict[str, Run]:
        """For each of ``request_ids`` that has one, a queued or running
        ``cross_conversation`` run answering it (its running one first)."""
        ids = list(request_ids)
        if not ids:
            return {}
        stmt = sa.select(RUNS).where(
            RUNS.c.reply_request_id.in_(ids),
            RUNS.c.kind == constant(RunKind.CROSS_CONVERSATION),
            one_of(RUNS.c.status, ACTIVE_RUN_STATUSES),
        )
        found: dict[str, Run] = {}
        for run in await self._all(Run, stmt):
            assert run.reply_request_id is not None
            current = found.get(run.reply_request_id)
            if current is None or run.status == RunStatus.RUNNING:
                found[run.reply_request_id] = run
        return found

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
            .where(RUNS.c.session_id.in_(ids), RUNS.c.status.in_(ACTIVE_RUN_STATUSES))
            .order_by(RUNS.c.created_at, RUNS.c.id)
        )
        active: dict[str, Run] = {}
        for run in await self._all(Run, stmt):
            current = active.get(run.session_id)
            if current is None or (
                run.status == RunStatus.RUNNING and current.status != RunStatus.RUNNING
            ):
                active[run.session_id] = run
        return active

    async def list_page(
        self,
        *,
        statuses: Sequence[str],
        session_id: str | None = None,
        limit: int = 50,
        cursor: str | None = None,
    ) -> tuple[list[Run], str | None]:
        """Runs in one of ``statuses``, newest first, keyset-paginated by ``(created_at, id)``."""
        stmt = (
            sa.select(RUNS)
            .where(one_of(RUNS.c.status, statuses))
            .order_by(RUNS.c.created_at.desc(), RUNS.c.id.desc())
        )
        if session_id is not None:
            stmt = stmt.where(RUNS.c.session_id == session_id)
        if cursor:
            created_at, last_id = decode_cursor(cursor, (datetime, str))
            key = sa.tuple_(RUNS.c.created_at, RUNS.c.id)
            stmt = stmt.where(key < sa.tuple_(created_at, last_id))
        return await self._page(Run, stmt, limit, lambda run: (run.created_at, run.id))

    async def list_recent(
        self,
        *,
        session_id: str | None = None,
        statuses: Sequence[str] | None = None,
        created_before: datetime | None = None,
        limit: int = 50,
    ) -> list[Run]:
        """Newest first."""
        stmt = sa.select(RUNS).order_by(RUNS.c.created_at.desc(), RUNS.c.id.desc()).limit(limit)
        if session_id is not None:
            stmt = stmt.where(RUNS.c.session_id == session_id)
        if created_before is not None:
            stmt = stmt.where(RUNS.c.created_at < created_before)
        if statuses:
            for status in statuses:
                validate_choice(status, RUN_STATUSES, errors.INVALID_STATUS, "run status")
            stmt = stmt.where(RUNS.c.status.in_(statuses))
        return await self._all(Run, stmt)
