"""Commits of other processes on the same SQLite file, seen through ``PRAGMA data_version``.

SQLite tells a connection when another connection committed to the file since it last asked:
the pragma's value changes. It is asked on this process's writer connection (between its
transactions), which this process's own commits never change, at a short interval while
anyone follows the event feed (and never otherwise); the feed is poked when it changed. This
process's own commits wake the feed themselves, with what they wrote. An in-memory database
has no other process to hear.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager

from ccweb_store.store.background import running

log = logging.getLogger("ccweb_store")

#: How often the pragma is read while someone follows.
POLL_EVERY_S = 0.02
#: How long to wait after the pragma could not be read.
RETRY_AFTER_S = 1.0

#: The version (``wait``: once the writer is free), or None when the writer is busy.
ReadVersion = Callable[[bool], Awaitable[int | None]]
#: Ticks skipped in a row at most: then the version is read even if that waits for a write.
MAX_SKIPPED = 5


@asynccontextmanager
async def watching(
    read_version: ReadVersion | None, poke: Callable[[], None]
) -> AsyncIterator[None]:
    """Call ``poke`` whenever another process committed, while the block runs
    (``read_version`` None: an in-memory database, nothing to watch)."""
    if read_version is None:
        yield
        return
    async with running(_watch(read_version, poke), "ccweb-sqlite-data-version"):
        yield


async def _watch(read_version: ReadVersion, poke: Callable[[], None]) -> None:
    last: int | None = None
    skipped = 0
    while True:
        try:
            version = await read_version(skipped >= MAX_SKIPPED)
            if version is None:
                skipped += 1
                await asyncio.sleep(POLL_EVERY_S)
                continue
            skipped = 0
        except Exception:
            log.warning("cannot read the SQLite data version; trying again", exc_info=True)
            last = None
            await asyncio.sleep(RETRY_AFTER_S)
            continue
        if last is not None and version != last:
            poke()
        last = version
        await asyncio.sleep(POLL_EVERY_S)
