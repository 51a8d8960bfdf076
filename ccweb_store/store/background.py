"""A coroutine that runs beside a block: started when it begins, cancelled when it ends."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Coroutine
from contextlib import asynccontextmanager
from typing import Any


@asynccontextmanager
async def running(job: Coroutine[Any, Any, None], name: str) -> AsyncIterator[None]:
    """Run ``job`` as a task while the block runs; cancel it (and wait for it) after."""
    task = asyncio.create_task(job, name=name)
    try:
        yield
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
