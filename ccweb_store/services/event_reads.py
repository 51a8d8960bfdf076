"""Reading the event outbox: ``events.list`` (a page at a time) and the live follow behind
``GET /events``.

Who sees what: the operator every event; a conversation (a caller bound by its credential)
only the events of that conversation, and those of the replies it is the source or the target
of (``conversation`` below). A resume point is the id of the last event a client took:
everything after it comes, in order, once. A point older than what the retention kept
(``events_expired``) cannot be resumed: the client reads the state afresh (``reply.list``,
``run.list``, ``message.list``) and follows from the newest event.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from dataclasses import dataclass
from datetime import timedelta

from ccweb_store.contract.events import Event, EventPage, ListEvents
from ccweb_store.domain import errors
from ccweb_store.domain.errors import DomainError, InvalidInput
from ccweb_store.domain.events import EVENT_TYPES
from ccweb_store.domain.timestamps import utcnow
from ccweb_store.store.event_feed import Event as EventRow
from ccweb_store.store.uow import Store, UnitOfWork

log = logging.getLogger("ccweb_store")

#: The most events one ``events.list`` page (or one read of the follow) holds.
MAX_PAGE = 1000
DEFAULT_PAGE = 100
#: Events pruned at once by the retention job, and how often it runs.
PRUNE_BATCH = 1000
PRUNE_EVERY_S = 60.0

RESYNC = (
    "read the current state again (reply.list, run.list, message.list) and follow from the "
    "newest event (leave the resume point out)"
)


class EventsExpired(DomainError):
    """The resume point is older than the oldest event kept."""

    code = errors.EVENTS_EXPIRED


@dataclass(frozen=True, slots=True)
class EventFilter:
    """Which events a reader gets: of ``types`` (None: all), seen by ``conversation``
    (None: every conversation's)."""

    types: frozenset[str] | None = None
    conversation: str | None = None

    def accepts(self, event: EventRow) -> bool:
        if self.types is not None and event["type"] not in self.types:
            return False
        if self.conversation is None:
            return True
        return self.conversation in (event["conversation_id"], event["peer_conversation_id"])


def event_filter(
    types: Sequence[str] | None, conversation: str | None, bound_to: str | None
) -> EventFilter:
    """The filter of a reader who asked for ``types`` and ``conversation``; a reader bound to
    a conversation (``bound_to``, by its credential) sees that one only."""
    if types is not None:
        unknown = sorted(set(types) - set(EVENT_TYPES))
        if unknown:
            raise InvalidInput(
                f"unknown event type(s) {', '.join(unknown)}: the types are "
                f"{', '.join(EVENT_TYPES)}",
                code=errors.INVALID_ARGUMENTS,
            )
    if bound_to is not None:
        if conversation is not None and conversation != bound_to:
            raise DomainError(
                f"this credential is bound to conversation {bound_to!r} and sees only its "
                f"events; leave conversation out or use {bound_to!r}",
                code=errors.CONVERSATION_FORBIDDEN,
            )
        conversation = bound_to
    return EventFilter(frozenset(types) if types is not None else None, conversation)


async def list_events(store: Store, query: ListEvents, *, bound_to: str | None = None) -> EventPage:
    """``events.list {after?, limit?, types?, conversation?}``: up to ``limit`` events after
    ``after`` (default: from the oldest kept), oldest first; ``nextAfter`` is the point to ask
    from next, ``latestId`` the newest event of all."""
    after, limit = query.after, query.limit
    chosen = event_filter(query.types, query.conversation, bound_to)
    async with store.read_uow() as uow:
        if after:
            await _check_resumable(uow, after)
        rows = await read_after(uow, after or 0, limit, chosen)
        latest = await uow.events.latest_id()
    next_after = int(rows[-1]["id"]) if rows else max(after or 0, 0)
    return EventPage(
        events=[Event.of(row) for row in rows], next_after=next_after, latest_id=latest
    )


async def read_after(
    uow: UnitOfWork, after: int, limit: int, chosen: EventFilter
) -> list[EventRow]:
    types = sorted(chosen.types) if chosen.types is not None else None
    return await uow.events.after(after, limit, types=types, conversation_id=chosen.conversation)


async def _check_resumable(uow: UnitOfWork, after: int) -> None:
    """Refuse a resume point whose following events were pruned: the event it names is gone
    and older events than the oldest kept existed."""
    oldest = await uow.events.oldest_id()
    if oldest is None or after >= oldest or await uow.events.exists(after):
        return
    if after + 1 == oldest:
        return
    raise EventsExpired(
        f"resume point {after} is older than the oldest event kept ({oldest}): events in "
        f"between were removed by the retention; {RESYNC}",
        data={"oldestId": oldest},
    )


@dataclass(frozen=True, slots=True)
class Cut:
    """The follow ends: the client fell behind (or the server stops) and resumes after
    ``resume_after``."""

    resume_after: int
    reason: str


#: Awaited by ``follow`` before each batch it gives and at each heartbeat; raises to end it.
StillAllowed = Callable[[], Awaitable[None]]


async def follow(
    store: Store,
    after: int | None,
    chosen: EventFilter,
    *,
    heartbeat_s: float,
    still_allowed: StillAllowed | None = None,
) -> AsyncIterator[list[EventRow] | Cut | None]:
    """Batches of events (the outbox's rows) after ``after`` (None: from now on) as they
    commit, a ``None`` after ``heartbeat_s`` without one, and a ``Cut`` before it stops
    early. Raises ``EventsExpired`` first when ``after`` cannot be resumed.

    ``still_allowed`` (a credential's reader: ``credentials.confirm_still_holds``) is awaited
    after each batch is read and before it is given, and at each heartbeat; what it raises
    ends the follow without that batch, so nothing committed after a revocation goes out.
    """
    async with store.feed.subscribe(
        chosen.accepts, conversation=chosen.conversation
    ) as subscription:
        cursor = after if after is not None else subscription.start_after
        if after:
            async with store.read_uow() as uow:
                await _check_resumable(uow, after)
        while True:  # what committed before the subscription began
            async with store.read_uow() as uow:
                rows = await read_after(uow, cursor, MAX_PAGE, chosen)
            if rows:
                if still_allowed is not None:
                    await still_allowed()
                cursor = int(rows[-1]["id"])
                yield rows
            if len(rows) < MAX_PAGE:
                break
        while True:
            batch = [
                row for row in await subscription.next_batch(heartbeat_s) if row["id"] > cursor
            ]
            if still_allowed is not None and (batch or not subscription.overflowed):
                await still_allowed()
            if batch:
                cursor = int(batch[-1]["id"])
                yield batch
            elif subscription.overflowed:
                yield Cut(cursor, "the client fell behind the events")
                return
            else:
                yield None


async def prune_events(store: Store, retention_days: float) -> int:
    """Delete events older than the retention, a batch per unit of work; how many."""
    before = utcnow() - timedelta(days=retention_days)
    total = 0
    while True:
        async with store.uow() as uow:
            count = await uow.events.prune(before, PRUNE_BATCH)
            await uow.commit()
        total += count
        if count < PRUNE_BATCH:
            return total


async def tend_events(store: Store, retention_days: float) -> None:
    """At start and every ``PRUNE_EVERY_S`` until cancelled: publish the events a process
    committed but died before it moved out of the inbox (``Store.move_stranded_events``), and
    prune the events past the retention. A failed pass is logged and the next one tries
    again."""
    while True:
        try:
            moved = await store.move_stranded_events()
            if moved:
                log.info("published %d event(s) a process committed but did not publish", moved)
            await prune_events(store, retention_days)
        except Exception:
            log.warning("tending the events failed; trying again later", exc_info=True)
        await asyncio.sleep(PRUNE_EVERY_S)
