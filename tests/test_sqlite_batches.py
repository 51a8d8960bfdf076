"""SQLite's fewer calls (``store/sqlite/one_statement.py``, ``store/sqlite/transaction.py``): every
batch of the service is one statement on the writer, the transaction begins with the unit of
work's first statement, and the service writes the same rows and the same events, in the
same order, as when each step, the outbox and a claim's event are statements of their own.
Real SQLite files."""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Any

import pytest

from ccweb_store.config import Settings
from ccweb_store.contract.runs import ClaimRun, CompleteRun
from ccweb_store.contract.sessions import CreateSession
from ccweb_store.domain.context import Source
from ccweb_store.domain.kinds import RunStatus
from ccweb_store.protocol import registry as tools
from ccweb_store.services import conversations, runs
from ccweb_store.store.db import migrate
from ccweb_store.store.sqlite.driver import SQLiteDatabase
from ccweb_store.store.sqlite.one_statement import RUN_STARTED_TRIGGER
from ccweb_store.store.statements import Batch
from ccweb_store.store.uow import Store
from tests.test_bench_floor import IDS, TABLES, TIME


def _database(store: Store) -> SQLiteDatabase:
    database = store._database
    assert isinstance(database, SQLiteDatabase)
    return database


async def _store(path: Path) -> Store:
    store = Store.from_settings(Settings(database_url=f"sqlite+aiosqlite:///{path}", token=None))
    await migrate(store.engine)
    for conversation in ("planner", "tester", "reviewer"):
        await conversations.create_session(
            store, CreateSession(id=conversation, title=conversation.title())
        )
    return store


async def _send(store: Store, source: str, target: str, mode: str) -> None:
    await tools.call_tool(
        store,
        Source(source, 0),
        "ccweb_send_message",
        {"targetConversationId": target, "content": f"{source} asks {target}", "replyMode": mode},
    )


async def _work(store: Store, worker: str, status: str = RunStatus.COMPLETED) -> str | None:
    store.no_lease_expires_before = None
    claimed = await runs.claim_run(store, ClaimRun(worker_id=worker))
    if claimed.run is None:
        return None
    await runs.complete_run(
        store,
        CompleteRun(
            run_id=claimed.run.id,
            worker_id=worker,
            status=status,
            output=f"{worker} did {claimed.run.kind}" if status == RunStatus.COMPLETED else None,
            error=None if status == RunStatus.COMPLETED else "it broke",
        ),
    )
    return claimed.run.session_id


async def _scenario(store: Store) -> None:
    """Sends of both modes, a reply returned at once, a reply held while its source runs and
    delivered when that run ends, a failed run's notice, and the auto-runs they queue."""
    await _send(store, "planner", "tester", "return_and_continue")
    await _send(store, "planner", "reviewer", "one_way")
    await _send(store, "reviewer", "planner", "return_and_continue")
    # Planner's reply_auto_run is not queued yet; tester answers at once.
    while await _work(store, "w1") is not None:
        pass
    await _send(store, "tester", "reviewer", "return_and_continue")
    await _send(store, "planner", "tester", "return_and_continue")
    assert await _work(store, "w2", RunStatus.FAILED) is not None
    while await _work(store, "w3") is not None:
        pass


def _rows(path: Path) -> dict[str, list[tuple[Any, ...]]]:
    """Every table the scenario writes, each id made by the service named by the order it
    first appears in, each time a placeholder."""
    names: dict[str, str] = {}

    def blank(value: Any) -> Any:
        if not isinstance(value, str):
            return value
        if TIME.match(value):
            return "<time>"
        return IDS.sub(lambda found: names.setdefault(found[0], f"<id {len(names)}>"), value)

    with sqlite3.connect(path) as connection:
        return {
            table: [tuple(blank(value) for value in row) for row in connection.execute(query)]
            for table, query in TABLES.items()
        }


async def test_every_batch_and_the_claim_run_as_one_statement_on_the_writer(
    tmp_path: Path,
) -> None:
    store = await _store(tmp_path / "batches.db")
    try:
        async with store.uow():
            pass  # the writer connected
        installed = _database(store).batches
        service = [
            batch for batch in Batch.made if not any(step.exported_columns for step in batch.unread)
        ]
        assert service and all(batch in installed for batch in service)
        assert _database(store).begins_itself
        assert _database(store).claim_event_by_trigger
    finally:
        await store.dispose()


async def test_one_statement_writes_the_rows_and_events_steps_and_the_outbox_write_in_order(
    tmp_path: Path,
) -> None:
    batched = await _store(tmp_path / "batched.db")
    stepwise = await _store(tmp_path / "stepwise.db")
    try:
        await _scenario(batched)
        async with stepwise.uow():
            pass  # the writer connected; from now on each step is a statement of its own
        database = _database(stepwise)
        database.batches = {}
        database.claim_event_by_trigger = False
        _, driver = await database._writer_connection()
        await driver.execute(f"DROP TRIGGER temp.{RUN_STARTED_TRIGGER}")
        await _scenario(stepwise)
    finally:
        await batched.dispose()
        await stepwise.dispose()

    by_batch, by_step = _rows(tmp_path / "batched.db"), _rows(tmp_path / "stepwise.db")
    assert len(by_batch["events"]) > 30
    assert {row[1] for row in by_batch["events"]} >= {
        "message.appended",
        "reply.waiting",
        "reply.returned",
        "reply.failed",
        "run.queued",
        "run.started",
        "run.finished",
    }
    assert by_batch == by_step


@pytest.mark.parametrize("first", ["write", "read"])
async def test_a_unit_of_work_begins_with_its_first_statement(tmp_path: Path, first: str) -> None:
    """sqlite3's trace: a unit of work whose first statement writes makes no call for
    ``BEGIN IMMEDIATE`` (sqlite3 issues it in the same call); one that reads first begins
    explicitly. Either way everything it runs is in one transaction."""
    store = await _store(tmp_path / "begin.db")
    traced: list[str] = []
    try:
        async with store.uow():
            pass
        _, driver = await _database(store)._writer_connection()
        await driver.set_trace_callback(traced.append)
        async with store.uow() as uow:
            if first == "write":
                assert await uow.sessions.touch("planner")
            assert await uow.sessions.get("tester") is not None
            assert await uow.sessions.touch("tester")
            await uow.commit()
        await driver.set_trace_callback(None)
    finally:
        await store.dispose()
    verbs = [" ".join(statement.split()[:2]).upper() for statement in traced]
    assert verbs[0] == "BEGIN IMMEDIATE" and verbs[-1] == "COMMIT"
    expected = ["UPDATE SESSIONS", "SELECT SESSIONS.ID,", "UPDATE SESSIONS"]
    assert verbs[1:-1] == (expected if first == "write" else expected[1:])


@pytest.mark.parametrize("where", ["file", "memory"])
async def test_a_store_opened_again_on_the_same_engine_runs_batches_again(
    tmp_path: Path, where: str
) -> None:
    """The writer's views and trigger are its connection's: a second store on the engine (a
    file's: a new connection; in memory: the one connection, its views already there) makes
    them again and uses them."""
    url = f"sqlite+aiosqlite:///{tmp_path / 'again.db'}" if where == "file" else "sqlite://"
    first = Store.from_settings(Settings(database_url=url, token=None))
    await migrate(first.engine)
    await conversations.create_session(first, CreateSession(id="planner"))
    await conversations.create_session(first, CreateSession(id="tester"))
    await first.close()
    second = Store(first.engine, first.settings)
    try:
        await _send(second, "planner", "tester", "return_and_continue")
        database = _database(second)
        assert database.batches and database.claim_event_by_trigger
        assert await _work(second, "w") == "tester"
        async with second.read_uow() as uow:
            kinds = [event["type"] for event in await uow.events.after(0, 100)]
        assert kinds.count("run.started") == 1 and "reply.returned" in kinds
    finally:
        await second.dispose()
