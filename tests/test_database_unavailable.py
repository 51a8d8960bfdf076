"""A database that cannot serve (PostgreSQL going away and coming back, a SQLite file that
cannot be opened) is answered with a retryable ``database_unavailable`` error carrying
``retryAfter``, never ``-32603``; ``/healthz`` answers 503 meanwhile, and the service serves
again, without a restart, once the database is back.

PostgreSQL goes away behind a TCP proxy the test cuts (``tests/tcp_proxy.py``): the server at
127.0.0.1:5432 is shared by other test runs and is never stopped."""

from __future__ import annotations

import asyncio
import sqlite3
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import asyncpg
import httpx
import pytest
from sqlalchemy import event
from sqlalchemy.engine import make_url
from sqlalchemy.exc import DBAPIError, IntegrityError
from sqlalchemy.exc import TimeoutError as PoolTimeout

from ccweb_store.config import Settings
from ccweb_store.domain.errors import DATABASE_UNAVAILABLE, RETRY_AFTER_SECONDS, DatabaseUnavailable
from ccweb_store.protocol.jsonrpc import INTERNAL_ERROR
from ccweb_store.store.db import migrate
from ccweb_store.store.failures import database_failure
from ccweb_store.store.uow import Store
from tests.http_client import app_client, call_tool, rpc
from tests.servers import serving
from tests.tcp_proxy import TcpProxy, proxied


@pytest.fixture
def proxy(backend: str, database_url: str) -> Iterator[TcpProxy]:
    """A proxy to the test's PostgreSQL database."""
    url = make_url(database_url)
    with proxied(url.host or "127.0.0.1", url.port or 5432) as running:
        yield running


def _through(proxy: TcpProxy, database_url: str) -> str:
    return (
        make_url(database_url)
        .set(host="127.0.0.1", port=proxy.port)
        .render_as_string(hide_password=False)
    )


def _unavailable(answer: dict[str, Any]) -> bool:
    error = answer.get("error", {})
    return (
        error.get("code") == -32000
        and error.get("data") == {"code": DATABASE_UNAVAILABLE, "retryAfter": RETRY_AFTER_SECONDS}
        and error["message"].startswith("the database is unreachable (")
        and error["message"].endswith(f"; retry after {RETRY_AFTER_SECONDS} seconds")
    )


def _unhealthy(response: httpx.Response) -> bool:
    body = response.json()
    return (
        response.status_code == 503
        and response.headers.get("retry-after") == str(RETRY_AFTER_SECONDS)
        and body["status"] == "error"
        and body["error"]["code"] == DATABASE_UNAVAILABLE
        and body["error"]["retryAfter"] == RETRY_AFTER_SECONDS
        and "127.0.0.1" not in response.text  # /healthz needs no token: it names no host
    )


@pytest.mark.parametrize("backend", ["postgres"], indirect=True)
@pytest.mark.parametrize("outage", ["refused", "starting-up"])
async def test_requests_while_postgresql_is_away_are_told_to_retry_and_then_succeed(
    proxy: TcpProxy, database_url: str, outage: str
) -> None:
    store = Store.from_settings(Settings(database_url=_through(proxy, database_url)))
    try:
        async with app_client(store) as client:
            assert "result" in await rpc(client, "session.create", {"id": "before"})
            if outage == "refused":
                proxy.cut()
            else:
                proxy.starting_up()
            for method, params in [
                ("session.create", {"id": "during"}),
                ("session.get", {"id": "before"}),
                ("run.claim", {"workerId": "w"}),
            ]:
                answer = await rpc(client, method, params)
                assert _unavailable(answer), answer
            if outage == "starting-up":
                said = (await rpc(client, "session.list"))["error"]["message"]
                assert "the database system is starting up" in said
            tool = await call_tool(client, "ccweb_list_conversations", query="?sourceSessionId=x")
            assert tool["isError"] is True
            assert tool["structuredContent"]["error"]["code"] == DATABASE_UNAVAILABLE
            assert tool["structuredContent"]["error"]["retryAfter"] == RETRY_AFTER_SECONDS
            assert _unhealthy(await client.get("/healthz"))

            proxy.restore()
            assert "result" in await rpc(client, "session.create", {"id": "after"})
            listed = await rpc(client, "session.list")
            assert sorted(s["id"] for s in listed["result"]["sessions"]) == ["after", "before"]
            assert (await client.get("/healthz")).status_code == 200
    finally:
        await store.dispose()


@pytest.mark.parametrize("backend", ["postgres"], indirect=True)
def test_a_server_process_answers_database_unavailable_until_postgresql_is_back(
    proxy: TcpProxy, database_url: str
) -> None:
    def call(server_url: str, method: str, params: dict[str, Any]) -> dict[str, Any]:
        message = {"jsonrpc": "2.0", "id": 1, "method": method, "params": params}
        answer: dict[str, Any] = httpx.post(f"{server_url}/rpc", json=message, timeout=30).json()
        return answer

    with serving(
        _through(proxy, database_url),
        CCWEB_LOG_LEVEL="warning",
        CCWEB_LEASE_SWEEP_SECONDS="0.2",
        CCWEB_POSTGRES_VACUUM_SECONDS="0.2",
    ) as server:
        assert "result" in call(server.url, "session.create", {"id": "before"})
        proxy.cut()
        time.sleep(1.0)  # the background sweep and vacuum fail a few times meanwhile
        answers = [call(server.url, "session.create", {"id": f"during-{i}"}) for i in range(3)]
        answers.append(call(server.url, "session.get", {"id": "before"}))
        assert all(_unavailable(answer) for answer in answers), answers
        assert not any(a.get("error", {}).get("code") == INTERNAL_ERROR for a in answers)
        assert _unhealthy(httpx.get(f"{server.url}/healthz", timeout=30))
        proxy.restore()
        assert "result" in call(server.url, "session.create", {"id": "after"})
        assert call(server.url, "session.get", {"id": "before"})["result"]["id"] == "before"
        assert httpx.get(f"{server.url}/healthz", timeout=30).status_code == 200
        log = server.stop()
    assert "internal error" not in log
    # The background jobs say in one line each pass that the database is away: no traceback.
    assert "sweeping expired run leases failed: the database is unreachable" in log
    assert "vacuuming and analyzing the tables failed: the database is unreachable" in log
    assert "Traceback" not in log


async def test_a_sqlite_file_that_cannot_be_opened_is_database_unavailable(
    tmp_path: Path,
) -> None:
    """A path in a directory that does not exist: SQLite cannot open (or create) the file."""
    path = tmp_path / "no-such-directory" / "ccweb.db"
    store = Store.from_settings(Settings(database_url=f"sqlite+aiosqlite:///{path}"))
    try:
        async with app_client(store) as client:
            for method, params in [("session.create", {"id": "a"}), ("session.list", {})]:
                answer = await rpc(client, method, params)
                error = answer["error"]
                assert error["data"] == {"code": DATABASE_UNAVAILABLE, "retryAfter": 2}, answer
                assert error["message"].startswith("the database file cannot be opened")
            health = await client.get("/healthz")
            assert health.status_code == 503
            assert health.json()["error"]["code"] == DATABASE_UNAVAILABLE
            assert str(path) not in health.text
    finally:
        await store.dispose()


async def test_a_full_sqlite_database_is_database_unavailable_and_writes_nothing(
    tmp_path: Path,
) -> None:
    path = tmp_path / "full.db"
    store = Store.from_settings(Settings(database_url=f"sqlite+aiosqlite:///{path}"))
    await migrate(store.engine)
    pages = {}

    @event.listens_for(store.engine.sync_engine, "connect")
    def _no_room(dbapi_connection: Any, _record: Any) -> None:
        # As a full disk would: no page beyond those the file has now.
        dbapi_connection.execute(f"PRAGMA max_page_count = {pages['now']}")

    async with store.engine.connect() as connection:
        pages["now"] = (await connection.exec_driver_sql("PRAGMA page_count")).scalar_one()
    await store.engine.dispose()
    try:
        async with app_client(store) as client:
            await rpc(client, "session.create", {"id": "a"})
            answer = await rpc(
                client, "message.append", {"sessionId": "a", "role": "user", "content": "x" * 9000}
            )
            for _ in range(50):  # until a write needs a page the file does not have
                if "error" in answer:
                    break
                answer = await rpc(
                    client,
                    "message.append",
                    {"sessionId": "a", "role": "user", "content": "x" * 9000},
                )
            error = answer["error"]
            assert error["data"] == {"code": DATABASE_UNAVAILABLE, "retryAfter": 2}, answer
            assert error["message"].startswith("the database is full")
    finally:
        await store.dispose()


def _wrapped(error: Exception, *, invalidated: bool = False) -> DBAPIError:
    """``error`` as SQLAlchemy hands a driver error over."""
    return DBAPIError.instance("SELECT 1", {}, error, Exception, connection_invalidated=invalidated)


@pytest.mark.parametrize(
    ("error", "reason"),
    [
        (ConnectionRefusedError(111, "Connect call failed"), "the connection was refused"),
        (TimeoutError(), "connecting timed out"),
        (OSError(113, "No route to host"), "No route to host"),
        (
            asyncpg.exceptions.CannotConnectNowError("the database system is starting up"),
            "the database system is starting up",
        ),
        (
            asyncpg.exceptions.AdminShutdownError(
                "terminating connection due to administrator command"
            ),
            "terminating connection due to administrator command",
        ),
        (
            _wrapped(asyncpg.exceptions.ConnectionDoesNotExistError("connection was closed")),
            "connection was closed",
        ),
        (_wrapped(RuntimeError("gone"), invalidated=True), "the connection to it was lost"),
        (_wrapped(sqlite3.OperationalError("disk I/O error")), "disk I/O error"),
        (PoolTimeout("QueuePool limit of size 10 overflow 10 reached"), "the pool timed out"),
    ],
)
def test_errors_of_a_database_that_cannot_serve_become_database_unavailable(
    error: Exception, reason: str
) -> None:
    if isinstance(error, DBAPIError) and isinstance(error.orig, sqlite3.Error):
        error.orig.sqlite_errorcode = sqlite3.SQLITE_IOERR_READ  # type: ignore[attr-defined]
    failure = database_failure(error)
    assert isinstance(failure, DatabaseUnavailable)
    assert reason in failure.message
    assert failure.to_dict()["retryAfter"] == RETRY_AFTER_SECONDS


def test_errors_of_the_request_itself_stay_what_they_are() -> None:
    constraint = sqlite3.IntegrityError("UNIQUE constraint failed: sessions.id")
    constraint.sqlite_errorcode = sqlite3.SQLITE_CONSTRAINT_PRIMARYKEY  # type: ignore[attr-defined]
    for error in (
        IntegrityError("INSERT", {}, constraint),
        _wrapped(asyncpg.exceptions.UniqueViolationError("duplicate key")),
        ValueError("not the database"),
    ):
        assert database_failure(error) is None


def test_the_proxy_refuses_while_cut_and_forwards_once_restored() -> None:
    """The test's own tool: a cut proxy refuses connections; a restored one forwards."""

    async def echo(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        writer.write(await reader.read(100))
        await writer.drain()
        writer.close()

    async def run() -> None:
        server = await asyncio.start_server(echo, "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        with proxied("127.0.0.1", port) as proxy:
            for expected in (b"hello", None, b"hello"):
                if expected is None:
                    proxy.cut()
                    with pytest.raises(ConnectionRefusedError):
                        await asyncio.open_connection("127.0.0.1", proxy.port)
                    proxy.restore()
                    continue
                reader, writer = await asyncio.open_connection("127.0.0.1", proxy.port)
                writer.write(b"hello")
                assert await reader.read(100) == expected
                writer.close()
        server.close()
        await server.wait_closed()

    asyncio.run(run())
