"""SQLite's writer (``sqlite_writer.SQLiteWriter``): turns on one connection, group commit,
and waiting for another connection's write lock without blocking the event loop."""

from __future__ import annotations

import asyncio
import sqlite3
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
from sqlalchemy import event
from sqlalchemy.exc import IntegrityError

from ccweb_store.config import Settings
from ccweb_store.domain import errors
from ccweb_store.domain.context import Source
from ccweb_store.domain.errors import Conflict
from ccweb_store.services import conversations, messaging
from ccweb_store.store.db import migrate
from ccweb_store.store.sqlite.writer import SAVEPOINT
from ccweb_store.store.uow import Store


@pytest.fixture
async def traced(tmp_path: Path) -> AsyncIterator[tuple[Store, list[str]]]:
    """A migrated SQLite store, and every statement its connections run from now on."""
    store = Store.from_settings(Settings(database_url=f"sqlite:///{tmp_path / 'writer.db'}"))
    statements: list[str] = []

    @event.listens_for(store.engine.sync_engine, "connect")
    def trace(dbapi_connection: Any, _record: Any) -> None:
        dbapi_connection.set_trace_callback(statements.append)

    try:
        await migrate(store.engine)
        await store.engine.dispose()  # reconnect, traced
        statements.clear()
        yield store, statements
    finally:
        await store.dispose()


def _on_disk(path: Path) -> set[str]:
    """The session ids committed to the file, read by a connection of its own."""
    with sqlite3.connect(path) as other:
        return {row[0] for row in other.execute("SELECT id FROM sessions")}


def _verbs(statements: list[str]) -> list[str]:
    return [" ".join(statement.split()[:2]).upper() for statement in statements]


async def test_units_of_work_ready_together_share_one_commit(
    traced: tuple[Store, list[str]], tmp_path: Path
) -> None:
    store, statements = traced
    on_disk_after_commit: dict[str, set[str]] = {}

    async def create(session_id: str) -> None:
        async with store.uow() as uow:
            await uow.sessions.create(session_id)
            await uow.commit()
        on_disk_after_commit[session_id] = _on_disk(tmp_path / "writer.db")

    await asyncio.gather(*(create(f"s{i}") for i in range(5)))

    verbs = _verbs(statements)
    assert verbs.count("BEGIN IMMEDIATE") == 1
    assert verbs.count("COMMIT") == 1
    assert verbs.count(f"SAVEPOINT {SAVEPOINT.upper()}") == 4
    assert verbs.count(f"RELEASE {SAVEPOINT.upper()}") == 4
    # Each commit() returned only once every write of the group was on disk.
    assert all(seen == {f"s{i}" for i in range(5)} for seen in on_disk_after_commit.values())


async def test_a_unit_of_work_ready_one_loop_iteration_later_joins_the_group(
    traced: tuple[Store, list[str]], tmp_path: Path
) -> None:
    """The COMMIT waits one more turn of the event loop: what became ready meanwhile (a
    request read from its socket, here a task that slept through one turn) joins it."""
    store, statements = traced

    async def create(session_id: str, *, late: bool = False) -> None:
        if late:
            await asyncio.sleep(0)  # ready a turn after the first called commit()
        async with store.uow() as uow:
            await uow.sessions.create(session_id)
            await uow.commit()

    await asyncio.gather(create("first"), create("late", late=True))

    verbs = _verbs(statements)
    assert verbs.count("BEGIN IMMEDIATE") == 1
    assert verbs.count("COMMIT") == 1
    assert _on_disk(tmp_path / "writer.db") == {"first", "late"}


async def test_a_unit_of_work_failing_inside_a_group_undoes_only_its_own_writes(
    traced: tuple[Store, list[str]], tmp_path: Path
) -> None:
    store, statements = traced

    async def create(session_id: str, fail: bool = False) -> None:
        async with store.uow() as uow:
            await uow.sessions.create(session_id)
            await uow.messages.append(session_id, "user", "hello")
            if fail:
                raise RuntimeError("the handler failed half-way")
            await uow.commit()

    outcomes = await asyncio.gather(
        create("first"), create("broken", fail=True), create("last"), return_exceptions=True
    )

    assert [type(outcome) for outcome in outcomes] == [type(None), RuntimeError, type(None)]
    assert _on_disk(tmp_path / "writer.db") == {"first", "last"}
    assert _verbs(statements).count("ROLLBACK TO") == 1
    async with store.read_uow() as uow:
        assert [m.content for m in await uow.messages.list_after("last")] == ["hello"]
        assert await uow.messages.list_after("broken") == []


async def test_units_of_work_that_refuse_first_share_the_transaction_without_savepoints(
    traced: tuple[Store, list[str]], tmp_path: Path
) -> None:
    store, statements = traced

    async def create(session_id: str) -> None:
        async with store.uow(refuses_first=True) as uow:
            await uow.sessions.create(session_id)
            await uow.commit()

    await asyncio.gather(*(create(f"s{i}") for i in range(5)))

    verbs = _verbs(statements)
    assert (verbs.count("BEGIN IMMEDIATE"), verbs.count("COMMIT")) == (1, 1)
    assert not [verb for verb in verbs if verb.startswith(("SAVEPOINT", "RELEASE"))]
    assert _on_disk(tmp_path / "writer.db") == {f"s{i}" for i in range(5)}


async def test_sends_refused_inside_a_group_leave_the_others_sent(
    traced: tuple[Store, list[str]], tmp_path: Path
) -> None:
    store, statements = traced
    for session_id in ("src", "t1", "t2"):
        await conversations.create_session(store, {"id": session_id})
    source = Source("src", 0)

    async def send(target: str) -> dict[str, Any]:
        args = {"targetConversationId": target, "content": "hi", "replyMode": "one_way"}
        return await messaging.send_message(store, source, args)

    statements.clear()
    outcomes = await asyncio.gather(send("t1"), send("t1"), send("t2"), return_exceptions=True)

    assert [type(outcome) for outcome in outcomes] == [dict, Conflict, dict]
    assert isinstance(outcomes[1], Conflict) and outcomes[1].code == errors.TARGET_BUSY
    assert _verbs(statements).count("COMMIT") == 1  # the refusal did not end the group
    async with store.read_uow() as uow:
        assert [m.content for m in await uow.messages.list_after("t1")] == ["hi"]
        assert [m.content for m in await uow.messages.list_after("t2")] == ["hi"]
        assert len(await uow.runs.active_for_session("t1")) == 1


async def test_a_unit_of_work_that_refuses_first_yet_fails_after_writing_fails_its_group(
    traced: tuple[Store, list[str]], tmp_path: Path
) -> None:
    store, _ = traced

    async def create(session_id: str, fail: bool = False) -> None:
        async with store.uow(refuses_first=True) as uow:
            await uow.sessions.create(session_id)
            if fail:
                raise ValueError("broke its promise")
            await uow.commit()

    outcomes = await asyncio.gather(
        create("first"), create("broken", fail=True), create("after"), return_exceptions=True
    )

    # Its write cannot be undone alone: the transaction it shared is rolled back, and the unit
    # of work waiting for that transaction's COMMIT fails; the next one begins afresh.
    assert isinstance(outcomes[0], RuntimeError) and "rolled back" in str(outcomes[0])
    assert isinstance(outcomes[1], ValueError)
    assert outcomes[2] is None
    assert _on_disk(tmp_path / "writer.db") == {"after"}


async def test_a_failed_commit_fails_every_unit_of_work_in_its_group(
    traced: tuple[Store, list[str]], tmp_path: Path
) -> None:
    store, _ = traced

    async def create(session_id: str, orphan: bool = False) -> None:
        async with store.uow() as uow:
            await uow.sessions.create(session_id)
            if orphan:
                # A foreign key checked at COMMIT: the whole transaction is refused then.
                await uow.connection.execute(sa.text("PRAGMA defer_foreign_keys = ON"))
                await uow.connection.execute(
                    sa.text(
                        "INSERT INTO messages (id, session_id, seq, role, content)"
                        " VALUES ('m-orphan', 'nobody', 1, 'user', 'lost')"
                    )
                )
            await uow.commit()

    outcomes = await asyncio.gather(
        create("a"), create("b", orphan=True), create("c"), return_exceptions=True
    )

    assert all(isinstance(outcome, IntegrityError) for outcome in outcomes), outcomes
    assert _on_disk(tmp_path / "writer.db") == set()
    async with store.uow() as uow:  # the writer recovers for the next unit of work
        await uow.sessions.create("after")
        await uow.commit()
    assert _on_disk(tmp_path / "writer.db") == {"after"}


async def test_waiting_for_another_connections_write_lock_leaves_the_event_loop_free(
    tmp_path: Path,
) -> None:
    path = tmp_path / "busy.db"
    store = Store.from_settings(Settings(database_url=f"sqlite:///{path}"))
    other = sqlite3.connect(path, isolation_level=None)
    ticks = 0

    async def ticker() -> None:
        nonlocal ticks
        while True:
            ticks += 1
            await asyncio.sleep(0.005)

    try:
        await migrate(store.engine)
        other.execute("BEGIN IMMEDIATE")  # another process holds the write lock
        asyncio.get_running_loop().call_later(0.3, other.execute, "ROLLBACK")
        ticking = asyncio.create_task(ticker())
        async with store.uow() as uow:
            waited_ticks = ticks
            await uow.sessions.create("through")
            await uow.commit()
        ticking.cancel()
    finally:
        other.close()
        await store.dispose()
    assert waited_ticks >= 10  # the loop ran the ticker while the unit of work waited
    assert _on_disk(path) == {"through"}


async def test_a_unit_of_work_runs_nothing_after_its_commit(
    traced: tuple[Store, list[str]],
) -> None:
    store, _ = traced
    async with store.uow() as uow:
        await uow.sessions.create("done")
        await uow.commit()
        with pytest.raises(RuntimeError, match="has ended"):
            await uow.sessions.get("done")
        with pytest.raises(RuntimeError, match="already ended"):
            await uow.commit()


async def test_closing_the_store_commits_what_waits_for_its_commit(tmp_path: Path) -> None:
    path = tmp_path / "close.db"
    store = Store.from_settings(Settings(database_url=f"sqlite:///{path}"))
    await migrate(store.engine)

    async def create() -> None:
        async with store.uow() as uow:
            await uow.sessions.create("kept")
            await uow.commit()

    committing = asyncio.create_task(create())
    await asyncio.sleep(0)  # it committed into the open transaction and waits
    await store.dispose()
    await committing
    assert _on_disk(path) == {"kept"}
