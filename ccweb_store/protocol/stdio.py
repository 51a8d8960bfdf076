"""MCP over stdio straight on the database: the same ``handle_mcp_payload`` as ``POST /mcp``,
one newline-delimited JSON-RPC message per line (``stdio_bridge.serve_lines``). The other way,
bridged to a running server, is ``stdio_bridge``, which loads none of the store."""

from __future__ import annotations

import logging
import sys
from typing import Any

from ccweb_store.config import Settings
from ccweb_store.domain.context import Source
from ccweb_store.protocol import mcp
from ccweb_store.protocol.stdio_bridge import serve_lines
from ccweb_store.store.db import migrate
from ccweb_store.store.uow import Store

log = logging.getLogger("ccweb_store.stdio")


async def serve_database(settings: Settings, source: Source) -> None:
    """Answer from the database itself, migrating it to head first."""
    store = Store.from_settings(settings)
    try:
        await migrate(store.engine)
        log.info("mcp-stdio on %s for source %s", store.dialect, source.session_id)

        async def answer(payload: Any, line: bytes) -> Any | None:
            return (await mcp.handle_mcp_payload(store, source, payload)).body

        await serve_lines(answer, sys.stdin.buffer, sys.stdout.buffer)
    finally:
        await store.dispose()
