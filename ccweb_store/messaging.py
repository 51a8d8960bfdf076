"""Cross-conversation sends (SPEC §2.2, §2.3): one transaction per send.

Placeholder until the messaging issue lands: every entry point answers ``not_implemented``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ccweb_store import errors
from ccweb_store.context import Source
from ccweb_store.errors import DomainError
from ccweb_store.uow import Store

ONE_WAY = "one_way"
RETURN_AND_CONTINUE = "return_and_continue"
REPLY_MODES = (ONE_WAY, RETURN_AND_CONTINUE)


def _not_yet(tool: str) -> DomainError:
    return DomainError(f"{tool} is not implemented yet", code=errors.NOT_IMPLEMENTED)


async def send_message(
    store: Store, source: Source, args: Mapping[str, Any], *, reply_mode: str | None = None
) -> dict[str, Any]:
    """``ccweb_send_message``; ``reply_mode`` forces a mode (the hidden alias)."""
    raise _not_yet("ccweb_send_message")


async def create_conversation(
    store: Store, source: Source, args: Mapping[str, Any]
) -> dict[str, Any]:
    """``ccweb_create_conversation``."""
    raise _not_yet("ccweb_create_conversation")


async def get_pending_reply(
    store: Store, source: Source, args: Mapping[str, Any]
) -> dict[str, Any]:
    """``ccweb_get_pending_reply``."""
    raise _not_yet("ccweb_get_pending_reply")
