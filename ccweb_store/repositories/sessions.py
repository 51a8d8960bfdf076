"""Conversations (``sessions``): create, read, lock, page."""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime
from functools import lru_cache
from typing import Any

import sqlalchemy as sa
from sqlalchemy.sql.expression import bindparam

from ccweb_store import errors
from ccweb_store.errors import Conflict, NotFound
from ccweb_store.models import (
    Session,
    new_id,
    utcnow,
)
from ccweb_store.repositories.base import (
    SESSIONS,
    Repository,
    decode_cursor,
    prebuilt,
    validate_session_id,
)


@lru_cache(maxsize=32)
def _lock_sessions_statement(count: int) -> sa.Select[Any]:
    """SELECT … FOR UPDATE of ``count`` sessions by id (``id_0``, ``id_1``, …), in id order.

    One statement per count, each id its own bound parameter (see ``base.one_of``).
    """
    ids: list[sa.BindParameter[str]] = [bindparam(f"id_{i}") for i in range(count)]
    return prebuilt(
        sa.select(SESSIONS).where(SESSIONS.c.id.in_(ids)).order_by(SESSIONS.c.id).with_for_update()
    )


_GET_SESSION = prebuilt(sa.select(SESSIONS).where(SESSIONS.c.id == bindparam("session_id")))


_TOUCH_SESSION = prebuilt(
    sa.update(SESSIONS)
    .where(SESSIONS.c.id == bindparam("session_id"))
    .values(updated_at=bindparam("at"))
    .returning(SESSIONS.c.id)
)


class SessionRepository(Repository):
    async def create(
        self,
        id: str | None = None,
        *,
        title: str | None = None,
        agent: str | None = None,
        cwd: str | None = None,
        extra: dict[str, Any] | None = None,
        created_at: datetime | None = None,
        updated_at: datetime | None = None,
        archived_at: datetime | None = None,
    ) -> Session:
        session_id = validate_session_id(id) if id is not None else new_id("conv")
        now = utcnow()
        values = {
            "id": session_id,
            "title": title,
            "agent": agent,
            "cwd": cwd,
            "extra": extra,
            "created_at": created_at or now,
            "updated_at": updated_at or created_at or now,
            "archived_at": archived_at,
        }

        def taken() -> Conflict:
            return Conflict(
                f"conversation {session_id!r} already exists; pick another id or leave it out",
                code=errors.CONVERSATION_EXISTS,
            )

        if await self.get(session_id) is not None:
            raise taken()
        return await self._insert(Session, values, taken)

    async def get(self, session_id: str) -> Session | None:
        return await self._first(Session, _GET_SESSION, {"session_id": session_id})

    async def require(self, session_id: str) -> Session:
        """The session, or ``conversation_not_found``."""
        row = await self.get(validate_session_id(session_id))
        if row is None:
            raise NotFound(
                f"conversation {session_id!r} does not exist", code=errors.CONVERSATION_NOT_FOUND
            )
        return row

    async def lock(self, session_id: str) -> Session | None:
        """Read the session holding its row lock (PostgreSQL) until the transaction ends."""
        return (await self.lock_many([session_id])).get(session_id)

    async def lock_many(self, session_ids: Iterable[str | None]) -> dict[str, Session]:
        """Lock several sessions (PostgreSQL) in id order, so two writers never deadlock.

        Returns the ones that exist, by id. A row this transaction already locked stays
        locked until it ends, so it is not read and locked a second time.
        """
        ids = sorted({sid for sid in session_ids if sid})
        locked = self.state.locked_sessions
        missing = [sid for sid in ids if sid not in locked]
        if missing:
            stmt = _lock_sessions_statement(len(missing))
            params = {f"id_{i}": sid for i, sid in enumerate(missing)}
            for row in await self._all(Session, stmt, params):
                locked[row.id] = row
        return {sid: locked[sid] for sid in ids if sid in locked}

    async def touch(self, session_id: str, at: datetime | None = None) -> bool:
        """Bump ``updated_at`` (taking the row lock); False when the session does not exist."""
        params = {"session_id": session_id, "at": at or utcnow()}
        return (await self._execute(_TOUCH_SESSION, params)).first() is not None

    async def list_page(
        self, *, limit: int = 50, cursor: str | None = None
    ) -> tuple[list[Session], str | None]:
        """Newest created first (archived ones too), keyset-paginated by ``(created_at, id)``."""
        stmt = sa.select(SESSIONS).order_by(Session.created_at.desc(), Session.id.desc())
        if cursor:
            created_at, last_id = decode_cursor(cursor, (datetime, str))
            stmt = stmt.where(
                sa.tuple_(Session.created_at, Session.id) < sa.tuple_(created_at, last_id)
            )
        return await self._page(Session, stmt, limit, lambda row: (row.created_at, row.id))

    async def search(
        self, *, limit: int, query: str | None = None, include_archived: bool = False
    ) -> tuple[list[Session], bool]:
        """Newest activity first, optionally filtered by id or title; returns (rows, has_more)."""
        stmt = sa.select(SESSIONS).order_by(Session.updated_at.desc(), Session.id.desc())
        if not include_archived:
            stmt = stmt.where(Session.archived_at.is_(None))
        if query:
            # The text is matched as it is: LIKE's wildcards in it are escaped.
            escaped = query.lower().replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")
            pattern = f"%{escaped}%"
            stmt = stmt.where(
                sa.or_(
                    sa.func.lower(Session.title).like(pattern, escape="\\"),
                    sa.func.lower(Session.id).like(pattern, escape="\\"),
                )
            )
        rows = await self._all(Session, stmt.limit(limit + 1))
        return rows[:limit], len(rows) > limit

    async def update_columns(self, session_id: str, values: dict[str, Any]) -> None:
        """Overwrite the given columns of one session (the importer's final sync)."""
        stmt = sa.update(SESSIONS).where(SESSIONS.c.id == session_id).values(**values)
        await self._execute(stmt)
