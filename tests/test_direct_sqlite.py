"""``repositories.direct`` on a real SQLite file: statements on one plain cursor per
connection, and ``Batch`` (its PostgreSQL side, one statement of CTEs, runs in test_sends.py
on both engines)."""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
from sqlalchemy.dialects.postgresql.asyncpg import PGDialect_asyncpg
from sqlalchemy.exc import IntegrityError

from ccweb_store.config import Settings
from ccweb_store.domain.errors import Conflict
from ccweb_store.store.db import migrate, plain_cursor
from ccweb_store.store.repositories import direct
from ccweb_store.store.uow import Store

conversions: list[str] = []


def _shout(value: str) -> str:
    """``Shouted``'s conversion, one function for every column (as ``UTCDateTime``'s)."""
    conversions.append(value)
    return value.upper()


class Shouted(sa.TypeDecorator[str]):
    """Text stored in capitals, converted by one plain function."""

    impl = sa.String
    cache_ok = True

    def bind_processor(self, dialect: Any) -> Any:
        return _shout


class Reversed(sa.TypeDecorator[str]):
    """Text stored backwards (SQLAlchemy makes its converter per column)."""

    impl = sa.String
    cache_ok = True

    def process_bind_param(self, value: str | None, dialect: Any) -> str | None:
        return None if value is None else value[::-1]


_METADATA = sa.MetaData()
_ITEMS = sa.Table(
    "batch_items",
    _METADATA,
    sa.Column("id", sa.String, primary_key=True),
    sa.Column("label", Shouted),
    sa.Column("rank", sa.Integer),
)
_NOTES = sa.Table(
    "batch_notes",
    _METADATA,
    sa.Column("id", sa.Integer, primary_key=True),
    sa.Column("item_id", sa.String),
    sa.Column("label", Shouted),
    sa.Column("mirror", Reversed),
)
_ADD_ITEM = sa.insert(_ITEMS).values(
    id=sa.bindparam("p_id"),
    label=sa.bindparam("p_label"),
    # SQLAlchemy binds the literals of this subquery itself: the batch fills them in.
    rank=sa.select(sa.func.coalesce(sa.func.max(_ITEMS.c.rank), 0) + 1).scalar_subquery(),
)
_ADD_NOTE = sa.insert(_NOTES).values(
    item_id=sa.bindparam("p_item"), label=sa.bindparam("p_label"), mirror=sa.bindparam("p_mirror")
)
_ITEM_AND_NOTE = direct.Batch(
    (_ADD_ITEM, {"p_id": "item", "p_label": "label"}),
    # The item's id goes in as it is and, converted by another type, backwards.
    (_ADD_NOTE, {"p_item": "item", "p_label": "label", "p_mirror": "item"}),
)


@pytest.fixture
def connection(tmp_path: Path) -> Iterator[sa.Connection]:
    """A connection of a plain (synchronous) SQLite engine: its driver connection is a plain
    ``sqlite3.Connection``, which keeps no cursor of its own."""
    engine = sa.create_engine(f"sqlite:///{tmp_path / 'batch.db'}")
    _METADATA.create_all(engine)
    with engine.connect() as connection:
        yield connection
    engine.dispose()


def _driver(connection: sa.Connection) -> sqlite3.Connection:
    driver: sqlite3.Connection = connection.connection.dbapi_connection  # type: ignore[assignment]
    return driver


def test_a_batch_runs_its_steps_converting_each_shared_value_once_per_type(
    connection: sa.Connection,
) -> None:
    conversions.clear()
    for item in ("ab", "cd"):
        values = {"item": item, "label": f"label {item}"}
        direct.execute_batch_sqlite(connection, _driver(connection), _ITEM_AND_NOTE, values)
        assert values["item"] == item  # converted values are added, not put in its place
    connection.commit()

    assert conversions == ["label ab", "label cd"]  # once per batch, though two steps bind it
    items = connection.execute(sa.text("SELECT id, label, rank FROM batch_items ORDER BY id"))
    assert items.all() == [("ab", "LABEL AB", 1), ("cd", "LABEL CD", 2)]
    notes = connection.execute(sa.text("SELECT item_id, label, mirror FROM batch_notes"))
    assert notes.all() == [("ab", "LABEL AB", "ba"), ("cd", "LABEL CD", "dc")]


def test_a_failing_step_raises_sqlalchemys_error(connection: sa.Connection) -> None:
    driver = _driver(connection)
    direct.execute_batch_sqlite(connection, driver, _ITEM_AND_NOTE, {"item": "a", "label": "x"})
    with pytest.raises(IntegrityError, match=r"UNIQUE constraint failed: batch_items\.id"):
        direct.execute_batch_sqlite(connection, driver, _ITEM_AND_NOTE, {"item": "a", "label": "y"})


@pytest.mark.parametrize(
    ("steps", "problem"),
    [
        ([(_ADD_ITEM.returning(_ITEMS.c.id), {"p_id": "item", "p_label": "label"})], "return"),
        ([(_ADD_ITEM, {"p_id": "item"})], "leaves 'p_label' unbound"),
    ],
    ids=["returns rows", "unbound"],
)
def test_a_batch_that_cannot_run_straight_is_refused_when_compiled(
    connection: sa.Connection, steps: list[Any], problem: str
) -> None:
    batch = direct.Batch(*steps)
    with pytest.raises(ValueError, match=problem):
        direct.execute_batch_sqlite(connection, _driver(connection), batch, {})


def test_on_postgresql_a_batch_is_one_statement_of_ctes_binding_the_values_names() -> None:
    compiled = _ITEM_AND_NOTE.as_one_statement().compile(dialect=PGDialect_asyncpg())
    sql = " ".join(str(compiled).split())
    assert sql.startswith("WITH step_0 AS (INSERT INTO batch_items ")
    assert ") INSERT INTO batch_notes " in sql
    assert set(compiled.positiontup or ()) - {"coalesce_1", "coalesce_2"} == {"item", "label"}
    assert _ITEM_AND_NOTE.names == ("item", "label")


async def test_statements_share_one_plain_cursor_and_go_on_after_an_error(
    tmp_path: Path,
) -> None:
    store = Store.from_settings(
        Settings(database_url=f"sqlite+aiosqlite:///{tmp_path / 'c.db'}", token=None)
    )
    request = {
        "request_id": "req-1",
        "source_conversation_id": "conv-a",
        "target_conversation_id": "conv-b",
        "status": "waiting",
    }
    try:
        await migrate(store.engine)
        async with store.uow() as uow:
            await uow.sessions.create("conv-a")
            await uow.replies.insert(request)
            driver = uow.sessions.state.driver
            assert driver is not None
            cursor = plain_cursor(driver)
            with pytest.raises(Conflict, match="req-1"):  # an IntegrityError on the cursor
                await uow.replies.insert(request)
            await uow.sessions.create("conv-b")
            assert plain_cursor(driver) is cursor
            await uow.commit()
        async with store.read_uow() as uow:
            assert {row.id for row in (await uow.sessions.list_page())[0]} == {"conv-a", "conv-b"}
            assert (await uow.replies.get("req-1")) is not None
    finally:
        await store.dispose()


_INSERT_NOTE = direct.prebuilt(
    sa.insert(_NOTES).values(
        id=sa.bindparam("id"),
        item_id=sa.bindparam("item_id"),
        label=sa.bindparam("label"),
        mirror=sa.bindparam("mirror"),
    )
)


def _note_rows(count: int) -> list[dict[str, Any]]:
    return [
        {
            "id": i,
            "item_id": f"item {i}",
            "label": f"label {i}",
            "mirror": None if i % 4 == 0 else f"m{i}",
        }
        for i in range(count)
    ]


def test_execute_many_converts_every_value_of_each_column_in_row_order(
    connection: sa.Connection,
) -> None:
    """Column by column (``execute_many``), each value converted by its type, None included
    (``Reversed`` gives None back), as SQLAlchemy's executemany does; rows in groups of
    ``ROWS_PER_INSERT`` and the rest one by one, in order."""
    count = 2 * direct.ROWS_PER_INSERT + 7
    rows = _note_rows(count)
    conversions.clear()
    direct.execute_many(connection, _driver(connection), _INSERT_NOTE, rows)
    connection.commit()
    assert conversions == [row["label"] for row in rows]  # each once, in order
    stored = connection.execute(
        sa.text("SELECT id, item_id, label, mirror FROM batch_notes ORDER BY rowid")
    ).all()
    assert stored == [
        (
            i,
            f"item {i}",
            f"LABEL {i}",
            None if i % 4 == 0 else f"m{i}"[::-1],
        )
        for i in range(count)
    ]


def test_execute_many_reports_a_value_its_type_cannot_convert(
    connection: sa.Connection,
) -> None:
    rows = _note_rows(5)
    rows[3]["label"] = 42  # no str: Shouted's conversion fails
    with pytest.raises(sa.exc.StatementError, match="upper"):
        direct.execute_many(connection, _driver(connection), _INSERT_NOTE, rows)
    connection.rollback()
    rows[3]["label"] = "fine"
    del rows[4]["mirror"]  # every row must have the first row's keys
    with pytest.raises(sa.exc.StatementError, match="mirror"):
        direct.execute_many(connection, _driver(connection), _INSERT_NOTE, rows)
    connection.rollback()
    assert connection.execute(sa.text("SELECT count(*) FROM batch_notes")).scalar() == 0
