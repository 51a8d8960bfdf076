"""WAL checkpoints in a background thread (``checkpoints.WalCheckpointer``), on real files."""

from __future__ import annotations

import asyncio
import logging
import shutil
import sqlite3
import threading
from collections.abc import Callable
from pathlib import Path

import pytest

from ccweb_store.config import Settings
from ccweb_store.store.db import migrate
from ccweb_store.store.sqlite.checkpoints import WalCheckpointer
from ccweb_store.store.uow import Store

#: Only a guard against hanging: every wait below ends as soon as its condition holds.
PATIENCE_SECONDS = 30.0


async def eventually(condition: Callable[[], bool]) -> None:
    loop = asyncio.get_running_loop()
    give_up = loop.time() + PATIENCE_SECONDS
    while not condition():
        if loop.time() > give_up:
            raise AssertionError("the checkpoint thread never got there")
        await asyncio.sleep(0.01)


def checkpoint_threads() -> set[threading.Thread]:
    return {t for t in threading.enumerate() if t.name.startswith("wal-checkpoint")}


def sessions_in_database_file_alone(path: Path, tmp_path: Path) -> int | None:
    """Rows of ``sessions`` in the database file without its WAL: only what was checkpointed.

    None while the file does not have the table yet (or was copied half-way through a
    checkpoint's writes)."""
    copy = tmp_path / "file-alone.db"
    shutil.copyfile(path, copy)
    connection = sqlite3.connect(copy)
    try:
        count: int = connection.execute("SELECT count(*) FROM sessions").fetchone()[0]
    except sqlite3.DatabaseError:
        return None
    finally:
        connection.close()
    return count


async def test_the_thread_copies_committed_writes_into_the_database_file(tmp_path: Path) -> None:
    path = tmp_path / "ccweb.db"
    store = Store.from_settings(Settings(database_url=f"sqlite:///{path}"))
    checkpointer = store.checkpointer
    assert checkpointer is not None
    checkpointer.idle_seconds = 0.05
    written = checkpointer.every + 10
    try:
        await migrate(store.engine)
        assert not checkpointer.running  # nothing committed through the store yet
        for i in range(written):
            async with store.uow() as uow:
                await uow.sessions.create(f"s{i}", title=f"Session {i}")
                await uow.commit()
        assert checkpointer.running
        wal = path.with_name(path.name + "-wal")
        assert wal.stat().st_size > 0  # the store's connections are open: the WAL stays
        # The thread's checkpoints reach the database file itself; SQLite's own automatic
        # checkpoint would not have run for these few pages.
        await eventually(lambda: sessions_in_database_file_alone(path, tmp_path) == written)
        assert checkpointer.runs >= 1 and checkpointer.failures == 0
    finally:
        await store.dispose()
    assert not checkpointer.running


async def test_each_store_stops_the_thread_it_started(tmp_path: Path) -> None:
    """Stores sharing an engine each checkpoint for their own writer; ``close`` stops only
    the closing store's thread, ``dispose`` the rest."""
    store = Store.from_settings(Settings(database_url=f"sqlite:///{tmp_path / 'shared.db'}"))
    sharing = Store(store.engine, store.settings)
    try:
        await migrate(store.engine)
        for index, active in enumerate((store, sharing)):
            async with active.uow() as uow:
                await uow.sessions.create(f"s{index}")
                await uow.commit()
        assert store.checkpointer is not None and store.checkpointer.running
        assert sharing.checkpointer is not None and sharing.checkpointer.running
        await sharing.close()
        assert not sharing.checkpointer.running
        assert store.checkpointer.running
        async with store.uow() as uow:  # the engine and the other store go on working
            await uow.sessions.create("after")
            await uow.commit()
    finally:
        await sharing.close()
        await store.dispose()
    assert not store.checkpointer.running


async def test_a_store_used_again_after_close_checkpoints_again(tmp_path: Path) -> None:
    path = tmp_path / "again.db"
    store = Store.from_settings(Settings(database_url=f"sqlite:///{path}"))
    checkpointer = store.checkpointer
    assert checkpointer is not None
    checkpointer.idle_seconds = 0.05
    try:
        await migrate(store.engine)
        async with store.uow() as uow:
            await uow.sessions.create("before")
            await uow.commit()
        await store.close()
        assert not checkpointer.running
        async with store.uow() as uow:
            await uow.sessions.create("after")
            await uow.commit()
        assert checkpointer.running
        await eventually(lambda: sessions_in_database_file_alone(path, tmp_path) == 2)
    finally:
        await store.dispose()
    assert not checkpointer.running


@pytest.mark.parametrize("url", ["sqlite+aiosqlite:///:memory:", "sqlite://"])
async def test_no_thread_for_in_memory_sqlite(url: str) -> None:
    before = checkpoint_threads()
    store = Store.from_settings(Settings(database_url=url))
    try:
        await migrate(store.engine)
        async with store.uow() as uow:
            await uow.sessions.create("memory")
            await uow.commit()
        assert store.checkpointer is None
        assert checkpoint_threads() == before
    finally:
        await store.dispose()


@pytest.mark.parametrize("backend", ["postgres"], indirect=True)
async def test_no_thread_for_postgresql(store: Store) -> None:
    before = checkpoint_threads()
    async with store.uow() as uow:
        await uow.sessions.create("pg")
        await uow.commit()
    assert store.checkpointer is None
    assert checkpoint_threads() == before


async def test_a_failed_checkpoint_is_logged_and_the_thread_keeps_going(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    path = tmp_path / "locked.db"
    setup = sqlite3.connect(path, isolation_level=None)
    setup.execute("PRAGMA journal_mode = WAL")
    setup.execute("CREATE TABLE sessions (id TEXT PRIMARY KEY)")
    setup.close()
    # Another connection holds the file in exclusive locking mode, with a write in its WAL.
    holder = sqlite3.connect(path, isolation_level=None)
    holder.execute("PRAGMA locking_mode = EXCLUSIVE")
    holder.execute("INSERT INTO sessions VALUES ('held')")
    checkpointer = WalCheckpointer(path, every=1, idle_seconds=0.05, busy_timeout=0)
    caplog.set_level(logging.WARNING, logger="ccweb_store.store.sqlite.checkpoints")
    try:
        checkpointer.note_commit()
        await eventually(lambda: checkpointer.failures >= 2)
        assert checkpointer.running and checkpointer.runs == 0
        warnings = [r for r in caplog.records if r.name == "ccweb_store.store.sqlite.checkpoints"]
        assert len(warnings) == 1  # repeated failures are logged once, then at debug level
        assert "WAL checkpoint of" in warnings[0].getMessage()
        assert "database is locked" in warnings[0].getMessage()

        holder.close()  # gives the file up (checkpointing it as the last connection)
        await eventually(lambda: checkpointer.runs >= 1)
        assert checkpointer.running
    finally:
        checkpointer.stop()
        holder.close()
    assert not checkpointer.running
