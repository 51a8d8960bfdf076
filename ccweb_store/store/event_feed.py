"""Following the event outbox in one process: one reader for every subscriber.

A commit that wrote events wakes the feed (``EventFeed.poke``, called by the unit of work);
commits of other processes wake it through the database's own watch (``watch_commits``:
``LISTEN`` on PostgreSQL, ``PRAGMA data_version`` on a SQLite file), which runs only while
someone follows (and ``LINGER_S`` after the last one left). The feed then reads the events
after the last one it handed out, once for everyone, and gives each subscriber those its
filter takes. A subscriber's queue is bounded: one that falls behind is marked
``overflowed`` and given nothing more, so a slow client never grows the server's memory; it
resumes from the last event it took.

Ids only grow in commit order (``repositories.events``), so "after id N" never misses or
repeats an event, whatever the feed was doing when a subscriber joined: it registers first,
then reads from the database what came before (``Subscription`` users do this; see
``services.event_reads``).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections import deque
from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from typing import Any

from ccweb_store.domain import events
from ccweb_store.store.event_rows import event_row

log = logging.getLogger("ccweb_store")

#: Events read at once; the feed reads again at once after a full page.
PAGE = 500
#: How many events may wait for one subscriber before it counts as fallen behind.
QUEUE_LIMIT = 2000
#: With nothing waking it, the feed still reads this often: a wake-up lost with a dropped
#: connection delays an event by at most this long.
FALLBACK_READ_S = 2.0
#: How long the feed goes on watching after its last subscriber left, without reading: the
#: next long poll of a worker (which subscribes anew for each claim) finds it running.
LINGER_S = 10.0
#: How long the feed waits before reading again after the database failed a read.
RETRY_AFTER_FAILURE_S = 1.0

Event = dict[str, Any]
ReadAfter = Callable[[int, int], Any]  # (after, limit) -> awaitable list of events
LatestId = Callable[[], Any]  # () -> awaitable int
Watch = Callable[[Callable[[], None]], AbstractAsyncContextManager[None]]


class Wakeup:
    """A generation counter that coroutines can wait to see change."""

    def __init__(self) -> None:
        self.generation = 0
        self._waiters: list[asyncio.Future[None]] = []

    def poke(self) -> None:
        self.generation += 1
        waiters, self._waiters = self._waiters, []
        for waiter in waiters:
            if not waiter.done():
                waiter.set_result(None)

    async def wait(self, seen: int, seconds: float) -> None:
        """Return once the generation is past ``seen``, or after ``seconds``."""
        if self.generation != seen:
            return
        waiter = asyncio.get_running_loop().create_future()
        self._waiters.append(waiter)
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(waiter, seconds)


class Subscription:
    """Events handed to one subscriber: those ``accepts`` takes, up to ``QUEUE_LIMIT`` waiting."""

    def __init__(self, accepts: Callable[[Event], bool], limit: int = QUEUE_LIMIT) -> None:
        self.accepts = accepts
        self.limit = limit
        #: The newest event committed when it began: it is offered only those after it.
        self.start_after = 0
        self.queue: deque[Event] = deque()
        #: Set when more than ``limit`` events waited: nothing more is queued.
        self.overflowed = False
        self.wakeup = Wakeup()

    def push(self, event: Event) -> None:
        if self.overflowed or event["id"] <= self.start_after or not self.accepts(event):
            return
        if len(self.queue) >= self.limit:
            self.overflowed = True
        else:
            self.queue.append(event)
        self.wakeup.poke()

    def rearm(self) -> None:
        """Take events again after falling behind: for a subscriber that only waits for the
        next one (a long-poll claim), which reads nothing it was given."""
        self.queue.clear()
        self.overflowed = False

    async def next_batch(self, seconds: float) -> list[Event]:
        """The events queued so far (waiting up to ``seconds`` for one)."""
        if not self.queue and not self.overflowed:
            await self.wakeup.wait(self.wakeup.generation, seconds)
        batch = list(self.queue)
        self.queue.clear()
        return batch


class EventFeed:
    """The outbox reader of one store, shared by every subscriber in the process."""

    def __init__(self, read_after: ReadAfter, latest_id: LatestId, watch: Watch) -> None:
        self._read_after = read_after
        self._latest_id = latest_id
        self._watch = watch
        self._wakeup = Wakeup()
        self._subscribers: set[Subscription] = set()
        #: How many subscribers follow each conversation, and those that follow none.
        self._following: dict[str | None, int] = {}
        self._unbound: set[Subscription] = set()
        #: The last event handed to subscribers (None until the feed first runs).
        self.cursor: int | None = None
        self._running = False
        #: Events were committed that no subscriber took, and not read yet.
        self._skipped = False
        self._task: asyncio.Task[None] | None = None
        self._start_lock = asyncio.Lock()

    def poke(self, written: Sequence[events.Event] | None = None) -> None:
        """Wake the feed: a commit of this process wrote the events ``written`` (their ids not
        known yet), or another process committed (None: what is unknown). Events no
        subscriber takes wake nobody: they are read with the next ones some subscriber does
        take (a subscriber that joins later reads what it missed from the database)."""
        if written is not None and not self._wanted(written):
            self._skipped = True
            return
        self._wakeup.poke()

    def _wanted(self, written: Sequence[events.Event]) -> bool:
        """Whether a subscriber may take one of ``written``: one that follows a conversation
        they concern (counted by conversation: no call per subscriber), or one that takes
        it by its own test (of the event as the outbox holds it)."""
        following = self._following
        if not following and not self._unbound:
            return False
        rows = [event_row(event) for event in written]
        for row in rows:
            if row["conversation_id"] in following:
                return True
            if row["peer_conversation_id"] in following:
                return True
        return any(subscriber.accepts(row) for row in rows for subscriber in self._unbound)

    @asynccontextmanager
    async def subscribe(
        self,
        accepts: Callable[[Event], bool],
        *,
        limit: int = QUEUE_LIMIT,
        conversation: str | None = None,
    ) -> AsyncIterator[Subscription]:
        """A subscription for as long as the block runs; every event committed after it began
        (after its ``start_after``) is offered to it. ``conversation``: it takes only events
        that concern that conversation (``accepts`` may narrow them further)."""
        subscription = Subscription(accepts, limit)
        async with self._start_lock:
            if not self._running:
                self.cursor = int(await self._latest_id())
                self._skipped = False
                self._running = True
                self._task = asyncio.create_task(self._follow(), name="ccweb-event-feed")
            elif not self._subscribers:  # lingering: it read nothing since the last one left
                self.cursor = int(await self._latest_id())
                self._skipped = False
            # Where the feed's reading stands, unless it let events nobody took wait: they
            # are older than this subscriber.
            start = int(await self._latest_id()) if self._skipped else self.cursor
            subscription.start_after = start or 0
            self._subscribers.add(subscription)
            if conversation is None:
                self._unbound.add(subscription)
            else:
                self._following[conversation] = self._following.get(conversation, 0) + 1
        try:
            yield subscription
        finally:
            self._subscribers.discard(subscription)
            if conversation is None:
                self._unbound.discard(subscription)
            elif self._following[conversation] > 1:
                self._following[conversation] -= 1
            else:
                del self._following[conversation]
            if not self._subscribers:
                self._wakeup.poke()  # the feed starts counting its linger

    async def _follow(self) -> None:
        idle_since: float | None = None
        loop = asyncio.get_running_loop()
        try:
            async with self._watch(self.poke):
                while True:
                    seen = self._wakeup.generation
                    if self._subscribers:
                        idle_since = None
                        try:
                            await self._read_new()
                        except Exception:
                            log.warning("reading new events failed; trying again", exc_info=True)
                            await asyncio.sleep(RETRY_AFTER_FAILURE_S)
                            continue
                    elif idle_since is None:
                        idle_since = loop.time()
                    elif loop.time() - idle_since >= LINGER_S:
                        # In the step that found nobody for that long: a new one restarts it.
                        self._running = False
                        break
                    await self._wakeup.wait(seen, FALLBACK_READ_S)
        except Exception:
            log.warning("the event feed stopped", exc_info=True)
        finally:
            self._running = False

    async def _read_new(self) -> None:
        self._skipped = False  # this read reaches past whatever was let wait
        while True:
            cursor = self.cursor or 0
            events: list[Event] = await self._read_after(cursor, PAGE)
            for event in events:
                for subscriber in tuple(self._subscribers):
                    subscriber.push(event)
            if events:
                self.cursor = int(events[-1]["id"])
            if len(events) < PAGE:
                return

    async def close(self) -> None:
        """Stop following (the store closes)."""
        self._subscribers.clear()
        self._following.clear()
        self._unbound.clear()
        task, self._task = self._task, None
        if task is not None and not task.done():
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
        self._running = False
