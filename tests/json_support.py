"""Values for the tests of the JSON rule: nested ones, their depth, equality as JSON text."""

from __future__ import annotations

import json
from typing import Any


def nested(levels: int, leaf: Any = 1) -> Any:
    """``{"a": {"a": … leaf}}``, ``levels`` objects deep."""
    value = leaf
    for _ in range(levels):
        value = {"a": value}
    return value


def depth(value: Any) -> int:
    """How many arrays and objects ``value`` nests (``1`` is 0, ``{}`` is 1)."""
    if isinstance(value, dict):
        return 1 + max((depth(child) for child in value.values()), default=0)
    if isinstance(value, list):
        return 1 + max((depth(child) for child in value), default=0)
    return 0


def same(a: Any, b: Any) -> bool:
    """Equal as JSON text (NaN is not equal to itself as a float; jsonb orders keys)."""
    return json.dumps(a, sort_keys=True) == json.dumps(b, sort_keys=True)
