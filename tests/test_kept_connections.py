"""Kept connections (``kept_connections``): SQLite's read-only units of work on kept
connections, their transactions begun and ended on the driver."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
from sqlalchemy import event

from ccweb_store.config import Settings
from ccweb_store.store.db import migrate
from ccweb_store.store.kept_connections import SQLiteReaders
from ccweb_store.store.uow import Store


async def _store(tmp_path: Path, statements: list[str] | None = None) -> Store:
    store = Store.from_settings(Settings(database_url=f"sqlite:///{tmp_path / 'readers.db'}"))
    await migrate(store.engine)
    if statements is not None:

        @event.listens_for(store.engine.sync_engine, "connect")
        def trace(dbapi_connection: Any, _record: Any) -> None:
            dbapi_connection.set_trace_callback(statements.append)

        await store.engine.dispose()  # reconnect, traced
    return store


async def test_reads_reuse_one_kept_connection_and_run_only_their_own_statements(
    tmp_path: Path,
) -> None:
    statements: list[str] = []
    store = await _store(tmp_path, statements)
    try:
        async with store.uow() as uow:
            await uow.sessions.create("s1", title="One")
            await uow.commit()
        statements.clear()
        seen = []
        for _ in range(3):
            async with store.read_uow() as uow:
                seen.append(uow.connection)
                assert (await uow.sessions.require("s1")).title == "One"
        verbs = [statement.split()[0].upper() for statement in statements]
    finally:
        await store.dispose()
    assert seen[0] is seen[1] is seen[2]
    assert verbs == ["BEGIN", "SELECT", "ROLLBACK"] * 3  # no pool reset, no connection setup


async def test_an_invalidated_kept_reader_is_dropped_for_a_fresh_one(tmp_path: Path) -> None:
    store = await _store(tmp_path)
    try:
        async with store.uow() as uow:
            await uow.sessions.create("s1", title="One")
            await uow.commit()
        async with store.read_uow() as uow:
            first = uow.connection
        await first.invalidate()  # kept idle, but no longer usable
        async with store.read_uow() as uow:
            second = uow.connection
            assert (await uow.sessions.require("s1")).title == "One"
        async with store.read_uow() as uow:
            assert uow.connection is second  # the fresh one is kept in its place
    finally:
        await store.dispose()
    assert second is not first


async def test_a_read_sees_one_snapshot_and_never_holds_up_a_writer(tmp_path: Path) -> None:
    store = await _store(tmp_path)
    try:
        async with store.uow() as uow:
            await uow.sessions.create("before")
            await uow.commit()
        async with store.read_uow() as uow:
            assert await uow.sessions.get("before") is not None  # the snapshot is fixed here
            async with store.uow() as writer:  # the writer goes ahead meanwhile
                await writer.sessions.create("during")
                await writer.commit()
            assert await uow.sessions.get("during") is None
            # a statement SQLAlchemy runs itself joins the same transaction
            count = (
                await uow.connection.execute(sa.text("SELECT count(*) FROM sessions"))
            ).scalar()
            assert count == 1
        async with store.read_uow() as uow:
            assert await uow.sessions.get("during") is not None
    finally:
        await store.dispose()


async def test_overlapping_reads_open_more_connections_and_keep_only_a_few(
    tmp_path: Path,
) -> None:
    store = await _store(tmp_path)
    in_use: list[Any] = []
    all_in = asyncio.Event()
    overlapping = SQLiteReaders.KEEP + 2

    async def read() -> None:
        async with store.read_uow() as uow:
            in_use.append(uow.connection)
            await uow.sessions.get("nobody")
            if len(in_use) == overlapping:
                all_in.set()
            await all_in.wait()

    try:
        await asyncio.gather(*(read() for _ in range(overlapping)))
        assert len({id(connection) for connection in in_use}) == overlapping
        assert sum(not connection.closed for connection in in_use) == SQLiteReaders.KEEP
        async with store.read_uow() as uow:
            assert uow.connection in in_use and not uow.connection.closed
    finally:
        await store.dispose()
    assert all(connection.closed for connection in in_use)


async def test_a_read_still_running_when_the_store_closes_is_closed_when_it_ends(
    tmp_path: Path,
) -> None:
    store = await _store(tmp_path)
    try:
        async with store.read_uow() as uow:
            await uow.sessions.get("nobody")
            await store.close()
        assert uow.connection.closed
    finally:
        await store.dispose()


@pytest.mark.parametrize("backend", ["postgres"], indirect=True)
async def test_postgresql_units_of_work_reuse_kept_connections_and_share_one_transaction(
    store: Store,
) -> None:
    """Statements straight on asyncpg and through SQLAlchemy share the unit of work's
    transaction; it commits or rolls back as a whole, and the connection is kept."""
    retitle = sa.text("UPDATE sessions SET title = 'by SQLAlchemy' WHERE id = :id")
    seen = []
    for session_id, commit in (("kept", True), ("dropped", False), ("mixed", True)):
        async with store.uow() as uow:
            seen.append(uow.connection)
            await uow.sessions.create(session_id, title="direct")
            await uow.connection.execute(retitle, {"id": session_id})
            if commit:
                await uow.commit()
    assert seen[0] is seen[1] is seen[2]
    async with store.read_uow() as uow:
        assert (await uow.sessions.require("kept")).title == "by SQLAlchemy"
        assert (await uow.sessions.require("mixed")).title == "by SQLAlchemy"
        assert await uow.sessions.get("dropped") is None
    async with store.uow() as uow:  # direct statements alone commit too
        await uow.sessions.create("alone")
        await uow.commit()
    async with store.read_uow() as uow:
        assert await uow.sessions.get("alone") is not None
