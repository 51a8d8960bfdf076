"""Commits of other processes on the same SQLite file, seen through ``PRAGMA data_version``.

SQLite tells a connection when another connection committed to the file since it last asked:
the pragma's value changes. One connection asks at a short interval while anyone follows the
event feed (and never otherwise), and pokes the feed when it changed. An in-memory database
has no other process to hear.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from typing import Any

from ccweb_store.store.background import running

log = logging.getLogger("ccweb_store")

#: How often the pragma is read while someone follows.
POLL_EVERY_S = 0.02

Connect = Callable[[], Awaitable[tuple[Any, Any]]]


@asynccontextmanager
async def watching(connect: Connect | None, poke: Callable[[], None]) -> AsyncIterator[None]:
    """Call ``poke`` whenever another connection committed, while the block runs
    (``connect`` None: an in-memory database, nothing to watch)."""
    if connect is None:
        yield
        return
    async with running(_watch(connect, poke), "ccweb-sqlite-data-version"):
        yield


async def _watch(connect: Connect, poke: Callable[[], None]) -> None:
    while True:
        try:
            connection, driver = await connect()
        except Exception:
            log.warning("cannot open the SQLite commit watch; trying again", exc_info=True)
            await asyncio.sleep(1.0)
            continue
        try:
            last = None
            while True:
                rows = await driver.execute_fetchall("PRAGMA data_version")
                version = rows[0][0]
                if last is not None and version != last:
                    poke()
                last = version
                await asyncio.sleep(POLL_EVERY_S)
        except asyncio.CancelledError:
            raise
        except Exception:
            log.warning("the SQLite commit watch failed; opening it again", exc_info=True)
            await asyncio.sleep(1.0)
        finally:
            with contextlib.suppress(Exception):
                await connection.close()
