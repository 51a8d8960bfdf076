"""The wire shapes of SPEC §3: timestamps as cc-web writes them."""

from __future__ import annotations

import random
from datetime import UTC, datetime, timedelta, timezone
from zoneinfo import ZoneInfo

from ccweb_store.schemas import iso


def _reference(value: datetime) -> str:
    return value.isoformat(timespec="milliseconds").replace("+00:00", "Z")


def test_timestamps_are_iso_with_milliseconds_and_z_for_utc() -> None:
    draw = random.Random(7)
    values = [
        datetime(2024, 5, 1, 12, 34, 56, 123999, tzinfo=UTC),  # milliseconds cut, not rounded
        datetime(2024, 5, 1, 12, 34, 56, tzinfo=UTC),
        datetime(999, 1, 2, 3, 4, 5, 6000, tzinfo=UTC),
        datetime(9999, 12, 31, 23, 59, 59, 999999, tzinfo=UTC),
        datetime(2024, 5, 1, 12, 0, tzinfo=timezone(timedelta(0))),
        datetime(2024, 5, 1, 12, 0, tzinfo=timezone(timedelta(hours=-3))),
        datetime(2024, 10, 27, 2, 30, tzinfo=ZoneInfo("Europe/Berlin"), fold=1),
        datetime(2024, 5, 1, 12, 0, 0, 5),  # naive: no zone written
    ] + [
        datetime(1, 1, 1, tzinfo=UTC)
        + timedelta(days=draw.randrange(3_000_000), microseconds=draw.randrange(86_400_000_000))
        for _ in range(2000)
    ]
    for value in values:
        assert iso(value) == _reference(value), value
    assert iso(values[0]) == "2024-05-01T12:34:56.123Z"
    assert iso(values[2]) == "0999-01-02T03:04:05.006Z"
    assert iso(values[5]) == "2024-05-01T12:00:00.000-03:00"
    assert iso(None) is None
