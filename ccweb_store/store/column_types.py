"""Column types and the text SQLite stores a timestamp as.

SQLite has no timestamp type: every datetime column of the schema holds text shaped like
SQLAlchemy's ``DATETIME`` default ``storage_format``, ``YYYY-MM-DD HH:MM:SS.ffffff`` in UTC
(or ``CURRENT_TIMESTAMP``'s ``YYYY-MM-DD HH:MM:SS``). SQLite compares these as strings, so the
width must not vary. ``UTCDateTime`` converts both ways; ``IsoText`` reads such a column
straight as the API's text (``domain.timestamps.iso``).
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, date, datetime
from typing import Any

import sqlalchemy as sa
from sqlalchemy.types import TypeDecorator

from ccweb_store.domain.timestamps import iso

#: The date part of SQLite's timestamp text.
SQLITE_DATE_FORMAT = "%04d-%02d-%02d "
#: The date part of the text, by UTC date, for the dates formatted lately: rows written
#: together mostly share a few dates (an import writes a conversation's messages, hours
#: apart), and the date is half the formatting.
_date_texts: dict[date, str] = {}
_DATE_TEXTS_KEPT = 4096


#: The time part's pieces, made once: ``HH:MM:`` by minute of the day, ``SS.`` by second,
#: and the microseconds of a whole millisecond (``123000``) by millisecond.
_HOUR_MINUTE_TEXTS = tuple(
    f"{hour:02d}:{minute:02d}:" for hour in range(24) for minute in range(60)
)
_SECOND_TEXTS = tuple(f"{second:02d}." for second in range(60))
_MILLISECOND_TEXTS = tuple(f"{millisecond:03d}000" for millisecond in range(1000))


def _sqlite_datetime_to_text(value: datetime | None) -> str | None:
    """A datetime as SQLite stores it: naive taken as UTC, aware converted to UTC.

    The time part is put together from pieces made once (``HH:MM:``, ``SS.``, and the
    microseconds of a whole millisecond, the usual precision; others are formatted): the same
    text as ``time().isoformat("microseconds")``, made with less work per value.
    """
    if value is None:
        return None
    if value.tzinfo is not None and value.tzinfo is not UTC:
        value = value.astimezone(UTC)
    day = value.date()
    date_text = _date_texts.get(day)
    if date_text is None:
        if len(_date_texts) >= _DATE_TEXTS_KEPT:
            _date_texts.clear()
        date_text = SQLITE_DATE_FORMAT % (value.year, value.month, value.day)
        _date_texts[day] = date_text
    microsecond = value.microsecond
    return "".join(
        (
            date_text,
            _HOUR_MINUTE_TEXTS[value.hour * 60 + value.minute],
            _SECOND_TEXTS[value.second],
            _MILLISECOND_TEXTS[microsecond // 1000]
            if microsecond % 1000 == 0
            else f"{microsecond:06d}",
        )
    )


_fromisoformat = datetime.fromisoformat


def sqlite_text_to_datetime(value: str | None) -> datetime | None:
    """A stored SQLite datetime as an aware UTC datetime (text without an offset is UTC)."""
    if value is None:
        return None
    # Parsing the text with a UTC offset appended is cheaper than parsing it and then
    # ``replace(tzinfo=UTC)``, and text the store wrote has no offset of its own. Text with
    # one does not parse with another appended, and whatever does not come back in UTC (a
    # date alone, where "+" reads as the date-time separator) is converted the slow way.
    try:
        utc = _fromisoformat(value + "+00:00")
    except ValueError:
        utc = None
    if utc is not None and utc.tzinfo is UTC:
        return utc
    parsed = _fromisoformat(value)  # what SQLAlchemy's DATETIME result processor does
    if parsed.tzinfo is not None:
        return parsed.astimezone(UTC)
    return parsed.replace(tzinfo=UTC)


def _aware_to_utc(value: datetime | None) -> datetime | None:
    """A datetime read from the database as an aware UTC datetime (a naive one is UTC).
    asyncpg's are in UTC already, but for ±infinity, which it reads as naive ``datetime.max``
    and ``min``."""
    if value is None or value.tzinfo is UTC:
        return value
    if value.tzinfo is None:
        return value.replace(tzinfo=UTC)
    return value.astimezone(UTC)


class UTCDateTime(TypeDecorator[datetime]):
    """``TIMESTAMP WITH TIME ZONE`` that always hands back aware UTC datetimes.

    SQLite stores no zone, so naive values read from it are UTC by construction. On SQLite
    the conversion both ways is one plain function each (``bind_processor`` /
    ``result_processor``) instead of SQLAlchemy's ``DATETIME`` processor wrapped around
    ``process_bind_param`` / ``process_result_value``: the same values with fewer calls, and
    many datetimes pass through every request. PostgreSQL keeps SQLAlchemy's bind processor;
    asyncpg reads ``TIMESTAMPTZ`` as datetimes in UTC already, which its result processor
    (``_aware_to_utc``) hands back as they are.
    """

    impl = sa.DateTime(timezone=True)
    cache_ok = True

    def bind_processor(self, dialect: sa.Dialect) -> Callable[[Any], Any] | None:
        if dialect.name == "sqlite":
            return _sqlite_datetime_to_text
        return super().bind_processor(dialect)

    def result_processor(self, dialect: sa.Dialect, coltype: Any) -> Callable[[Any], Any] | None:
        if dialect.name == "sqlite":
            return sqlite_text_to_datetime
        if dialect.driver == "asyncpg":
            return _aware_to_utc
        return super().result_processor(dialect, coltype)

    def process_bind_param(self, value: datetime | None, dialect: sa.Dialect) -> datetime | None:
        if value is None:
            return None
        if value.tzinfo is None:
            value = value.replace(tzinfo=UTC)
        value = value.astimezone(UTC)
        return value.replace(tzinfo=None) if dialect.name == "sqlite" else value

    def process_result_value(self, value: datetime | None, dialect: sa.Dialect) -> datetime | None:
        return _aware_to_utc(value)


class IsoText(TypeDecorator[str]):
    """A timestamp column read as the text ``iso`` makes of it, for a query whose rows go out
    as they are (``sa.type_coerce(column, IsoText())``).

    SQLite stores a timestamp as ``YYYY-MM-DD HH:MM:SS.ffffff`` in UTC, whose ``iso`` is the
    same characters rearranged, without parsing a datetime and formatting it back. Text of
    another shape, and PostgreSQL's datetimes, go the usual way.
    """

    impl = sa.DateTime(timezone=True)
    cache_ok = True

    def result_processor(self, dialect: sa.Dialect, coltype: Any) -> Callable[[Any], Any]:
        if dialect.name == "sqlite":
            return iso_of_sqlite_text
        as_datetime = UTCDateTime().result_processor(dialect, coltype)

        def read(value: Any) -> str | None:
            moment: datetime | None = as_datetime(value) if as_datetime is not None else value
            return iso(moment)

        return read


def iso_of_sqlite_text(value: str | None) -> str | None:
    """``iso`` of a timestamp as SQLite stores it (``IsoText``): the characters rearranged when
    it has the store's shape, else parsed (``UTCDateTime``'s reading) and formatted."""
    if value is not None and len(value) == 26 and value[10] == " " and value[19] == ".":
        return f"{value[:10]}T{value[11:23]}Z"
    return iso(sqlite_text_to_datetime(value))
