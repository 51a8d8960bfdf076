"""The event outbox: the changes a unit of work made, written in its own transaction when it
commits, and read back in id order.

Repositories note each change as they make it (``UnitState.note``); ``EventRepository.flush``
writes them all with one statement just before the commit. Where several transactions can
write at once (``Transaction.orders_events``: PostgreSQL), the INSERT first takes a
transaction-scoped lock that every event writer takes, held until the commit: ids are then
handed out in commit order, so a reader that has seen id N can never later find a smaller id
appear. The same statement queues the wake-up notice that other server processes listen for,
which the database delivers only when the transaction commits.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any

import sqlalchemy as sa

from ccweb_store.store.models import Base
from ccweb_store.store.postgres.listen import CHANNEL
from ccweb_store.store.repositories.base import Repository, prebuilt
from ccweb_store.store.statements import Rows

EVENTS = Base.metadata.tables["events"]
#: The key of the transaction-scoped advisory lock every event writer takes on PostgreSQL.
ORDER_LOCK_KEY = 0x63637765_76656E74

#: The columns an event is written with, in the order ``UnitState.note`` keeps them.
EVENT_COLUMNS = (
    "type",
    "conversation_id",
    "peer_conversation_id",
    "message_id",
    "run_id",
    "request_id",
    "created_at",
    "payload",
)

_PLAIN_INSERT = prebuilt(sa.insert(EVENTS))


def ordered_insert(rows: sa.Select[Any]) -> sa.Insert:
    """``INSERT INTO events`` the events ``rows`` selects (a column labelled by each name of
    ``EVENT_COLUMNS``), where several transactions write at once: each row passes a subquery
    that first takes the ordering lock and queues the wake-up notice (``pg_notify``), so its
    id is drawn only once the lock is held. Nothing is locked or noticed when ``rows`` selects
    none. PostgreSQL evaluates the subquery's volatile functions once per row, in place."""
    source = rows.subquery("source")
    gate = sa.select(
        *source.c,
        sa.func.pg_advisory_xact_lock(sa.literal_column(str(ORDER_LOCK_KEY))).label("locked"),
        sa.func.pg_notify(
            sa.literal_column(f"'{CHANNEL}'"), sa.bindparam("origin", type_=sa.String())
        ).label("notified"),
    ).subquery("gate")
    values = sa.select(*(gate.c[name] for name in EVENT_COLUMNS))
    return sa.insert(EVENTS).from_select(list(EVENT_COLUMNS), values)


_ORDERED_INSERT = prebuilt(
    ordered_insert(
        sa.select(
            *(sa.bindparam(name, type_=EVENTS.c[name].type).label(name) for name in EVENT_COLUMNS)
        )
    )
)
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
        if self.transaction.orders_events:
            # The notice names this process, whose own listener then leaves it alone: the
            # commit already woke this process's feed, with what it wrote.
            origin = self.transaction.event_origin
            await self._execute_many(_ORDERED_INSERT, [row | {"origin": origin} for row in pending])
        else:
            await self._execute_many(_PLAIN_INSERT, pending)
        return len(pending)

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
