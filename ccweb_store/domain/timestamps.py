"""Time as the store keeps it and as the API writes it: aware UTC datetimes, and ISO 8601
text with milliseconds and a ``Z``."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import overload


def utcnow() -> datetime:
    """The current time, timezone-aware UTC."""
    return datetime.now(UTC)


#: The two- and three-digit fields of ``iso``, looked up rather than formatted: every object
#: the API answers with carries several timestamps.
_TWO_DIGITS = tuple(f"{n:02d}" for n in range(100))
_THREE_DIGITS = tuple(f"{n:03d}" for n in range(1000))


@overload
def iso(value: datetime) -> str: ...
@overload
def iso(value: None) -> None: ...
@overload
def iso(value: datetime | None) -> str | None: ...


def iso(value: datetime | None) -> str | None:
    """ISO 8601 UTC with milliseconds and a ``Z``, as cc-web writes timestamps."""
    if value is None:
        return None
    if value.tzinfo is UTC:  # every datetime read from the database
        return (
            f"{value.year:04d}-{_TWO_DIGITS[value.month]}-{_TWO_DIGITS[value.day]}"
            f"T{_TWO_DIGITS[value.hour]}:{_TWO_DIGITS[value.minute]}:"
            f"{_TWO_DIGITS[value.second]}.{_THREE_DIGITS[value.microsecond // 1000]}Z"
        )
    return value.isoformat(timespec="milliseconds").replace("+00:00", "Z")


def exact_iso(value: datetime) -> str:
    """``iso`` when the time is a whole millisecond (cc-web's precision), else the same form
    with all six digits of the microseconds: text that gives the time back exactly."""
    if value.microsecond % 1000 == 0:
        return iso(value)
    utc = value.astimezone(UTC) if value.tzinfo is not None else value
    return utc.replace(tzinfo=None).isoformat(timespec="microseconds") + "Z"
