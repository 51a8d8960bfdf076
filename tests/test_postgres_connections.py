"""PostgreSQL's pooled connections: pinged before use only after sitting idle, and dropped
when the server closed them."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
import sqlalchemy as sa
from sqlalchemy.exc import DBAPIError

from ccweb_store import db
from ccweb_store.uow import Store

pytestmark = pytest.mark.parametrize("backend", ["postgres"], indirect=True)


async def _backend_pid(store: Store) -> int:
    async with store.read_uow() as uow:
        pid: int = (await uow.connection.execute(sa.text("SELECT pg_backend_pid()"))).scalar_one()
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
    monkeypatch.setattr(db, "PING_AFTER_IDLE_S", 0.2)
    for _ in range(3):
        await _backend_pid(store)
    assert pings == []  # handed back moments ago each time
    await asyncio.sleep(0.3)
    await _backend_pid(store)
    assert len(pings) == 1


async def test_a_connection_the_server_closed_while_idle_is_replaced_before_use(
    store: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(db, "PING_AFTER_IDLE_S", 0.05)
    first = await _backend_pid(store)
    await _terminate(store, first)
    await asyncio.sleep(0.1)
    async with store.read_uow() as uow:  # the ping fails, the pool connects again
        assert await uow.sessions.get("nobody") is None
    assert await _backend_pid(store) != first


async def test_a_connection_closed_just_after_use_fails_once_and_is_dropped(
    store: Store,
) -> None:
    first = await _backend_pid(store)
    await _terminate(store, first)
    with pytest.raises(DBAPIError) as failed:
        async with store.read_uow() as uow:
            await uow.sessions.get("nobody")
    assert failed.value.connection_invalidated
    async with store.read_uow() as uow:
        assert await uow.sessions.get("nobody") is None
    assert await _backend_pid(store) != first


async def test_a_read_runs_each_statement_without_a_transaction_around_them(
    store: Store,
) -> None:
    """READ COMMITTED reads see a snapshot per statement anyway; a read skips BEGIN/ROLLBACK."""
    now = sa.text("SELECT now()")
    async with store.read_uow() as uow:
        first = (await uow.connection.execute(now)).scalar_one()
        await asyncio.sleep(0.01)
        second = (await uow.connection.execute(now)).scalar_one()
        assert await uow.sessions.get("nobody") is None
    assert second > first  # now() is when the transaction began: each statement began one
    async with store.uow() as uow:
        first = (await uow.connection.execute(now)).scalar_one()
        await asyncio.sleep(0.01)
        assert (await uow.connection.execute(now)).scalar_one() == first  # one transaction


async def test_an_autocommit_unit_of_work_commits_each_statement_by_itself(
    store: Store,
) -> None:
    async with store.uow(autocommit=True) as uow:
        await uow.sessions.create("at-once")
        async with store.read_uow() as other:  # committed already, before the block ends
            assert await other.sessions.get("at-once") is not None
