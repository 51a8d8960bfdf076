"""Commits of other server processes, heard through PostgreSQL's ``LISTEN``.

A transaction that writes events queues ``pg_notify(CHANNEL)`` (``repositories.events``); the
server delivers it to every listening connection once that transaction commits. One
connection per process listens while anyone follows the event feed; when it is lost it is
opened again, and the feed reads once to catch up on what it may have missed meanwhile.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable
from contextlib import AbstractAsyncContextManager
from functools import partial
from typing import Any

from sqlalchemy.ext.asyncio import AsyncEngine

from ccweb_store.store.background import running

log = logging.getLogger("ccweb_store")

#: The channel an event-writing commit notifies.
CHANNEL = "ccweb_events"
#: How long to wait before opening the listening connection again after it failed.
RECONNECT_AFTER_S = 1.0


def listening(
    engine: AsyncEngine, poke: Callable[[], None], *, ignore: str
) -> AbstractAsyncContextManager[None]:
    """Call ``poke`` at every notice on ``CHANNEL`` while the block runs, but those whose
    payload is ``ignore`` (this process's own commits, which woke it already)."""
    return running(_listen(engine, poke, ignore), "ccweb-pg-listen")


def _set(event: asyncio.Event, *_args: Any) -> None:
    event.set()


async def _listen(engine: AsyncEngine, poke: Callable[[], None], ignore: str) -> None:
    def heard(_connection: Any, _pid: int, _channel: str, payload: str) -> None:
        if payload != ignore:
            poke()

    while True:
        driver: Any = None
        try:
            connection = await engine.connect()
        except Exception:
            log.warning("cannot open the LISTEN connection; trying again", exc_info=True)
            await asyncio.sleep(RECONNECT_AFTER_S)
            continue
        try:
            raw = await connection.get_raw_connection()
            driver = raw.driver_connection
            closed = asyncio.Event()
            driver.add_termination_listener(partial(_set, closed))
            await driver.add_listener(CHANNEL, heard)
            poke()  # anything committed while nobody listened is read now
            await closed.wait()
            log.warning("the LISTEN connection closed; opening it again")
        except asyncio.CancelledError:
            if driver is not None:
                with contextlib.suppress(Exception):
                    await driver.remove_listener(CHANNEL, heard)
            raise
        except Exception:
            log.warning("the LISTEN connection failed; opening it again", exc_info=True)
        finally:
            with contextlib.suppress(Exception):
                await connection.invalidate()
            with contextlib.suppress(Exception):
                await connection.close()
        await asyncio.sleep(RECONNECT_AFTER_S)
