"""Reading host-API params: typed getters that fail with ``invalid_arguments``.

``/rpc`` methods take a plain JSON object; these keep each method's first lines short and
its error messages uniform (``"sessionId must be a string"``).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ccweb_store.errors import InvalidInput


def required_str(params: Mapping[str, Any], key: str) -> str:
    """A non-empty string param that must be present."""
    value = params.get(key)
    if not isinstance(value, str) or not value:
        raise InvalidInput(f"{key} is required and must be a non-empty string")
    return value


def optional_str(params: Mapping[str, Any], key: str) -> str | None:
    """A string param, ``None`` when absent or null."""
    value = params.get(key)
    if value is not None and not isinstance(value, str):
        raise InvalidInput(f"{key} must be a string")
    return value


def optional_int(params: Mapping[str, Any], key: str, *, minimum: int | None = None) -> int | None:
    """An integer param (booleans refused), ``None`` when absent or null."""
    value = params.get(key)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int):
        raise InvalidInput(f"{key} must be an integer")
    if minimum is not None and value < minimum:
        raise InvalidInput(f"{key} must be at least {minimum}")
    return value


def optional_bool(params: Mapping[str, Any], key: str, default: bool = False) -> bool:
    """A boolean param, ``default`` when absent or null."""
    value = params.get(key)
    if value is None:
        return default
    if not isinstance(value, bool):
        raise InvalidInput(f"{key} must be true or false")
    return value


def optional_object(params: Mapping[str, Any], key: str) -> dict[str, Any] | None:
    """A JSON-object param, ``None`` when absent or null."""
    value = params.get(key)
    if value is not None and not isinstance(value, dict):
        raise InvalidInput(f"{key} must be a JSON object")
    return value
