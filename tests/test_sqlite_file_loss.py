"""A SQLite file removed or replaced under a running server: writes and reads are refused
with ``database_file_missing`` and ``/healthz`` answers 503, so nothing is acknowledged into a
file the next start would not open; the file moved back, the server serves again."""

from __future__ import annotations

import asyncio
import os
import sqlite3
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import pytest

from ccweb_store.config import Settings
from ccweb_store.domain.errors import DATABASE_FILE_MISSING, DatabaseFileMissing
from ccweb_store.store.db import create_engine, migrate
from ccweb_store.store.sqlite import file_watch as sqlite_file_watch
from ccweb_store.store.uow import Store
from tests.http_client import app_client, rpc, rpc_result
from tests.servers import serving


def _url(path: Path) -> str:
    return f"sqlite+aiosqlite:///{path}"


async def _migrate(path: Path) -> str:
    engine = create_engine(_url(path))
    try:
        await migrate(engine)
    finally:
        await engine.dispose()
    return _url(path)


def _titles(path: Path) -> list[str]:
    """The conversations' titles in the SQLite file at ``path``, read by a connection of its
    own (with the file's WAL, if it has one)."""
    connection = sqlite3.connect(path)
    try:
        return sorted(row[0] for row in connection.execute("SELECT title FROM sessions"))
    finally:
        connection.close()


#: Puts the store's file back at its path (None: it is gone for good).
Restore = Callable[[], None] | None


def _move(source: Path, target: Path) -> None:
    """``mv source* target*``: the file with its ``-wal`` and ``-shm``."""
    for suffix in ("", "-wal", "-shm"):
        if Path(f"{source}{suffix}").exists():
            os.rename(f"{source}{suffix}", f"{target}{suffix}")


def _move_away(path: Path) -> Restore:
    moved = path.with_name("moved-away.db")
    _move(path, moved)
    return lambda: _move(moved, path)


def _delete(path: Path) -> Restore:
    os.unlink(path)
    return None


def _replace(path: Path) -> Restore:
    """Move another database file (a conversation of its own, in rollback-journal mode) onto
    the path, keeping the store's file aside. Its WAL stays where it was, under the path's
    name: putting the file back pairs them again."""
    other = path.with_name("other.db")
    connection = sqlite3.connect(other)
    connection.execute("CREATE TABLE sessions (title TEXT)")
    connection.execute("INSERT INTO sessions VALUES ('the other file')")
    connection.commit()
    connection.close()
    kept = path.with_name("kept-aside.db")
    os.link(path, kept)
    os.replace(other, path)
    return lambda: os.replace(kept, path)


LOSSES: dict[str, Callable[[Path], Restore]] = {
    "moved-away": _move_away,
    "deleted": _delete,
    "replaced": _replace,
}


def _after_the_store_closed(path: Path, loss: str, restore: Restore) -> None:
    """What the loss left on disk: no file made where the store's was deleted, the other
    file untouched, and the store's file, put back, holding what was acknowledged."""
    if loss == "deleted":
        assert not path.exists()
        return
    if loss == "replaced":
        assert _titles(path) == ["the other file"]
    assert restore is not None
    restore()
    assert _titles(path) == ["acknowledged"]


def _file_missing(answer: dict[str, Any], path: Path) -> bool:
    error = answer.get("error", {})
    return (
        error.get("code") == -32000
        and error.get("data") == {"code": DATABASE_FILE_MISSING, "path": str(path)}
        and f"the database file at {path} was removed or replaced" in error["message"]
        and "nothing was written" in error["message"]
        and "restore the file" in error["message"]
    )


def _unhealthy(response: httpx.Response, path: Path) -> bool:
    body = response.json()
    return (
        response.status_code == 503
        and body["status"] == "error"
        and body["error"]["code"] == DATABASE_FILE_MISSING
        and "restore it or restart the server" in body["error"]["message"]
        and str(path) not in response.text  # /healthz needs no token: it names no path
    )


@pytest.mark.parametrize("loss", LOSSES)
async def test_writes_and_reads_are_refused_once_the_file_is_removed_or_replaced(
    tmp_path: Path, loss: str
) -> None:
    path = tmp_path / "ccweb.db"
    store = Store.from_settings(Settings(database_url=await _migrate(path)))
    try:
        async with app_client(store) as client:
            await rpc_result(client, "session.create", {"title": "acknowledged"})
            restore = LOSSES[loss](path)
            refused = await rpc(client, "session.create", {"title": "refused"})
            assert _file_missing(refused, path), refused
            assert _file_missing(await rpc(client, "session.list"), path)
            assert _unhealthy(await client.get("/healthz"), path)
            tool = await client.post(
                "/mcp",
                json={
                    "jsonrpc": "2.0",
                    "id": 1,
                    "method": "tools/call",
                    "params": {"name": "ccweb_list_conversations", "arguments": {}},
                },
            )
            result = tool.json()["result"]
            assert result["isError"] is True
            assert result["structuredContent"]["error"]["code"] == DATABASE_FILE_MISSING
    finally:
        await store.dispose()
    _after_the_store_closed(path, loss, restore)


async def test_the_file_moved_back_is_served_again_without_a_restart(tmp_path: Path) -> None:
    path = tmp_path / "ccweb.db"
    store = Store.from_settings(Settings(database_url=await _migrate(path)))
    try:
        async with app_client(store) as client:
            await rpc_result(client, "session.create", {"title": "before"})
            restore = _move_away(path)
            assert _file_missing(await rpc(client, "session.create", {"title": "x"}), path)
            assert restore is not None
            restore()
            health = await client.get("/healthz")
            assert health.status_code == 200 and health.json()["status"] == "ok"
            await rpc_result(client, "session.create", {"title": "after"})
            listed = await rpc_result(client, "session.list")
            assert sorted(s["title"] for s in listed["sessions"]) == ["after", "before"]
    finally:
        await store.dispose()
    assert _titles(path) == ["after", "before"]


async def test_a_write_whose_file_is_moved_before_its_commit_is_rolled_back_and_refused(
    tmp_path: Path,
) -> None:
    """The check runs inside the write transaction, just before its COMMIT: a unit of work
    that wrote while the file was in place and commits after it left is refused, and its
    write is not in the file."""
    path = tmp_path / "ccweb.db"
    store = Store.from_settings(Settings(database_url=await _migrate(path)))
    try:
        with pytest.raises(DatabaseFileMissing, match="nothing was written"):
            async with store.uow() as uow:
                await uow.sessions.create("written-then-moved")
                restore = _move_away(path)
                await uow.commit()
    finally:
        await store.dispose()
    assert restore is not None
    restore()
    assert _titles(path) == []


async def test_reads_alone_notice_the_file_gone_and_back(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A read checks the file too (at most once a second; here at every read), so a server
    that only reads refuses once the file is gone, and serves again once it is back."""
    monkeypatch.setattr(sqlite_file_watch, "READ_CHECK_INTERVAL_S", 0.0)
    path = tmp_path / "ccweb.db"
    store = Store.from_settings(Settings(database_url=await _migrate(path)))
    try:
        async with store.read_uow() as uow:
            assert await uow.sessions.get("nobody") is None
        restore = _move_away(path)
        with pytest.raises(DatabaseFileMissing, match="restore the file"):
            async with store.read_uow() as uow:
                await uow.sessions.get("nobody")
        assert restore is not None
        restore()
        async with store.read_uow() as uow:
            assert await uow.sessions.get("nobody") is None
    finally:
        await store.dispose()


@pytest.mark.parametrize("loss", LOSSES)
def test_a_server_process_refuses_writes_to_a_removed_or_replaced_file_over_http(
    tmp_path: Path, loss: str
) -> None:
    """``ccweb-store serve``: the next write after the loss answers ``database_file_missing``
    and ``/healthz`` 503; the store's file put back (not a deleted one), it serves again."""
    path = tmp_path / "ccweb.db"
    url = asyncio.run(_migrate(path))

    def call(server_url: str, title: str) -> dict[str, Any]:
        message = {"jsonrpc": "2.0", "id": 1, "method": "session.create"}
        message["params"] = {"title": title}
        answer: dict[str, Any] = httpx.post(f"{server_url}/rpc", json=message, timeout=10).json()
        return answer

    with serving(url, CCWEB_LOG_LEVEL="warning") as server:
        assert "result" in call(server.url, "acknowledged")
        restore = LOSSES[loss](path)
        refused = call(server.url, "refused")
        assert _file_missing(refused, path), refused
        assert _unhealthy(httpx.get(f"{server.url}/healthz", timeout=10), path)
        if restore is not None:
            restore()
            assert httpx.get(f"{server.url}/healthz", timeout=10).status_code == 200
            assert "result" in call(server.url, "after")
        log = server.stop()
    assert f"the database file {path} was" in log  # the log names the path; answers need not
    if restore is None:
        assert not path.exists()
    else:
        assert _titles(path) == ["acknowledged", "after"]
