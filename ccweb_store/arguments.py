"""Reading tool arguments and host params: typed getters that raise ``invalid_arguments``.

Unknown extra keys are ignored (old threads send them); a present key of the wrong type is an
error the caller can correct.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ccweb_store.errors import InvalidInput


def require_mapping(args: object, what: str = "arguments") -> Mapping[str, Any]:
    """``args`` itself when it is an object; ``None`` reads as empty."""
    if args is None:
        return {}
    if not isinstance(args, Mapping):
        raise InvalidInput(f"{what} must be a JSON object, got {type(args).__name__}")
    return args


def require_str(args: Mapping[str, Any], key: str) -> str:
    """A required non-empty string."""
    value = args.get(key)
    if value is None:
        raise InvalidInput(f"{key} is required")
    if not isinstance(value, str) or not value.strip():
        raise InvalidInput(f"{key} must be a non-empty string")
    return value


def optional_str(args: Mapping[str, Any], key: str) -> str | None:
    """A string, or None when absent."""
    value = args.get(key)
    if value is None:
        return None
    if not isinstance(value, str):
        raise InvalidInput(f"{key} must be a string, got {type(value).__name__}")
    return value


def optional_bool(args: Mapping[str, Any], key: str, default: bool = False) -> bool:
    """A boolean, or ``default`` when absent."""
    value = args.get(key)
    if value is None:
        return default
    if not isinstance(value, bool):
        raise InvalidInput(f"{key} must be true or false, got {value!r}")
    return value


def optional_int(args: Mapping[str, Any], key: str, *, minimum: int | None = None) -> int | None:
    """An integer (at least ``minimum``), or None when absent."""
    value = args.get(key)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int):
        raise InvalidInput(f"{key} must be an integer, got {value!r}")
    if minimum is not None and value < minimum:
        raise InvalidInput(f"{key} must be at least {minimum}, got {value}")
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
    args: Mapping[str, Any], key: str, *, minimum: float | None = None
) -> float | None:
    """A number (at least ``minimum``), or None when absent."""
    value = args.get(key)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise InvalidInput(f"{key} must be a number, got {value!r}")
    if minimum is not None and value < minimum:
        raise InvalidInput(f"{key} must be at least {minimum}, got {value}")
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
