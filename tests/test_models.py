"""The schema's own types and ids: SQLite datetimes stored and read exactly as SQLAlchemy's
``DATETIME`` did, and ids that stay ordered and unique across processes."""

from __future__ import annotations

import os
import random
import re
from datetime import UTC, datetime, timedelta, timezone
from pathlib import Path
from typing import Any
from zoneinfo import ZoneInfo

import pytest
import sqlalchemy as sa
from sqlalchemy.dialects import sqlite
from sqlalchemy.dialects.sqlite.aiosqlite import SQLiteDialect_aiosqlite

from ccweb_store.config import Settings
from ccweb_store.domain.ids import new_id
from ccweb_store.store.column_types import UTCDateTime
from ccweb_store.store.db import migrate
from ccweb_store.store.repositories.base import RUNS
from ccweb_store.store.statements import prebuilt
from ccweb_store.store.uow import Store

BERLIN = ZoneInfo("Europe/Berlin")
NEW_YORK = ZoneInfo("America/New_York")

DATETIMES = [
    datetime(2024, 5, 1, 12, 34, 56, 123456, tzinfo=UTC),
    datetime(2024, 5, 1, 12, 34, 56, tzinfo=UTC),  # microsecond 0
    datetime(2024, 5, 1, 12, 34, 56, 1, tzinfo=UTC),
    datetime(2024, 5, 1, 12, 34, 56, 123456),  # naive: taken as UTC
    datetime(2024, 5, 1),
    datetime(999, 12, 31, 23, 59, 59, 999999, tzinfo=UTC),  # year < 1000
    datetime(1, 1, 1, 0, 0, 0),
    datetime(12, 3, 4, 5, 6, 7, 8, tzinfo=UTC),
    datetime(9999, 12, 31, 23, 59, 59, 999999),
    datetime(2024, 5, 1, 12, 0, tzinfo=timezone(timedelta(hours=5, minutes=30))),
    datetime(2024, 5, 1, 1, 0, tzinfo=timezone(timedelta(hours=-8))),  # the day before in UTC
    datetime(2024, 12, 31, 23, 30, tzinfo=timezone(timedelta(hours=-1))),  # the next year
    datetime(2024, 5, 1, 12, 0, tzinfo=timezone(timedelta(0))),  # UTC, not the UTC object
    datetime(2024, 5, 1, 12, 0, tzinfo=ZoneInfo("UTC")),
    # Daylight saving time: the hour that does not exist and the hour that happens twice.
    datetime(2024, 3, 31, 1, 59, 59, 999999, tzinfo=BERLIN),
    datetime(2024, 3, 31, 2, 30, tzinfo=BERLIN),
    datetime(2024, 3, 31, 3, 0, tzinfo=BERLIN),
    datetime(2024, 10, 27, 2, 30, tzinfo=BERLIN, fold=0),
    datetime(2024, 10, 27, 2, 30, tzinfo=BERLIN, fold=1),
    datetime(2024, 11, 3, 1, 30, 0, 500, tzinfo=NEW_YORK, fold=1),
    datetime(2024, 7, 4, 23, 59, 59, 999999, tzinfo=NEW_YORK),
]

STORED_TEXTS = [
    "2024-05-01 12:34:56.123456",  # what SQLAlchemy's DATETIME writes
    "2024-05-01 12:34:56.000000",
    "0999-12-31 23:59:59.999999",
    "0001-01-01 00:00:00.000000",
    "9999-12-31 23:59:59.999999",
    "2024-05-01 12:34:56",  # what CURRENT_TIMESTAMP writes
    "2024-05-01 12:34",
    "2024-05-01 12",
    "2024-05-01T12:34:56.5",
    "2024-05-01 12:34:56,25",
    "2024-05-01",
    "20240501",
    "20240501T123456",
    "2024-W18-3",
    "2024-W18-3T01:02",
    "2024-05-01 12:34:56Z",
    "2024-05-01 12:34:56+00:00",
    "2024-05-01 12:34:56.123+05:30",
    "2024-05-01 01:00:00-08:00",
    "2024-05-01T12:34:56.123456-0130",
]

NOT_DATETIMES = ["", "yesterday", "2024-05-01 25:00:00", "2024-13-01 00:00:00", "2024-05-01 x"]


def _sqlite_dialects() -> list[sa.Dialect]:
    return [SQLiteDialect_aiosqlite(), sqlite.dialect()]


def _old_bind(dialect: sa.Dialect) -> Any:
    """What was stored before: the UTC conversion, then SQLAlchemy's SQLite DATETIME."""
    stock = sa.DateTime().dialect_impl(dialect).bind_processor(dialect)
    assert stock is not None
    return lambda value: stock(UTCDateTime().process_bind_param(value, dialect))


def _old_result(dialect: sa.Dialect) -> Any:
    """What was read before: SQLAlchemy's SQLite DATETIME, then the UTC conversion."""
    stock = sa.DateTime().dialect_impl(dialect).result_processor(dialect, None)
    assert stock is not None
    return lambda value: UTCDateTime().process_result_value(stock(value), dialect)


def _random_datetimes(count: int) -> list[datetime]:
    draw = random.Random(20240501)
    zones = [UTC, BERLIN, NEW_YORK, timezone(timedelta(hours=13, minutes=45)), None]
    values = []
    for _ in range(count):
        moment = datetime(2, 1, 1) + timedelta(
            days=draw.randrange(365 * 9990), microseconds=draw.randrange(86_400_000_000)
        )
        values.append(moment.replace(tzinfo=draw.choice(zones), fold=draw.randrange(2)))
    return values


@pytest.mark.parametrize("dialect", _sqlite_dialects(), ids=lambda d: type(d).__name__)
def test_sqlite_datetimes_are_stored_as_text_exactly_as_before(dialect: sa.Dialect) -> None:
    new = UTCDateTime().dialect_impl(dialect).bind_processor(dialect)
    old = _old_bind(dialect)
    assert new is not None
    assert new(None) is None and old(None) is None
    for value in DATETIMES + _random_datetimes(3000):
        stored = new(value)
        assert stored == old(value), value
        assert re.fullmatch(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.\d{6}", stored), stored
    assert new(datetime(2024, 10, 27, 2, 30, tzinfo=BERLIN, fold=1)) == "2024-10-27 01:30:00.000000"
    assert new(datetime(999, 1, 2, 3, 4, 5)) == "0999-01-02 03:04:05.000000"


@pytest.mark.parametrize("dialect", _sqlite_dialects(), ids=lambda d: type(d).__name__)
def test_sqlite_datetimes_of_whole_milliseconds_are_stored_exactly_as_before(
    dialect: sa.Dialect,
) -> None:
    """The time part's pieces made once (minute of the day, second, whole millisecond): every
    one of them, and times between whole milliseconds next to them."""
    new = UTCDateTime().dialect_impl(dialect).bind_processor(dialect)
    old = _old_bind(dialect)
    assert new is not None
    day = datetime(2023, 11, 14, tzinfo=UTC)
    values = [day + timedelta(minutes=m, seconds=m % 60) for m in range(24 * 60)]
    values += [day + timedelta(seconds=59, milliseconds=ms) for ms in range(1000)]
    values += [
        day + timedelta(hours=23, minutes=59, seconds=59, microseconds=us)
        for us in (1, 999, 999_999)
    ]
    values += [v.astimezone(BERLIN) for v in values[::7]] + [
        v.replace(tzinfo=None) for v in values[::11]
    ]
    for value in values:
        assert new(value) == old(value), value


@pytest.mark.parametrize("dialect", _sqlite_dialects(), ids=lambda d: type(d).__name__)
def test_sqlite_datetimes_of_the_same_dates_are_stored_exactly_as_before(
    dialect: sa.Dialect,
) -> None:
    """The date part of the text is kept per UTC date (a bounded cache): values that share
    dates, seen in any zone, and more dates than the cache keeps, twice over."""
    new = UTCDateTime().dialect_impl(dialect).bind_processor(dialect)
    old = _old_bind(dialect)
    assert new is not None
    draw = random.Random(15)
    zones = [UTC, BERLIN, NEW_YORK, timezone(timedelta(hours=-13, minutes=-45)), None]
    start = datetime(2024, 3, 30)
    around_midnight = [
        (start + timedelta(days=draw.randrange(4), hours=draw.choice([0, 1, 12, 22, 23])))
        .replace(minute=draw.randrange(60), microsecond=draw.randrange(1_000_000))
        .replace(tzinfo=draw.choice(zones), fold=draw.randrange(2))
        for _ in range(2000)
    ]
    many_days = [datetime(1990, 1, 1, 23, 59, 59) + timedelta(days=d) for d in range(6000)]
    for value in around_midnight + many_days + many_days + around_midnight:
        assert new(value) == old(value), value


@pytest.mark.parametrize("dialect", _sqlite_dialects(), ids=lambda d: type(d).__name__)
def test_sqlite_datetimes_read_back_exactly_as_before(dialect: sa.Dialect) -> None:
    new = UTCDateTime().dialect_impl(dialect).result_processor(dialect, None)
    old = _old_result(dialect)
    assert new is not None
    assert new(None) is None and old(None) is None
    bind = _old_bind(dialect)
    texts = STORED_TEXTS + [bind(value) for value in DATETIMES + _random_datetimes(3000)]
    for text in texts:
        read = new(text)
        assert read == old(text), text
        assert read.tzinfo is UTC, text  # and the same instant, compared above
    for text in NOT_DATETIMES:
        with pytest.raises(ValueError):
            old(text)
        with pytest.raises(ValueError):
            new(text)


def test_binding_one_time_again_gives_its_text_and_another_time_its_own() -> None:
    """SQLite's bind processor reuses the text of the value it converted last (a send binds
    one time four times); any other value, equal or not, is converted afresh."""
    from sqlalchemy.dialects.sqlite import dialect as sqlite_dialect

    dialect = sqlite_dialect()
    bind = UTCDateTime().dialect_impl(dialect).bind_processor(dialect)
    assert bind is not None
    first = datetime(2024, 5, 1, 14, 0, 0, 123456, tzinfo=BERLIN)
    second = datetime(2024, 5, 1, 12, 0, 0, 5, tzinfo=UTC)
    texts = [bind(value) for value in (first, first, second, None, first, second)]
    assert texts == [
        "2024-05-01 12:00:00.123456",
        "2024-05-01 12:00:00.123456",
        "2024-05-01 12:00:00.000005",
        None,
        "2024-05-01 12:00:00.123456",
        "2024-05-01 12:00:00.000005",
    ]


def test_postgresql_binds_through_sqlalchemy_and_reads_aware_datetimes_in_utc() -> None:
    """PostgreSQL stores zones itself: its bind processor is SQLAlchemy's own, and what it
    reads is converted to UTC unless it is in UTC already."""
    from sqlalchemy.dialects.postgresql.asyncpg import dialect as asyncpg_dialect

    dialect = asyncpg_dialect()
    bind = UTCDateTime().dialect_impl(dialect).bind_processor(dialect)
    if bind is not None:
        assert bind(datetime(2024, 5, 1, 14, tzinfo=BERLIN)) == datetime(2024, 5, 1, 12, tzinfo=UTC)
    result = UTCDateTime().dialect_impl(dialect).result_processor(dialect, None)
    assert result is not None
    assert result(datetime(2024, 5, 1, 14, tzinfo=BERLIN)) == datetime(2024, 5, 1, 12, tzinfo=UTC)
    assert result(datetime(2024, 5, 1, 14, tzinfo=BERLIN)).tzinfo is UTC
    in_utc = datetime(2024, 5, 1, 12, tzinfo=UTC)
    assert result(in_utc) is in_utc


async def test_rows_written_in_the_old_format_read_back_and_compare_as_before(
    tmp_path: Path,
) -> None:
    """On a real SQLite file: text written by hand in the stored formats (with and without
    microseconds, and ``CURRENT_TIMESTAMP``'s) reads back through the store's driver and
    through SQLAlchemy's own execution as the same UTC datetimes, and comparisons and ordering
    in SQL (string comparisons) still hold."""
    store = Store.from_settings(Settings(database_url=f"sqlite:///{tmp_path / 'old.db'}"))
    written = {
        "run_a": "2024-05-01 12:00:00",
        "run_b": "2024-05-01 12:00:00.000001",
        "run_c": "2024-05-01 11:59:59.999999",
        "run_d": "2024-05-01 12:00:00.500000",
        "run_e": "2024-05-02 00:00:00",
    }
    try:
        await migrate(store.engine)
        async with store.uow() as uow:
            for run_id, text in written.items():
                # A session each: a session has at most one running run.
                await uow._execute(
                    sa.text("INSERT INTO sessions (id) VALUES (:id)"), {"id": f"s_{run_id}"}
                )
                await uow._execute(
                    sa.text(
                        "INSERT INTO runs (id, session_id, kind, status, lease_expires_at, "
                        "created_at) VALUES (:id, :session, 'user_turn', 'running', :at, :at)"
                    ),
                    {"id": run_id, "session": f"s_{run_id}", "at": text},
                )
            await uow.commit()
        async with store.read_uow() as uow:
            session = await uow.sessions.require("s_run_a")
            required = [await uow.runs.require(run_id) for run_id in written]
            recent = await uow.runs.list_recent(limit=10)
            earliest = await uow.runs.earliest_lease_expiry()
            now = datetime(2024, 5, 1, 14, 0, 0, 500000, tzinfo=BERLIN)  # 12:00:00.5 UTC
            expired = await uow.runs.expired(now=now)
            before = await uow.runs.list_recent(
                created_before=datetime(2024, 5, 1, 12, 0, 0, 2, tzinfo=UTC), limit=10
            )
        async with store.engine.connect() as connection:  # SQLAlchemy's own execution
            through = (
                await connection.execute(
                    sa.select(RUNS.c.id, RUNS.c.lease_expires_at, RUNS.c.created_at)
                )
            ).all()
    finally:
        await store.dispose()
    expected = {
        run_id: datetime.fromisoformat(text).replace(tzinfo=UTC) for run_id, text in written.items()
    }
    for rows in (required, recent):
        assert {run.id: run.lease_expires_at for run in rows} == expected
        assert {run.id: run.created_at for run in rows} == expected
        assert all(run.created_at.tzinfo is UTC for run in rows)
    assert {run_id: lease for run_id, lease, _ in through} == expected
    assert {run_id: created for run_id, _, created in through} == expected
    assert session.created_at.tzinfo is UTC  # CURRENT_TIMESTAMP's text
    assert abs(session.created_at - datetime.now(UTC)) < timedelta(hours=1)
    assert earliest == datetime(2024, 5, 1, 11, 59, 59, 999999, tzinfo=UTC)
    assert [run.id for run in expired] == ["run_c", "run_a", "run_b"]
    assert [run.id for run in before] == ["run_b", "run_a", "run_c"]


_SET_TIMES = prebuilt(
    sa.update(RUNS)
    .where(RUNS.c.id == sa.bindparam("run_id"))
    .values(started_at=sa.bindparam("p_at"), finished_at=sa.bindparam("p_at"))
)


async def test_both_execution_paths_store_the_same_text(tmp_path: Path) -> None:
    """A datetime bound by the store's driver (``statements.Compiled``) and through
    SQLAlchemy's own execution lands as the same text: the old format."""
    store = Store.from_settings(Settings(database_url=f"sqlite:///{tmp_path / 'same.db'}"))
    read = sa.text("SELECT started_at, finished_at FROM runs WHERE id = :id")
    stored: dict[str, list[tuple[str, str]]] = {"driver": [], "through": []}
    try:
        await migrate(store.engine)
        async with store.uow() as uow:
            await uow.sessions.create("s")
            run = await uow.runs.enqueue("s", "user_turn")
            await uow.commit()
        for value in DATETIMES:
            params = {"run_id": run.id, "p_at": value}
            async with store.uow() as uow:
                await uow._execute(_SET_TIMES, params)
                stored["driver"].append(tuple((await uow._execute(read, {"id": run.id})).one()))
                await uow.commit()
            async with store.engine.begin() as connection:
                await connection.execute(_SET_TIMES, params)
                raw = await connection.execute(read, {"id": run.id})
                stored["through"].append(tuple(raw.one()))
    finally:
        await store.dispose()
    old = _old_bind(SQLiteDialect_aiosqlite())
    assert stored["driver"] == stored["through"] == [(old(v), old(v)) for v in DATETIMES]


@pytest.mark.parametrize("backend", ["postgres"], indirect=True)
async def test_postgresql_reads_every_datetime_back_as_the_same_instant_in_utc(
    store: Store,
) -> None:
    """asyncpg's datetimes are handed back as they are when in UTC (``_aware_to_utc``):
    every value, ``datetime.max`` (stored as infinity, read back naive) included, comes back
    the same instant, aware and in UTC, through the store's driver and through SQLAlchemy's
    own execution."""
    stmt = prebuilt(
        sa.select(RUNS.c.started_at, RUNS.c.finished_at).where(RUNS.c.id == sa.bindparam("id"))
    )
    set_times = sa.update(RUNS).where(RUNS.c.id == sa.bindparam("run_id"))
    async with store.uow() as uow:
        await uow.sessions.create("s")
        run = await uow.runs.enqueue("s", "user_turn")
        await uow.commit()
    for value in DATETIMES:
        params = {"run_id": run.id, "p_at": value}
        async with store.uow() as uow:
            await uow._execute(
                set_times.values(started_at=sa.bindparam("p_at"), finished_at=None), params
            )
            read = [tuple((await uow._execute(stmt, {"id": run.id})).one())]
            await uow.commit()
        async with store.engine.connect() as connection:
            read.append(tuple((await connection.execute(stmt, {"id": run.id})).one()))
        instant = UTCDateTime().process_bind_param(value, store.engine.dialect)
        assert read == [(instant, None)] * 2, value
        assert all(at.tzinfo is UTC for at, _ in read), value


def _random_part(identifier: str) -> str:
    return identifier[-10:]


def test_ids_stay_unique_and_in_creation_order_when_made_in_a_burst() -> None:
    ids = [new_id("run") for _ in range(50_000)]
    assert len(set(ids)) == len(ids)
    assert ids == sorted(ids)
    assert all(re.fullmatch(r"run_[0-9a-f]{16}[0-9a-f]{10}", i) for i in ids)
    assert len({_random_part(i) for i in ids}) > len(ids) - 5  # 40 random bits each


def test_a_forked_child_draws_other_random_parts_than_its_parent() -> None:
    """The random part comes from a per-process generator: a child forked from the parent
    is reseeded, so the two do not make the same ids when their clocks agree."""
    new_id("run")  # the generator exists and has been used before the fork
    read_end, write_end = os.pipe()
    child = os.fork()
    if child == 0:  # pragma: no cover - the child process
        try:
            os.close(read_end)
            os.write(write_end, " ".join(new_id("run") for _ in range(20)).encode())
        finally:
            os._exit(0)
    os.close(write_end)
    mine = [new_id("run") for _ in range(20)]
    with os.fdopen(read_end, "rb") as pipe:
        theirs = pipe.read().decode().split()
    _, status = os.waitpid(child, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    assert len(theirs) == 20
    assert not {_random_part(i) for i in mine} & {_random_part(i) for i in theirs}
