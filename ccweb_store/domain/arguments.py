"""What every call's arguments are held to beyond their model (``contract/``): an object
at all (``require_mapping``), no text holding U+0000 (``reject_nul``), and the bounds the
models share (64-bit integers, a century of seconds).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ccweb_store.domain.errors import InvalidInput

#: The largest integer a BIGINT column (and SQLite's INTEGER) holds.
INT64_MAX = 2**63 - 1
#: The largest integer an INTEGER column holds on PostgreSQL (hop counts).
INT32_MAX = 2**31 - 1
#: The longest span of time an argument may name: 100 years from now, either way, is a date.
CENTURY_SECONDS = 3_155_760_000


def require_mapping(args: object, what: str = "arguments") -> Mapping[str, Any]:
    """``args`` itself when it is an object; ``None`` reads as empty."""
    if args is None:
        return {}
    if not isinstance(args, Mapping):
        raise InvalidInput(f"{what} must be a JSON object, got {type(args).__name__}")
    return args


def reject_nul(value: object, what: str) -> None:
    """Refuse ``value`` when any text in it (object keys too) holds U+0000.

    PostgreSQL cannot store that character in text or JSON, so neither backend accepts it:
    the caller gets ``invalid_arguments`` instead of a database error.
    """
    pending = [value]
    while pending:
        item = pending.pop()
        if isinstance(item, str):
            if "\x00" in item:
                raise InvalidInput(
                    f"{what} holds a NUL character (U+0000), which cannot be stored; remove it"
                )
        elif isinstance(item, dict):
            pending.extend(item.keys())
            pending.extend(item.values())
        elif isinstance(item, list):
            pending.extend(item)
