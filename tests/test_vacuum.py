"""PostgreSQL: the updated tables vacuumed by the service when the server's autovacuum is off
(``vacuum.py``)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator

import httpx
import pytest
import sqlalchemy as sa

from ccweb_store.config import Settings
from ccweb_store.http.app import create_app
from ccweb_store.store.postgres.vacuum import (
    AUTO_INTERVAL,
    UPDATED_TABLES,
    vacuum_updated_tables,
)
from ccweb_store.store.uow import Store

on_postgres = pytest.mark.parametrize("backend", ["postgres"], indirect=True)


async def _vacuum_counts(store: Store) -> dict[str, int]:
    """``vacuum_count`` of each updated table, read on a fresh connection (fresh statistics)."""
    async with store.engine.connect() as connection:
        rows = await connection.execute(
            sa.text(
                "SELECT relname, vacuum_count FROM pg_stat_user_tables WHERE relname = ANY(:names)"
            ),
            {"names": list(UPDATED_TABLES)},
        )
        return {row.relname: row.vacuum_count for row in rows}


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
async def test_a_pass_vacuums_every_updated_table(store: Store) -> None:
    before = await _vacuum_counts(store)
    await vacuum_updated_tables(store.engine)
    after = await _vacuum_counts(store)
    assert set(after) == set(UPDATED_TABLES)
    assert all(after[name] == before.get(name, 0) + 1 for name in UPDATED_TABLES), (before, after)


@pytest.fixture
async def vacuuming_app(settings: Settings) -> AsyncIterator[httpx.AsyncClient]:
    app = create_app(settings.model_copy(update={"postgres_vacuum_seconds": 0.1}))
    async with (
        app.router.lifespan_context(app),
        httpx.AsyncClient(
            transport=httpx.ASGITransport(app=app), base_url="http://127.0.0.1"
        ) as http,
    ):
        yield http


@on_postgres
async def test_the_server_vacuums_while_it_serves(
    vacuuming_app: httpx.AsyncClient, store: Store
) -> None:
    before = await _vacuum_counts(store)
    deadline = time.monotonic() + 10
    while (await _vacuum_counts(store)).get("runs", 0) < before.get("runs", 0) + 2:
        assert time.monotonic() < deadline, "the server did not vacuum the updated tables"
        await asyncio.sleep(0.1)
    health = await vacuuming_app.get("/healthz")
    assert health.json()["status"] == "ok"


@pytest.mark.parametrize("backend", ["sqlite"], indirect=True)
async def test_sqlite_never_vacuums(store: Store) -> None:
    assert await store.vacuum_interval(None) == 0
    assert await store.vacuum_interval(2) == 0
