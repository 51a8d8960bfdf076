"""SQLite's driver (``store.sqlite.driver``): this process's writers take turns on one
connection, another process's write lock is waited for on aiosqlite's thread while the event
loop serves, a failed unit of work leaves nothing, readers see only committed rows, and an
in-memory database works."""

from __future__ import annotations

import asyncio
import sqlite3
import subprocess
import sys
import threading
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
from sqlalchemy import event
from sqlalchemy.exc import IntegrityError, OperationalError

from ccweb_store.config import Settings
from ccweb_store.domain.errors import Conflict, DatabaseUnavailable
from ccweb_store.store.db import create_engine, migrate
from ccweb_store.store.uow import Store

#: Holds the write lock of the SQLite file given as its argument until its stdin closes.
_HOLD_WRITE_LOCK = """
import sqlite3, sys
connection = sqlite3.connect(sys.argv[1], isolation_level=None)
connection.execute("BEGIN IMMEDIATE")
print("locked", flush=True)
sys.stdin.read()
connection.execute("ROLLBACK")
"""


async def _store(path: Path, **settings: Any) -> Store:
    store = Store.from_settings(Settings(database_url=f"sqlite:///{path}", **settings))
    await migrate(store.engine)
    return store


@pytest.fixture
async def store(tmp_path: Path) -> AsyncIterator[Store]:
    active = await _store(tmp_path / "driver.db")
    try:
        yield active
    finally:
        await active.dispose()


@pytest.fixture
def locked_by_another_process(store: Store, tmp_path: Path) -> Iterator[subprocess.Popen[str]]:
    """Another process holding the write lock of ``store``'s file until its stdin closes."""
    process = subprocess.Popen(
        [sys.executable, "-c", _HOLD_WRITE_LOCK, str(tmp_path / "driver.db")],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert process.stdout is not None
    try:
        yield process
    finally:
        assert process.stdin is not None
        if not process.stdin.closed:
            process.stdin.close()
        process.wait(timeout=10)
        process.stdout.close()


def _on_disk(path: Path) -> set[str]:
    """The session ids committed to the file, read by a connection of its own."""
    with sqlite3.connect(path) as other:
        return {row[0] for row in other.execute("SELECT id FROM sessions")}


async def test_writers_of_one_process_take_turns(store: Store) -> None:
    """A unit of work that writes holds the writer from its start to its end: the next one
    begins only once the last has ended, and every write lands."""
    events: list[tuple[str, int]] = []

    async def write(n: int) -> None:
        async with store.uow() as uow:
            events.append(("in", n))
            await uow.sessions.create(f"w{n}")
            await asyncio.sleep(0.002)  # let the others try to begin meanwhile
            await uow.messages.append(f"w{n}", "user", "hello")
            events.append(("out", n))
            await uow.commit()

    await asyncio.gather(*(write(n) for n in range(8)))
    turns = [events[i : i + 2] for i in range(0, len(events), 2)]
    assert all(
        begun == ("in", n) and ended == ("out", n)
        for (begun, ended), n in zip(turns, [t[0][1] for t in turns], strict=True)
    )
    async with store.read_uow() as uow:
        rows, _ = await uow.sessions.list_page(limit=50)
        counts = await uow.messages.count([f"w{n}" for n in range(8)])
    assert sorted(row.id for row in rows) == sorted(f"w{n}" for n in range(8))
    assert set(counts.values()) == {1}


async def test_statements_run_on_aiosqlites_thread_not_the_event_loops(tmp_path: Path) -> None:
    store = Store.from_settings(Settings(database_url=f"sqlite:///{tmp_path / 'threads.db'}"))
    threads: list[int] = []

    @event.listens_for(store.engine.sync_engine, "connect")
    def trace(dbapi_connection: Any, _record: Any) -> None:
        dbapi_connection.run_async(
            lambda driver: driver.set_trace_callback(
                lambda _statement: threads.append(threading.get_ident())
            )
        )

    try:
        await migrate(store.engine)
        await store.engine.dispose()  # connect again, traced
        threads.clear()
        async with store.uow() as uow:
            await uow.sessions.create("s")
            await uow.commit()
        async with store.read_uow() as uow:
            assert await uow.sessions.get("s") is not None
    finally:
        await store.dispose()
    assert threads and threading.get_ident() not in threads


async def test_a_write_waits_for_another_processs_lock_while_the_event_loop_serves(
    store: Store, tmp_path: Path, locked_by_another_process: subprocess.Popen[str]
) -> None:
    process = locked_by_another_process
    assert process.stdout is not None and process.stdout.readline().strip() == "locked"
    ticks = 0

    async def ticker() -> None:
        nonlocal ticks
        while True:
            ticks += 1
            await asyncio.sleep(0.005)

    def release() -> None:
        assert process.stdin is not None
        process.stdin.close()

    ticking = asyncio.create_task(ticker())
    asyncio.get_running_loop().call_later(0.3, release)
    try:
        async with store.uow() as uow:
            assert ticks < 10  # the writer connects without waiting for the other process
            await uow.sessions.create("through")  # BEGIN IMMEDIATE waits for it
            waited_ticks = ticks
            await uow.commit()
    finally:
        ticking.cancel()
    assert waited_ticks >= 10  # the loop ran the ticker while the unit of work waited
    assert _on_disk(tmp_path / "driver.db") == {"through"}


async def test_a_write_waiting_past_the_busy_timeout_fails_as_database_unavailable(
    tmp_path: Path, locked_by_another_process: subprocess.Popen[str]
) -> None:
    process = locked_by_another_process
    settings = Settings(database_url=f"sqlite:///{tmp_path / 'driver.db'}")
    store = Store.from_settings(settings.model_copy(update={"sqlite_busy_timeout_ms": 200}))
    ticks = 0

    async def ticker() -> None:
        nonlocal ticks
        while True:
            ticks += 1
            await asyncio.sleep(0.005)

    try:
        assert process.stdout is not None and process.stdout.readline().strip() == "locked"
        ticking = asyncio.create_task(ticker())
        with pytest.raises(DatabaseUnavailable, match="CCWEB_SQLITE_BUSY_TIMEOUT_MS") as busy:
            async with store.uow() as uow:
                await uow.sessions.create("blocked")
        ticking.cancel()
        assert ticks >= 10  # the wait was not on the event loop
        assert busy.value.data == {"retryAfter": 2}
        assert isinstance(busy.value.__cause__, OperationalError)
        assert "database is locked" in str(busy.value.__cause__)
        assert process.stdin is not None
        process.stdin.close()
        process.wait(timeout=10)
        async with store.uow() as uow:  # and the next unit of work goes through
            await uow.sessions.create("through")
            await uow.commit()
        async with store.read_uow() as uow:
            assert await uow.sessions.get("through") is not None
            assert await uow.sessions.get("blocked") is None
    finally:
        await store.dispose()


async def test_a_failed_unit_of_work_leaves_nothing_behind_and_the_next_one_works(
    store: Store, tmp_path: Path
) -> None:
    async with store.uow() as uow:
        await uow.sessions.create("kept", title="Kept")
        await uow.commit()
    async with store.uow() as uow:  # never committed: rolled back at the end
        await uow.sessions.create("dropped")
    with pytest.raises(RuntimeError, match="the caller failed"):
        async with store.uow() as uow:  # fails half-way
            await uow.sessions.create("half")
            await uow.messages.append("half", "user", "lost")
            raise RuntimeError("the caller failed")
    async with store.uow() as uow:
        assert await uow.sessions.get("dropped") is None
        assert await uow.sessions.get("half") is None
        await uow.sessions.create("after", title="After")
        await uow.commit()
    assert _on_disk(tmp_path / "driver.db") == {"kept", "after"}


async def test_a_commit_the_database_refuses_leaves_nothing_and_the_writer_recovers(
    store: Store, tmp_path: Path
) -> None:
    with pytest.raises(IntegrityError):
        async with store.uow() as uow:
            await uow.sessions.create("a")
            # A foreign key checked at COMMIT: the whole transaction is refused then.
            await uow._execute(sa.text("PRAGMA defer_foreign_keys = ON"))
            await uow._execute(
                sa.text(
                    "INSERT INTO messages (id, session_id, seq, role, content)"
                    " VALUES ('m-orphan', 'nobody', 1, 'user', 'lost')"
                )
            )
            await uow.commit()
    assert _on_disk(tmp_path / "driver.db") == set()
    async with store.uow() as uow:
        await uow.sessions.create("after")
        await uow.commit()
    assert _on_disk(tmp_path / "driver.db") == {"after"}


async def test_a_unique_clash_is_integrity_error_and_the_repositorys_conflict(
    store: Store,
) -> None:
    async with store.uow() as uow:
        await uow.sessions.create("s", title="S")
        await uow.messages.append("s", "user", "one", id="m-1")
        with pytest.raises(Conflict) as caught:
            await uow.messages.append("s", "user", "two", id="m-1")
        assert isinstance(caught.value.__cause__, IntegrityError)
        with pytest.raises(IntegrityError, match="UNIQUE constraint failed"):
            await uow._execute(sa.text("INSERT INTO sessions (id) VALUES ('s')"))
    async with store.read_uow() as uow:  # the block above never committed
        assert await uow.sessions.get("s") is None


async def test_readers_see_only_committed_rows_and_never_wait_for_the_writer(
    store: Store,
) -> None:
    async with store.uow() as uow:
        await uow.sessions.create("before")
        await uow.commit()
    async with store.uow() as writer:
        await writer.sessions.create("during")
        async with asyncio.timeout(5):  # a read does not wait for the open write
            async with store.read_uow() as uow:
                assert await uow.sessions.get("before") is not None
                assert await uow.sessions.get("during") is None
        await writer.commit()
    async with store.read_uow() as uow:
        assert await uow.sessions.get("during") is not None


async def test_a_unit_of_work_runs_nothing_after_its_commit(store: Store) -> None:
    async with store.uow() as uow:
        await uow.sessions.create("done")
        await uow.commit()
        with pytest.raises(RuntimeError, match="has ended"):
            await uow.sessions.get("done")
        with pytest.raises(RuntimeError, match="already ended"):
            await uow.commit()


async def test_an_in_memory_database_works_with_reads_and_writes_taking_turns() -> None:
    store = Store(create_engine("sqlite+aiosqlite:///:memory:"))
    try:
        await migrate(store.engine)
        assert store.checkpointer is None

        async def write(n: int) -> None:
            async with store.uow() as uow:
                await uow.sessions.create(f"s{n}")
                await asyncio.sleep(0)
                await uow.messages.append(f"s{n}", "user", f"hello {n}")
                await uow.commit()

        async def read() -> int:
            async with store.read_uow() as uow:
                rows, _ = await uow.sessions.list_page(limit=50)
                return len(rows)

        async with asyncio.timeout(10):
            outcomes = await asyncio.gather(
                *(write(n) for n in range(5)), *(read() for _ in range(5))
            )
        assert all(0 <= count <= 5 for count in outcomes[5:])
        with pytest.raises(RuntimeError):
            async with store.uow() as uow:
                await uow.sessions.create("dropped")
                raise RuntimeError("the caller failed")
        async with store.read_uow() as uow:
            rows, _ = await uow.sessions.list_page(limit=50)
            assert sorted(row.id for row in rows) == [f"s{n}" for n in range(5)]
            assert [m.content for m in await uow.messages.list_after("s3")] == ["hello 3"]
    finally:
        await store.dispose()
