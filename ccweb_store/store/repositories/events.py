"""The event outbox: the changes a unit of work made, written in its own transaction when it
commits, and read back in id order.

Repositories note each change as they make it (``UnitState.note``); ``EventRepository.flush``
writes them all with one statement just before the commit. Where several transactions can
write at once (``Transaction.orders_events``: PostgreSQL), ids drawn in the transactions
would become visible out of order (a transaction that drew id 50 can commit before the one
that drew 49), so the events go to the inbox (``event_inbox``) instead, and once the
transaction has committed, one autocommit statement (``_MOVE``) moves everything the inbox
holds to ``events``: it takes a lock every mover takes, draws the ids under it, and holds it
only to its own commit, which no client round trip delays. Ids are then handed out in commit
order, so a reader that has seen id N can never later find a smaller id appear; the writers'
own transactions hold no lock for it and commit side by side. The move also queues one
wake-up notice for the other server processes, delivered when it commits, and none when it
moved nothing. Events a process committed but did not move (it died in between) are moved by
the next move of any process, or by ``move_inbox`` as a server starts and every minute.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any

import sqlalchemy as sa

from ccweb_store.store.event_rows import EVENT_COLUMNS, EVENTS, event_row
from ccweb_store.store.models import Base
from ccweb_store.store.postgres.listen import CHANNEL
from ccweb_store.store.repositories.base import Repository, prebuilt
from ccweb_store.store.statements import Rows

INBOX = Base.metadata.tables["event_inbox"]
#: The key of the transaction-scoped advisory lock under which events get their ids on
#: PostgreSQL, held by one short autocommit statement at a time.
ORDER_LOCK_KEY = 0x63637765_76656E74

_PLAIN_INSERT = prebuilt(sa.insert(EVENTS))
_INBOX_INSERT = prebuilt(sa.insert(INBOX))


def _lock() -> sa.ColumnElement[Any]:
    return sa.func.pg_advisory_xact_lock(sa.literal_column(str(ORDER_LOCK_KEY)))


def _notice() -> sa.ColumnElement[Any]:
    """The wake-up notice, naming this process (bound: ``origin``), whose own listener then
    leaves it alone: its feed was woken already, by the commit that wrote the events."""
    return sa.func.pg_notify(
        sa.literal_column(f"'{CHANNEL}'"), sa.bindparam("origin", type_=sa.String())
    )


def _into_events(source: Any) -> sa.Insert:
    """``INSERT INTO events`` the events of ``source`` (the inbox, or rows taken from it), in
    the order of its ``id``."""
    rows = sa.select(*(source.c[name] for name in EVENT_COLUMNS)).order_by(source.c.id)
    return sa.insert(EVENTS).from_select(list(EVENT_COLUMNS), rows)


def _move_statement() -> sa.Select[Any]:
    """``WITH taken AS (DELETE FROM event_inbox WHERE <lock> RETURNING …), moved AS (INSERT
    INTO events … FROM taken ORDER BY taken.id RETURNING id)``, then how many moved and the
    notice if any did. The lock is taken at the first row the DELETE finds, so before any id
    is drawn, and not at all when the inbox is empty. A row another move took meanwhile is
    skipped: the DELETE waits for that move to commit and finds the row gone (READ
    COMMITTED). One move may carry the events of many transactions, in the order they were
    written to the inbox."""
    taken = (
        sa.delete(INBOX)
        .where(_lock().is_not(None))
        .returning(INBOX.c.id, *(INBOX.c[name] for name in EVENT_COLUMNS))
        .cte("taken")
    )
    moved = _into_events(taken).returning(EVENTS.c.id).cte("moved")
    counted = sa.select(sa.func.count().label("moved")).select_from(moved).subquery("counted")
    return sa.select(counted.c.moved, sa.case((counted.c.moved > 0, _notice())).label("noticed"))


_MOVE = prebuilt(_move_statement())
_INBOX_TO_EVENTS = prebuilt(_into_events(INBOX))
_EMPTY_INBOX = prebuilt(sa.delete(INBOX))
_INBOX_ANY = prebuilt(sa.select(INBOX.c.id).limit(1))


def ordered_insert(rows: sa.Select[Any]) -> sa.Insert:
    """``INSERT INTO events`` the events ``rows`` selects (a column labelled by each name of
    ``EVENT_COLUMNS``), in a statement that commits by itself where several transactions
    write at once (a claim's): each row passes a subquery that first takes the ordering lock
    and queues the wake-up notice, so its id is drawn only once the lock is held, and the lock
    is held only to the statement's own commit, as a move's (``_MOVE``). Nothing is locked or
    noticed when ``rows`` selects none. PostgreSQL evaluates the subquery's volatile functions
    once per row, in place."""
    source = rows.subquery("source")
    gate = sa.select(*source.c, _lock().label("locked"), _notice().label("notified")).subquery(
        "gate"
    )
    values = sa.select(*(gate.c[name] for name in EVENT_COLUMNS))
    return sa.insert(EVENTS).from_select(list(EVENT_COLUMNS), values)


_LATEST_ID = prebuilt(sa.select(sa.func.max(EVENTS.c.id)))
_OLDEST_ID = prebuilt(sa.select(sa.func.min(EVENTS.c.id)))
_HAS_ID = prebuilt(sa.select(EVENTS.c.id).where(EVENTS.c.id == sa.bindparam("event_id")))
_ALL_AFTER = prebuilt(
    sa.select(EVENTS)
    .where(EVENTS.c.id > sa.bindparam("after"))
    .order_by(EVENTS.c.id)
    .limit(sa.bindparam("limit"))
)


class EventRepository(Repository):
    """The ``events`` table."""

    async def flush(self) -> int:
        """Write the events noted so far in this unit of work; how many."""
        pending = self.state.events
        if not pending:
            return 0
        if self.transaction.events_in_statements:
            # Written now, they would commit apart from their changes, which committed already.
            raise RuntimeError(
                "a unit of work without a transaction wrote changes whose events it cannot "
                "write with them; make such changes in a unit of work with a transaction"
            )
        self.state.events = []
        rows = [event_row(event) for event in pending]
        if self.transaction.orders_events:
            await self._execute_many(_INBOX_INSERT, rows)
            self.transaction.after_commit(_MOVE, {"origin": self.transaction.event_origin})
        else:
            await self._execute_many(_PLAIN_INSERT, rows)
        return len(rows)

    async def inbox_holds_any(self) -> bool:
        return (await self._execute(_INBOX_ANY)).first() is not None

    async def move_inbox(self) -> int:
        """Move the events the inbox holds to ``events``, in the order written: those a
        process committed but did not move, as it died in between, or that a copy brought
        from PostgreSQL (to SQLite, whose writer otherwise leaves the inbox empty). How many.
        PostgreSQL: ``_MOVE``, one statement; SQLite: the writer's INSERT and DELETE, which
        the unit of work commits together."""
        if self.transaction.orders_events:
            rows = await self._execute(_MOVE, {"origin": self.transaction.event_origin})
            return int(rows.scalar() or 0)
        moved = (await self._execute(_INBOX_TO_EVENTS)).rowcount
        if moved:
            await self._execute(_EMPTY_INBOX)
        return moved

    async def after(
        self,
        after: int,
        limit: int,
        *,
        types: Sequence[str] | None = None,
        conversation_id: str | None = None,
    ) -> list[dict[str, Any]]:
        """Up to ``limit`` events with an id above ``after``, oldest first, of the given types
        and seen by the given conversation (its own, and replies it is a party to)."""
        if types is None and conversation_id is None:
            rows = await self._execute(_ALL_AFTER, {"after": after, "limit": limit})
            return [dict(row) for row in rows.mappings()]
        stmt = sa.select(EVENTS).where(EVENTS.c.id > after)
        if types is not None:
            stmt = stmt.where(EVENTS.c.type.in_(list(types)))
        if conversation_id is not None:
            stmt = stmt.where(
                sa.or_(
                    EVENTS.c.conversation_id == conversation_id,
                    EVENTS.c.peer_conversation_id == conversation_id,
                )
            )
        rows = await self._execute(stmt.order_by(EVENTS.c.id).limit(limit))
        return [dict(row) for row in rows.mappings()]

    async def latest_id(self) -> int:
        """The newest event's id (0: none)."""
        return int((await self._execute(_LATEST_ID)).scalar() or 0)

    async def oldest_id(self) -> int | None:
        """The oldest event still kept (None: none is)."""
        found = (await self._execute(_OLDEST_ID)).scalar()
        return None if found is None else int(found)

    async def exists(self, event_id: int) -> bool:
        return (await self._execute(_HAS_ID, {"event_id": event_id})).first() is not None

    async def prune(self, before: datetime, limit: int) -> int:
        """Delete up to ``limit`` of the oldest events made before ``before``; how many."""
        oldest = (
            sa.select(EVENTS.c.id)
            .where(EVENTS.c.created_at < before)
            .order_by(EVENTS.c.id)
            .limit(limit)
            .scalar_subquery()
        )
        result: Rows = await self._execute(sa.delete(EVENTS).where(EVENTS.c.id.in_(oldest)))
        return result.rowcount
