"""PostgreSQL's driver (``store.postgres.driver``): pooled connections pinged before use only
after sitting idle and dropped when the server closed them; a unit of work whose connection
died unnoticed (``pg_terminate_backend``, as a server restart would) runs its first statement
again on a fresh one when nothing of it can have been written; a transaction a failing unit of
work left open is rolled back before its connection goes back to the pool; asyncpg's errors
come as SQLAlchemy's."""

from __future__ import annotations

import asyncio
import threading
from typing import Any

import pytest
import sqlalchemy as sa
from sqlalchemy.exc import DataError, DBAPIError, IntegrityError, ProgrammingError

from bench.harness import end_other_connections
from ccweb_store.domain.errors import DatabaseUnavailable
from ccweb_store.protocol import jsonrpc
from ccweb_store.store import db
from ccweb_store.store.postgres import driver
from ccweb_store.store.uow import Store
from tests.http_client import app_client, call_tool, rpc, rpc_result

pytestmark = pytest.mark.parametrize("backend", ["postgres"], indirect=True)


async def _backend_pid(store: Store) -> int:
    async with store.read_uow() as uow:
        pid: int = (await uow._execute(sa.text("SELECT pg_backend_pid()"))).scalar_one()
    return pid


async def _terminate(store: Store, pid: int) -> None:
    """Close one server process's connection, as a server restart or an idle timeout would."""
    other = db.create_engine(str(store.engine.url.render_as_string(hide_password=False)))
    try:
        async with other.connect() as connection:
            await connection.execute(sa.text("SELECT pg_terminate_backend(:pid)"), {"pid": pid})
    finally:
        await other.dispose()


async def test_a_connection_is_pinged_only_after_sitting_idle(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    pings: list[Any] = []
    ping = store.engine.dialect.do_ping
    monkeypatch.setattr(store.engine.dialect, "do_ping", lambda c: pings.append(c) or ping(c))
    monkeypatch.setattr(driver, "PING_AFTER_IDLE_S", 0.2)
    for _ in range(3):
        await _backend_pid(store)
    assert pings == []  # handed back moments ago each time
    await asyncio.sleep(0.3)
    await _backend_pid(store)
    assert len(pings) == 1


async def test_a_connection_the_server_closed_while_idle_is_replaced_before_use(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(driver, "PING_AFTER_IDLE_S", 0.05)
    first = await _backend_pid(store)
    await _terminate(store, first)
    await asyncio.sleep(0.1)
    async with store.read_uow() as uow:  # the ping fails, the pool connects again
        assert await uow.sessions.get("nobody") is None
    assert await _backend_pid(store) != first


async def _kill_connections(store: Store, *, unnoticed: bool) -> None:
    """Kill every connection the store holds. ``unnoticed``: while this event loop is blocked,
    so asyncpg cannot see the sockets close before the next statement is sent on one (the
    race a restart within the last second leaves); else as the loop runs, so it can."""
    url = store.engine.url.render_as_string(hide_password=False)
    if not unnoticed:
        assert await end_other_connections(url) > 0
        return
    ended: list[int] = []
    thread = threading.Thread(target=lambda: ended.append(asyncio.run(end_other_connections(url))))
    thread.start()
    thread.join()  # blocks this loop: no callback runs until the next statement is sent
    assert ended and ended[0] > 0


async def _open_connections(store: Store, count: int) -> set[int]:
    """Make the store keep ``count`` connections of each kind (units of work overlapping);
    their server process ids."""
    pids: set[int] = set()
    all_open, release = asyncio.Event(), asyncio.Event()

    async def hold(uow_factory: Any) -> None:
        async with uow_factory() as uow:
            pids.add((await uow._execute(sa.text("SELECT pg_backend_pid()"))).scalar())
            if len(pids) == 2 * count:
                all_open.set()
            await release.wait()

    kinds = (store.uow, store.read_uow)
    tasks = [asyncio.create_task(hold(kind)) for kind in kinds for _ in range(count)]
    await all_open.wait()
    release.set()
    await asyncio.gather(*tasks)
    return pids


@pytest.mark.parametrize("unnoticed", [False, True], ids=["seen-closed", "unnoticed"])
async def test_a_connection_killed_just_after_use_is_replaced_and_no_unit_of_work_fails(
    store: Store, unnoticed: bool
) -> None:
    first = await _backend_pid(store)
    async with store.uow() as uow:
        await uow.sessions.create("before", title="T")
        await uow.commit()
    await _kill_connections(store, unnoticed=unnoticed)
    async with store.read_uow() as uow:  # a read: its first statement runs again if need be
        assert (await uow.sessions.require("before")).title == "T"
    await _kill_connections(store, unnoticed=unnoticed)
    async with store.uow() as uow:  # a write: its transaction had not committed anything
        await uow.sessions.create("after", title="U")
        await uow.commit()
    async with store.read_uow() as uow:
        assert (await uow.sessions.require("after")).title == "U"
    assert await _backend_pid(store) != first


async def test_every_kept_connection_killed_at_once_recovers(store: Store) -> None:
    before = await _open_connections(store, 3)
    await _kill_connections(store, unnoticed=True)
    reads = [store.read_uow() for _ in range(3)]
    writes = [store.uow() for _ in range(3)]

    async def run(uow_factory: Any, session_id: str | None) -> int:
        async with uow_factory as uow:
            if session_id is not None:
                await uow.sessions.create(session_id)
            else:
                assert await uow.sessions.get("nobody") is None
            pid: int = (await uow._execute(sa.text("SELECT pg_backend_pid()"))).scalar()
            if session_id is not None:
                await uow.commit()
            return pid

    pids = await asyncio.gather(
        *(run(uow, None) for uow in reads), *(run(uow, f"s{i}") for i, uow in enumerate(writes))
    )
    assert not set(pids) & before
    async with store.read_uow() as uow:
        assert [await uow.sessions.get(f"s{i}") is not None for i in range(3)] == [True] * 3


async def _one_message_then_a_dead_connection(store: Store) -> dict[str, object]:
    """A session ``s``, the kept connection an autocommit unit of work takes killed without
    asyncpg noticing, and the message the test then writes (once) into ``s``."""
    async with store.uow() as uow:
        await uow.sessions.create("s")
        await uow.commit()
    await _backend_pid(store)  # an autocommit unit of work takes the connection this used
    await _kill_connections(store, unnoticed=True)
    return {"id": "m1", "session_id": "s", "seq": 1, "role": "user", "content": "once"}


def _lost_connection(error: DatabaseUnavailable) -> bool:
    """Whether the unit of work failed as a client hears it: a retryable
    ``database_unavailable``, raised from the driver's error on a connection SQLAlchemy
    invalidated."""
    cause = error.__cause__
    return (
        error.code == "database_unavailable"
        and error.data["retryAfter"] > 0
        and isinstance(cause, DBAPIError)
        and cause.connection_invalidated
    )


async def test_an_autocommit_write_cut_off_by_a_dead_connection_is_not_run_again(
    store: Store,
) -> None:
    """Its statement commits by itself and might have before the connection died: running
    it again could write twice, so the caller hears of it."""
    message = await _one_message_then_a_dead_connection(store)
    with pytest.raises(DatabaseUnavailable) as failed:
        async with store.uow(autocommit=True) as uow:
            await uow.messages.insert_many([message])  # its first statement writes
    assert _lost_connection(failed.value)
    async with store.uow(autocommit=True) as uow:
        await uow.messages.insert_many([message])
    async with store.read_uow() as uow:
        assert await uow.messages.count(["s"]) == {"s": 1}


async def test_a_write_asyncpg_refused_to_send_runs_again_even_in_autocommit(
    store: Store,
) -> None:
    """Between the server's ``FATAL`` and the connection's end, asyncpg refuses to send
    anything on it: nothing reached the server, so even a write that commits by itself runs
    again, once, on a fresh connection."""
    message = await _one_message_then_a_dead_connection(store)
    for _ in range(2):  # the event loop reads the server's goodbye, not yet the socket's end
        await asyncio.sleep(0)
    async with store.uow(autocommit=True) as uow:
        await uow.messages.insert_many([message])
    async with store.read_uow() as uow:
        assert await uow.messages.count(["s"]) == {"s": 1}


async def test_a_statement_after_the_first_is_not_run_again_on_a_new_connection(
    store: Store,
) -> None:
    """The statements before it were lost with its transaction: the unit of work fails and
    leaves nothing behind."""
    with pytest.raises(DatabaseUnavailable) as failed:
        async with store.uow() as uow:
            await uow.sessions.create("lost")
            await _kill_connections(store, unnoticed=True)
            await uow.sessions.create("lost-too")
            await uow.commit()
    assert _lost_connection(failed.value)
    async with store.read_uow() as uow:
        assert await uow.sessions.get("lost") is None


async def test_a_unit_of_work_that_ran_statements_of_its_own_is_not_run_again_in_part(
    store: Store,
) -> None:
    """A statement the unit of work ran itself (``uow._execute``) is its first: a repository's
    statement after it is not run again on a new connection, which would commit it alone."""
    add = sa.text("INSERT INTO sessions (id, created_at, updated_at) VALUES (:id, now(), now())")
    with pytest.raises(DatabaseUnavailable) as failed:
        async with store.uow() as uow:
            await uow._execute(add, {"id": "own"})
            await _kill_connections(store, unnoticed=True)
            await uow.sessions.create("after")
            await uow.commit()
    assert _lost_connection(failed.value)
    async with store.read_uow() as uow:
        assert [await uow.sessions.get(s) for s in ("own", "after")] == [None, None]


@pytest.mark.parametrize("unnoticed", [False, True], ids=["seen-closed", "unnoticed"])
async def test_tool_calls_and_host_methods_over_http_survive_killed_connections(
    store: Store, unnoticed: bool
) -> None:
    async with app_client(store) as client:
        await rpc_result(client, "session.create", {"id": "conv-a", "title": "Planner"})
        await rpc_result(
            client, "message.append", {"sessionId": "conv-a", "role": "user", "content": "hi"}
        )
        await _open_connections(store, 2)
        for round_ in range(2):
            await _kill_connections(store, unnoticed=unnoticed)
            result = await call_tool(client, "ccweb_list_user_inputs", {"conversationId": "conv-a"})
            assert not result.get("isError"), result
            assert [i["content"] for i in result["structuredContent"]["inputs"]] == ["hi"]
            await _kill_connections(store, unnoticed=unnoticed)
            answer = await rpc(
                client,
                "message.append",
                {"sessionId": "conv-a", "role": "assistant", "content": f"reply {round_}"},
            )
            assert "error" not in answer, answer
            await _kill_connections(store, unnoticed=unnoticed)
            listed = await call_tool(client, "ccweb_list_conversations", {})
            assert not listed.get("isError"), listed
        page = await rpc_result(client, "message.list", {"sessionId": "conv-a"})
        assert [m["content"] for m in page["messages"]] == ["hi", "reply 0", "reply 1"]
        answer = await rpc(client, "session.get", {"id": "conv-a"})
        assert answer.get("error", {}).get("code") != jsonrpc.INTERNAL_ERROR, answer


async def test_a_read_runs_each_statement_without_a_transaction_around_them(
    store: Store,
) -> None:
    """READ COMMITTED reads see a snapshot per statement anyway; a read skips BEGIN/ROLLBACK."""
    now = sa.text("SELECT now()")
    async with store.read_uow() as uow:
        first = (await uow._execute(now)).scalar_one()
        await asyncio.sleep(0.01)
        second = (await uow._execute(now)).scalar_one()
        assert await uow.sessions.get("nobody") is None
    assert second > first  # now() is when the transaction began: each statement began one
    async with store.uow() as uow:
        first = (await uow._execute(now)).scalar_one()
        await asyncio.sleep(0.01)
        assert (await uow._execute(now)).scalar_one() == first  # one transaction


async def test_an_autocommit_unit_of_work_commits_each_statement_by_itself(
    store: Store,
) -> None:
    async with store.uow(autocommit=True) as uow:
        await uow.sessions.create("at-once")
        async with store.read_uow() as other:  # committed already, before the block ends
            assert await other.sessions.get("at-once") is not None


async def test_statements_of_the_unit_of_work_and_its_repositories_share_its_transaction(
    store: Store,
) -> None:
    """It commits or rolls back as a whole."""
    retitle = sa.text("UPDATE sessions SET title = 'by hand' WHERE id = :id")
    for session_id, commit in (("kept", True), ("dropped", False)):
        async with store.uow() as uow:
            await uow.sessions.create(session_id, title="by repository")
            await uow._execute(retitle, {"id": session_id})
            if commit:
                await uow.commit()
    async with store.read_uow() as uow:
        assert (await uow.sessions.require("kept")).title == "by hand"
        assert await uow.sessions.get("dropped") is None


async def test_a_transaction_left_open_by_a_failing_unit_of_work_is_rolled_back_before_reuse(
    store: Store,
) -> None:
    first = await _backend_pid(store)
    with pytest.raises(RuntimeError, match="the caller failed"):
        async with store.uow() as uow:
            await uow.sessions.create("half")
            raise RuntimeError("the caller failed")
    async with store.read_uow() as uow:
        pid = (await uow._execute(sa.text("SELECT pg_backend_pid()"))).scalar_one()
        in_transaction = (
            await uow._execute(
                sa.text(
                    "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database()"
                    " AND state LIKE 'idle in transaction%'"
                )
            )
        ).scalar_one()
        assert await uow.sessions.get("half") is None
    assert pid == first  # the same connection, back from the pool
    assert in_transaction == 0
    async with store.uow() as uow:
        await uow.sessions.create("after")
        await uow.commit()
    async with store.read_uow() as uow:
        assert await uow.sessions.get("after") is not None


async def test_asyncpg_errors_come_as_sqlalchemys(store: Store) -> None:
    async with store.uow() as uow:
        await uow.sessions.create("s")
        await uow.commit()
    duplicate = "INSERT INTO sessions (id, created_at, updated_at) VALUES ('s', now(), now())"
    cases: list[tuple[type[DBAPIError], str]] = [
        (IntegrityError, duplicate),
        (DataError, "SELECT CAST('not a number' AS integer)"),
        (ProgrammingError, "SELECT no_such_column FROM sessions"),
    ]
    for error, statement in cases:
        with pytest.raises(error) as raised:
            async with store.uow() as uow:
                await uow._execute(sa.text(statement))
        assert not raised.value.connection_invalidated
    async with store.read_uow() as uow:  # and the connections still serve
        assert await uow.sessions.get("s") is not None
