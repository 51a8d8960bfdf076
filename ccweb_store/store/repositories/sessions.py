"""Conversations (``sessions``): create, read, lock, page."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from datetime import datetime
from functools import lru_cache
from typing import Any, NamedTuple

import sqlalchemy as sa
from sqlalchemy.sql.expression import bindparam

from ccweb_store.domain import errors
from ccweb_store.domain.errors import Conflict, NotFound
from ccweb_store.domain.events import SessionCreated, SessionUpdated
from ccweb_store.domain.ids import new_id, validate_session_id
from ccweb_store.domain.rows import Conversation, Party
from ccweb_store.domain.timestamps import utcnow
from ccweb_store.store.repositories.base import (
    MESSAGES,
    SESSIONS,
    Repository,
    decode_cursor,
    encode_cursor,
    prebuilt,
)
from ccweb_store.store.repositories.batch_steps import BatchStep
from ccweb_store.store.repositories.send_parties import (
    HAS_ACTIVE_RUN,
    LOCK_SEND_PARTIES,
    SEND_PARTIES,
    SendParties,
)


@lru_cache(maxsize=32)
def _lock_sessions_statement(count: int) -> sa.Select[Any]:
    """SELECT … FOR UPDATE of ``count`` sessions by id (``id_0``, ``id_1``, …), in id order
    (SQLite has no row locks and ignores ``FOR UPDATE``: its writer holds the whole database).

    One statement per count, each id its own bound parameter (see ``base.one_of``).
    """
    ids: list[sa.BindParameter[str]] = [bindparam(f"id_{i}") for i in range(count)]
    return prebuilt(
        sa.select(SESSIONS).where(SESSIONS.c.id.in_(ids)).order_by(SESSIONS.c.id).with_for_update()
    )


_GET_SESSION = prebuilt(sa.select(SESSIONS).where(SESSIONS.c.id == bindparam("session_id")))


def _newest_message_at() -> sa.ColumnElement[datetime]:
    """``last_message_at`` once a message made at ``message_at`` is added: the later of the
    two (a message without a time leaves it as it is)."""
    column = SESSIONS.c.last_message_at
    message_at = bindparam("message_at", type_=column.type)
    later = sa.or_(column.is_(None), column < message_at)
    return sa.case((sa.and_(message_at.is_not(None), later), message_at), else_=column)


#: A session's ``updated_at`` bumped to ``at`` for a message made at ``message_at``, its id
#: returned (none: it does not exist).
_TOUCH_SESSION = prebuilt(
    sa.update(SESSIONS)
    .where(SESSIONS.c.id == bindparam("session_id"))
    .values(updated_at=bindparam("at"), last_message_at=_newest_message_at())
    .returning(SESSIONS.c.id)
)
#: The same for a session this transaction read (and on PostgreSQL locked) already: it exists,
#: so nothing is returned.
TOUCH_SESSION_UNREAD = prebuilt(
    sa.update(SESSIONS)
    .where(SESSIONS.c.id == bindparam("session_id"))
    .values(updated_at=bindparam("at"), last_message_at=_newest_message_at())
)
#: The same without bumping ``updated_at``: messages added by an import.
_KEEP_LAST_MESSAGE = prebuilt(
    sa.update(SESSIONS)
    .where(SESSIONS.c.id == bindparam("b_session_id"))
    .values(last_message_at=_newest_message_at())
)
#: The newest message's time of each session named, read again from its messages (after
#: writes that may have moved it either way: an import's).
_RECOUNT_LAST_MESSAGE = prebuilt(
    sa.update(SESSIONS)
    .where(SESSIONS.c.id == bindparam("b_session_id"))
    .values(
        last_message_at=sa.select(sa.func.max(MESSAGES.c.created_at))
        .where(MESSAGES.c.session_id == bindparam("b_session_id"))
        .scalar_subquery()
    )
)


def touch_step(session: str, at: str) -> BatchStep:
    """A ``statements.Batch`` step: the session the values' ``session`` names bumped to their
    ``at``, for a message made then (``TOUCH_SESSION_UNREAD``)."""
    return TOUCH_SESSION_UNREAD, {"session_id": session, "at": at, "message_at": at}


class NewestFirst(NamedTuple):
    """Conversations newest first by ``column`` then id, a page of ``:limit`` rows at a time:
    the first page, and the page after the row ``(:after_at, :after_id)``. An index on
    ``(column, id)`` serves both, a page read whatever the table holds."""

    column: str
    first: sa.Select[Any]
    after: sa.Select[Any]


def _newest_first(name: str) -> NewestFirst:
    column = SESSIONS.c[name]
    newest = sa.select(SESSIONS).order_by(column.desc(), SESSIONS.c.id.desc())
    after = sa.tuple_(column, SESSIONS.c.id) < sa.tuple_(
        bindparam("after_at", type_=column.type), bindparam("after_id", type_=sa.String())
    )
    return NewestFirst(
        name,
        prebuilt(newest.limit(bindparam("limit"))),
        prebuilt(newest.where(after).limit(bindparam("limit"))),
    )


#: ``session.list``'s order (``ix_sessions_created_at_id``).
BY_CREATION = _newest_first("created_at")
#: The console's and the operator's order (``ix_sessions_updated_at_id``).
BY_ACTIVITY = _newest_first("updated_at")


class SessionRepository(Repository):
    async def create(
        self,
        id: str | None = None,
        *,
        title: str | None = None,
        agent: str | None = None,
        cwd: str | None = None,
        box: str | None = None,
        extra: dict[str, Any] | None = None,
        created_at: datetime | None = None,
        updated_at: datetime | None = None,
        archived_at: datetime | None = None,
    ) -> Conversation:
        session_id = validate_session_id(id) if id is not None else new_id("conv")
        now = utcnow()
        values = {
            "id": session_id,
            "title": title,
            "agent": agent,
            "cwd": cwd,
            "box": box,
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
        created = await self._insert(Conversation, values, taken)
        self.state.note(SessionCreated(conversation_id=session_id, title=title))
        return created

    async def get(self, session_id: str) -> Conversation | None:
        return await self._first(Conversation, _GET_SESSION, {"session_id": session_id})

    async def require(self, session_id: str) -> Conversation:
        """The session, or ``conversation_not_found``."""
        row = await self.get(validate_session_id(session_id))
        if row is None:
            raise NotFound(
                f"conversation {session_id!r} does not exist", code=errors.CONVERSATION_NOT_FOUND
            )
        return row

    async def lock(self, session_id: str) -> Conversation | None:
        """Read the session holding its row lock (PostgreSQL) until the transaction ends."""
        return (await self.lock_many([session_id])).get(session_id)

    async def lock_many(self, session_ids: Iterable[str | None]) -> dict[str, Conversation]:
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
            for row in await self._all(Conversation, stmt, params):
                locked[row.id] = row
        return {sid: locked[sid] for sid in ids if sid in locked}

    async def titles(self, session_ids: Iterable[str], *, chunk: int = 500) -> dict[str, str]:
        """The titles of those of ``session_ids`` that exist and have one (not blank), by id."""
        ids = sorted(set(session_ids))
        found: dict[str, str] = {}
        for start in range(0, len(ids), chunk):
            stmt = sa.select(SESSIONS.c.id, SESSIONS.c.title).where(
                SESSIONS.c.id.in_(ids[start : start + chunk]),
                SESSIONS.c.title.is_not(None),
            )
            for session_id, title in await self._execute(stmt):
                if title.strip():
                    found[session_id] = title
        return found

    async def send_parties(self, source_id: str, target_id: str) -> SendParties:
        """The source and target of a send, and whether the target is busy; on PostgreSQL
        their rows stay locked until the transaction ends (SQLite's writer holds the whole
        database). Plain tuples: a send copies two titles and needs nothing else of them."""
        params = {"source_id": source_id, "target_id": target_id}
        by_id: dict[str, Any]
        if not self.transaction.locks_rows:  # the writer holds the whole database
            by_id = {row[0]: row for row in await self._execute(SEND_PARTIES, params)}
            busy = target_id in by_id and bool(by_id[target_id][2])
        else:
            by_id = {row[0]: row for row in await self._execute(LOCK_SEND_PARTIES, params)}
            busy = target_id in by_id and bool(
                (await self._execute(HAS_ACTIVE_RUN, {"session_id": target_id})).scalar()
            )
        source, target = by_id.get(source_id), by_id.get(target_id)
        return SendParties(
            source=Party(source[0], source[1]) if source is not None else None,
            target=Party(target[0], target[1]) if target is not None else None,
            target_busy=busy,
        )

    async def touch(
        self, session_id: str, at: datetime | None = None, *, message_at: datetime | None = None
    ) -> bool:
        """Bump ``updated_at`` (taking the row lock) for a message made at ``message_at``
        (default: ``at``), which ``last_message_at`` keeps if it is the newest; False when the
        session does not exist."""
        at = at or utcnow()
        params = {"session_id": session_id, "at": at, "message_at": message_at or at}
        return (await self._execute(_TOUCH_SESSION, params)).first() is not None

    async def keep_last_message(self, newest: Mapping[str, datetime]) -> None:
        """Each session's ``last_message_at`` after messages made up to ``newest[id]`` were
        added to it (an import's): the later of the two."""
        params = [{"b_session_id": sid, "message_at": at} for sid, at in sorted(newest.items())]
        if params:
            await self._execute(_KEEP_LAST_MESSAGE, params)

    async def recount_last_message(self, session_ids: Iterable[str]) -> None:
        """Read each session's ``last_message_at`` again from its messages."""
        params = [{"b_session_id": session_id} for session_id in sorted(set(session_ids))]
        if params:
            await self._execute(_RECOUNT_LAST_MESSAGE, params)

    async def list_page(
        self, *, limit: int = 50, cursor: str | None = None
    ) -> tuple[list[Conversation], str | None]:
        """Newest created first (archived ones too), keyset-paginated by ``(created_at, id)``
        (``BY_CREATION``)."""
        return await self._newest_first(BY_CREATION, limit, cursor)

    async def page_by_activity(
        self, *, limit: int, cursor: str | None = None
    ) -> tuple[list[Conversation], str | None]:
        """Newest activity first (archived ones too), keyset-paginated by ``(updated_at, id)``
        (``BY_ACTIVITY``)."""
        return await self._newest_first(BY_ACTIVITY, limit, cursor)

    async def _newest_first(
        self, order: NewestFirst, limit: int, cursor: str | None
    ) -> tuple[list[Conversation], str | None]:
        params: dict[str, Any] = {"limit": limit + 1}
        stmt = order.first
        if cursor:
            params["after_at"], params["after_id"] = decode_cursor(cursor, (datetime, str))
            stmt = order.after
        rows = await self._all(Conversation, stmt, params)
        if len(rows) <= limit:
            return rows, None
        last = rows[limit - 1]
        return rows[:limit], encode_cursor(getattr(last, order.column), last.id)

    async def search(
        self, *, limit: int, query: str | None = None, include_archived: bool = False
    ) -> tuple[list[Conversation], bool]:
        """Newest activity first, optionally filtered by id or title; returns (rows, has_more)."""
        stmt = sa.select(SESSIONS).order_by(SESSIONS.c.updated_at.desc(), SESSIONS.c.id.desc())
        if not include_archived:
            stmt = stmt.where(SESSIONS.c.archived_at.is_(None))
        if query:
            # The text is matched as it is: LIKE's wildcards in it are escaped.
            escaped = query.lower().replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")
            pattern = f"%{escaped}%"
            stmt = stmt.where(
                sa.or_(
                    sa.func.lower(SESSIONS.c.title).like(pattern, escape="\\"),
                    sa.func.lower(SESSIONS.c.id).like(pattern, escape="\\"),
                )
            )
        rows = await self._all(Conversation, stmt.limit(limit + 1))
        return rows[:limit], len(rows) > limit

    async def set_archived(
        self, session_id: str, archived_at: datetime | None
    ) -> Conversation | None:
        """Archive the session at ``archived_at`` (None: bring it back); None when it does not
        exist. An archived session keeps its archive time when archived again."""
        column = SESSIONS.c.archived_at
        value = (
            sa.func.coalesce(column, sa.literal(archived_at, column.type))
            if archived_at is not None
            else None
        )
        stmt = sa.update(SESSIONS).where(SESSIONS.c.id == session_id).values(archived_at=value)
        session = await self._update_returning(Conversation, stmt)
        if session is not None:
            self.state.note(
                SessionUpdated(
                    conversation_id=session_id,
                    columns=("archived_at",),
                    archived=archived_at is not None,
                )
            )
        return session

    async def set_agent_session(
        self, session_id: str, agent_session_id: str | None
    ) -> Conversation | None:
        """Record the agent session the conversation's next run resumes (None: start a new
        one); None when the conversation does not exist."""
        stmt = (
            sa.update(SESSIONS)
            .where(SESSIONS.c.id == session_id)
            .values(agent_session_id=agent_session_id)
        )
        session = await self._update_returning(Conversation, stmt)
        if session is not None:
            self.state.note(
                SessionUpdated(conversation_id=session_id, columns=("agent_session_id",))
            )
        return session

    async def update_columns(self, session_id: str, values: dict[str, Any]) -> None:
        """Overwrite the given columns of one session (the importer's final sync)."""
        stmt = sa.update(SESSIONS).where(SESSIONS.c.id == session_id).values(**values)
        await self._execute(stmt)
        self.state.note(SessionUpdated(conversation_id=session_id, columns=tuple(sorted(values))))
