"""The wire shapes of SPEC §3: timestamps as cc-web writes them."""

from __future__ import annotations

import random
from datetime import UTC, datetime, timedelta, timezone
from zoneinfo import ZoneInfo

import sqlalchemy as sa

from ccweb_store.domain.timestamps import iso
from ccweb_store.store.column_types import IsoText
from ccweb_store.store.models import MessageRow
from ccweb_store.store.uow import Store


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


async def test_iso_text_reads_a_column_as_iso_gives_it(store: Store) -> None:
    """``IsoText``: SQLite's stored text rearranged (or, in another shape, parsed) and
    PostgreSQL's datetimes formatted give what ``iso`` gives of the datetime the column reads."""
    draw = random.Random(11)
    stamps = [
        datetime(2024, 5, 1, 12, 34, 56, 123999, tzinfo=UTC),
        datetime(2024, 5, 1, 12, 34, 56, tzinfo=UTC),
        datetime(2024, 5, 1, 23, 59, 59, 999999, tzinfo=timezone(timedelta(hours=5))),
        datetime(999, 1, 2, 3, 4, 5, 6000, tzinfo=UTC),
    ] + [
        datetime(1970, 1, 1, tzinfo=UTC)
        + timedelta(days=draw.randrange(30_000), microseconds=draw.randrange(86_400_000_000))
        for _ in range(200)
    ]
    column = MessageRow.__table__.c
    async with store.uow() as uow:
        await uow.sessions.create("iso-text", title="Timestamps")
        await uow._execute(
            sa.insert(MessageRow),
            [
                {
                    "id": f"m{n}",
                    "session_id": "iso-text",
                    "seq": n,
                    "role": "user",
                    "content": "hi",
                    "created_at": stamp,
                }
                for n, stamp in enumerate(stamps)
            ],
        )
        if store.dialect == "sqlite":  # text SQLite did not get from this store: parsed
            await uow._execute(
                sa.text(
                    "UPDATE messages SET created_at = '2024-05-01T12:00:00+02:00' WHERE id = 'm0'"
                )
            )
        await uow.commit()
    as_text = sa.type_coerce(column.created_at, IsoText())
    async with store.read_uow() as uow:
        rows = (
            await uow._execute(
                sa.select(column.id, column.created_at, as_text.label("text")).where(
                    column.session_id == "iso-text"
                )
            )
        ).all()
    assert len(rows) == len(stamps)
    for row in rows:
        assert row.text == iso(row.created_at), row
    if store.dialect == "sqlite":
        assert {row.id: row.text for row in rows}["m0"] == "2024-05-01T10:00:00.000Z"
