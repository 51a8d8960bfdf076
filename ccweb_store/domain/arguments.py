"""Reading tool arguments and host params: typed getters that raise ``invalid_arguments``.

Unknown extra keys are ignored (old threads send them); a present key of the wrong type is an
error the caller can correct. Integers must fit the database's 64-bit columns, strings bound
for a sized column must fit it, and no text may hold U+0000 (``reject_nul``).
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


def require_str(args: Mapping[str, Any], key: str, *, max_length: int | None = None) -> str:
    """A required non-empty string (of at most ``max_length`` characters)."""
    value = args.get(key)
    if value is None:
        raise InvalidInput(f"{key} is required")
    if not isinstance(value, str) or not value.strip():
        raise InvalidInput(f"{key} must be a non-empty string")
    return _fits(value, key, max_length)


def optional_str(args: Mapping[str, Any], key: str, *, max_length: int | None = None) -> str | None:
    """A string (of at most ``max_length`` characters), or None when absent."""
    value = args.get(key)
    if value is None:
        return None
    if not isinstance(value, str):
        raise InvalidInput(f"{key} must be a string, got {type(value).__name__}")
    return _fits(value, key, max_length)


def _fits(value: str, key: str, max_length: int | None) -> str:
    if max_length is not None and len(value) > max_length:
        raise InvalidInput(f"{key} is {len(value)} characters long; the limit is {max_length}")
    return value


def optional_bool(args: Mapping[str, Any], key: str, default: bool = False) -> bool:
    """A boolean, or ``default`` when absent."""
    value = args.get(key)
    if value is None:
        return default
    if not isinstance(value, bool):
        raise InvalidInput(f"{key} must be true or false, got {value!r}")
    return value


def optional_int(
    args: Mapping[str, Any],
    key: str,
    *,
    minimum: int | None = None,
    maximum: int = INT64_MAX,
    unit: str = "",
) -> int | None:
    """An integer from ``minimum`` to ``maximum`` (a 64-bit integer at most), or None when
    absent. ``unit`` names what the maximum counts, for the error message."""
    value = args.get(key)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int):
        raise InvalidInput(f"{key} must be an integer, got {value!r}")
    if minimum is not None and value < minimum:
        raise InvalidInput(f"{key} must be at least {minimum}, got {value}")
    if value > maximum or value < -INT64_MAX - 1:
        raise InvalidInput(f"{key} must be at most {maximum}{unit}, got {value}")
    return value


def bounded_int(args: Mapping[str, Any], key: str, default: int, maximum: int) -> int:
    """An integer clamped to 1..``maximum`` (a page size, a budget), ``default`` when absent."""
    value = args.get(key)
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, int):
        raise InvalidInput(f"{key} must be an integer from 1 to {maximum}, got {value!r}")
    return max(1, min(maximum, value))


def optional_number(
    args: Mapping[str, Any],
    key: str,
    *,
    minimum: float | None = None,
    maximum: float | None = None,
    unit: str = "",
) -> float | None:
    """A number from ``minimum`` to ``maximum``, or None when absent."""
    value = args.get(key)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise InvalidInput(f"{key} must be a number, got {value!r}")
    if minimum is not None and value < minimum:
        raise InvalidInput(f"{key} must be at least {minimum}, got {value}")
    if maximum is not None and value > maximum:
        raise InvalidInput(f"{key} must be at most {maximum:g}{unit}, got {value:g}")
    return float(value)


def optional_str_list(args: Mapping[str, Any], key: str) -> list[str] | None:
    """A string or a list of strings (as a list), or None when absent."""
    value = args.get(key)
    if value is None:
        return None
    if isinstance(value, str):
        return [value]
    if not isinstance(value, list) or not all(isinstance(item, str) for item in value):
        raise InvalidInput(f"{key} must be a string or a list of strings")
    return list(value)


def optional_object(args: Mapping[str, Any], key: str) -> dict[str, Any] | None:
    """A JSON object, or None when absent."""
    value = args.get(key)
    if value is not None and not isinstance(value, dict):
        raise InvalidInput(f"{key} must be a JSON object, got {type(value).__name__}")
    return value


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
