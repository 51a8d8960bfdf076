"""PostgreSQL: the service's upkeep when the server's autovacuum is off (``vacuum.py``): each
table vacuumed and analyzed only when its counters call for it, nothing on an idle database;
``import-json`` ends with ``ANALYZE``."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from pathlib import Path

import httpx
import pytest
import sqlalchemy as sa

from ccweb_store.config import Settings
from ccweb_store.http.app import create_app
from ccweb_store.importer.load import import_state
from ccweb_store.store.postgres.vacuum import (
    ANALYZE_ROWS,
    AUTO_INTERVAL,
    INSERTED_ROWS,
    VACUUM_ROWS,
    Pass,
    TableCounters,
    Upkeep,
    due,
    schema_tables,
    tend_tables,
)
from ccweb_store.store.uow import Store
from tests.servers import ROOT

on_postgres = pytest.mark.parametrize("backend", ["postgres"], indirect=True)
#: Messages written to make ``messages`` call for an ``ANALYZE``.
WRITTEN = ANALYZE_ROWS * 3


async def upkeep_counts(store: Store) -> dict[str, tuple[int, int]]:
    """``(vacuum_count, analyze_count)`` of each of the service's tables, read afresh."""
    async with store.engine.connect() as connection:
        rows = await connection.execute(
            sa.text(
                "SELECT relname, vacuum_count, analyze_count FROM pg_stat_user_tables "
                "WHERE relname = ANY(:names)"
            ),
            {"names": list(schema_tables())},
        )
        return {row.relname: (row.vacuum_count, row.analyze_count) for row in rows}


async def changed_since_analyze(store: Store, table: str) -> int:
    async with store.engine.connect() as connection:
        query = "SELECT n_mod_since_analyze FROM pg_stat_user_tables WHERE relname = :name"
        return int((await connection.execute(sa.text(query), {"name": table})).scalar_one())


async def write_messages(store: Store, count: int) -> None:
    """``count`` messages in one conversation, their counters flushed to the statistics."""
    async with store.uow() as uow:
        await uow.sessions.create("talk", title="Talk")
        await uow.commit()
    async with store.engine.connect() as connection:
        await connection.execute(
            sa.text(
                "INSERT INTO messages (id, session_id, seq, role, content) "
                "SELECT 'm' || n, 'talk', n, 'user', 'hello' FROM generate_series(1, :n) n"
            ),
            {"n": count},
        )
        await connection.commit()
        await connection.exec_driver_sql("SELECT pg_stat_force_next_flush()")
    deadline = time.monotonic() + 30
    while await changed_since_analyze(store, "messages") < count:
        assert time.monotonic() < deadline, "the statistics never counted the messages"
        await asyncio.sleep(0.2)


async def settled(store: Store) -> None:
    """Every table's counters as a pass leaves them: nothing left due."""
    await tend_tables(store.engine)


def test_a_table_is_due_by_its_own_counters_against_its_size() -> None:
    def counters(rows: float, dead: int = 0, changed: int = 0, inserted: int = 0) -> Upkeep:
        return due(TableCounters("t", rows, dead, changed, inserted))

    assert counters(0) == Upkeep(vacuum=False, analyze=False)
    assert counters(-1, changed=ANALYZE_ROWS) == Upkeep(vacuum=False, analyze=True)
    assert counters(1_000_000, changed=ANALYZE_ROWS) == Upkeep(vacuum=False, analyze=False)
    assert counters(1_000_000, changed=200_000) == Upkeep(vacuum=False, analyze=True)
    assert counters(0, dead=VACUUM_ROWS) == Upkeep(vacuum=True, analyze=False)
    assert counters(1_000_000, dead=VACUUM_ROWS) == Upkeep(vacuum=False, analyze=False)
    assert counters(1_000_000, dead=30_000) == Upkeep(vacuum=True, analyze=False)
    assert counters(0, inserted=INSERTED_ROWS) == Upkeep(vacuum=True, analyze=False)
    assert counters(1_000_000, inserted=INSERTED_ROWS) == Upkeep(vacuum=False, analyze=False)


@on_postgres
async def test_the_interval_follows_the_setting_and_else_the_servers_autovacuum(
    store: Store,
) -> None:
    assert await store.vacuum_interval(0) == 0
    assert await store.vacuum_interval(1.5) == 1.5
    async with store.engine.connect() as connection:
        autovacuum = (await connection.exec_driver_sql("SHOW autovacuum")).scalar()
    expected = AUTO_INTERVAL if autovacuum == "off" else 0
    assert await store.vacuum_interval(None) == expected


@on_postgres
async def test_a_pass_looks_after_only_the_tables_whose_counters_call_for_it(
    store: Store,
) -> None:
    await settled(store)
    idle_before = await upkeep_counts(store)
    idle = await tend_tables(store.engine)
    idle_after = await upkeep_counts(store)

    await write_messages(store, WRITTEN)
    written = await tend_tables(store.engine)
    after = await upkeep_counts(store)

    assert idle == Pass(vacuumed=(), analyzed=())
    assert idle_after == idle_before
    assert "messages" in written.analyzed
    assert set(written.analyzed) <= {"messages", "sessions"}
    assert after["messages"][1] == idle_after["messages"][1] + 1
    untouched = set(schema_tables()) - {"messages", "sessions"}
    assert {name: after[name] for name in untouched} == {
        name: idle_after[name] for name in untouched
    }


@pytest.fixture
async def tending_app(settings: Settings) -> AsyncIterator[httpx.AsyncClient]:
    app = create_app(settings.model_copy(update={"postgres_vacuum_seconds": 0.1}))
    async with (
        app.router.lifespan_context(app),
        httpx.AsyncClient(
            transport=httpx.ASGITransport(app=app), base_url="http://127.0.0.1"
        ) as http,
    ):
        yield http


@on_postgres
async def test_the_server_analyzes_a_table_once_enough_of_it_changed(
    tending_app: httpx.AsyncClient, store: Store
) -> None:
    await settled(store)
    before = await upkeep_counts(store)
    await write_messages(store, WRITTEN)
    deadline = time.monotonic() + 30
    while (await upkeep_counts(store))["messages"][1] == before["messages"][1]:
        assert time.monotonic() < deadline, "the server never analyzed the messages"
        await asyncio.sleep(0.1)
    health = await tending_app.get("/healthz")
    assert health.json()["status"] == "ok"


@on_postgres
async def test_import_json_ends_with_analyze(store: Store, tmp_path: Path) -> None:
    before = await upkeep_counts(store)
    await import_state(store, ROOT / "examples" / "cc-web-state")
    after = await upkeep_counts(store)
    assert all(after[name][1] == before[name][1] + 1 for name in schema_tables())


@pytest.mark.parametrize("backend", ["sqlite"], indirect=True)
async def test_sqlite_never_vacuums(store: Store) -> None:
    assert await store.vacuum_interval(None) == 0
    assert await store.vacuum_interval(2) == 0
