"""``ccweb_list_user_inputs`` (SPEC §5): the user's own words, read-only.

Placeholder until the user-inputs issue lands.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ccweb_store import errors
from ccweb_store.context import Source
from ccweb_store.errors import DomainError
from ccweb_store.uow import Store


async def list_user_inputs(store: Store, source: Source, args: Mapping[str, Any]) -> dict[str, Any]:
    """``ccweb_list_user_inputs``."""
    raise DomainError("ccweb_list_user_inputs is not implemented yet", code=errors.NOT_IMPLEMENTED)
