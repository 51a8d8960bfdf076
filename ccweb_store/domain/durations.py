"""Durations as people type and read them: ``90s``, ``10m``, ``1h30m``.

The CLI takes them in flags (``--older-than``, ``--expires-in``, ``--timeout``), the worker in
its configuration file, and the operator tables show ages with them.
"""

from __future__ import annotations

import re

_DURATION_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800}
_DURATION_PART = re.compile(r"(\d+)([smhdw])")


def parse_duration(text: str) -> int:
    """Seconds in ``90s``, ``10m``, ``2h``, ``1d``, ``1w``, ``1h30m`` or a bare ``600``.

    Raises ``ValueError`` with a message fit for the user on anything else.
    """
    value = text.strip().lower()
    if value.isdigit():
        return int(value)
    parts = _DURATION_PART.findall(value)
    if not value or "".join(number + unit for number, unit in parts) != value:
        raise ValueError(
            f"invalid duration {text!r}: use a number with a unit, e.g. 90s, 10m, 2h, 1d or 1h30m"
        )
    return sum(int(number) * _DURATION_UNITS[unit] for number, unit in parts)


def format_duration(seconds: float | None) -> str:
    """A short human age such as ``45s``, ``10m 5s``, ``2h 3m`` or ``3d 4h``."""
    if seconds is None:
        return "-"
    remaining = max(0, int(seconds))
    parts: list[str] = []
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60), ("s", 1)):
        count, remaining = divmod(remaining, size)
        if count or (unit == "s" and not parts):
            parts.append(f"{count}{unit}")
        if len(parts) == 2:
            break
    return " ".join(parts)
