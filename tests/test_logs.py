"""The server's logs, read from a real ``serve`` process's stderr: quiet by default (the
startup line, then warnings and errors only), ``--access-log`` for a line per request,
``--log-format json`` (or ``CCWEB_LOG_FORMAT``) for one JSON object per line."""

from __future__ import annotations

import json
import logging
import sys

import httpx

from ccweb_store import __version__
from ccweb_store.cli.logs import JsonFormatter
from ccweb_store.cli.serving import startup_line
from ccweb_store.config import Settings
from tests.cli_support import run_cli
from tests.servers import SERVE, free_port, server_env, serving, start_server

LIST_TOOLS = {"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {}}
LIST_SESSIONS = {"jsonrpc": "2.0", "id": 2, "method": "session.list", "params": {}}


def some_requests(url: str) -> None:
    for _ in range(3):
        assert httpx.get(f"{url}/healthz", timeout=30).json()["status"] == "ok"
    assert "result" in httpx.post(f"{url}/mcp", json=LIST_TOOLS, timeout=30).json()
    assert "result" in httpx.post(f"{url}/rpc", json=LIST_SESSIONS, timeout=30).json()
    assert httpx.get(f"{url}/metrics", timeout=30).status_code == 200


def test_by_default_the_server_logs_its_startup_line_and_nothing_per_request(
    database_url: str,
) -> None:
    with serving(database_url) as server:
        some_requests(server.url)
        log = server.stop()
    lines = log.splitlines()
    # A fresh SQLite file is migrated at start (one line); the PostgreSQL test database
    # already is.
    if lines and "migrated the database schema from empty to" in lines[0]:
        lines = lines[1:]
    assert len(lines) == 2, log
    started, stopped = lines
    port = server.url.rsplit(":", 1)[1]
    assert f"ccweb-store {__version__} listening on http://127.0.0.1:{port}" in started
    assert "database " in started and "access log off" in started
    assert stopped.endswith("ccweb-store stopped")
    for chatter in ("alembic", "Running upgrade", "Context impl", "GET /healthz", "Uvicorn"):
        assert chatter not in log


def test_access_log_adds_one_line_per_request(database_url: str) -> None:
    with serving(database_url, CCWEB_ACCESS_LOG="1") as server:
        some_requests(server.url)
        log = server.stop()
    access = [line for line in log.splitlines() if "uvicorn.access" in line]
    # start_server's readiness probes (one or more), then some_requests' six
    assert len(access) >= 7
    assert sum('"GET /healthz HTTP/1.1" 200' in line for line in access) >= 4
    assert sum('"POST /mcp HTTP/1.1" 200' in line for line in access) == 1
    assert sum('"POST /rpc HTTP/1.1" 200' in line for line in access) == 1
    assert "alembic" not in log


def test_the_access_log_flag_on_the_command_line(database_url: str) -> None:
    port = free_port()
    server = start_server(
        [*SERVE, "--port", str(port), "--access-log"],
        port=port,
        env=server_env(CCWEB_DATABASE_URL=database_url),
    )
    try:
        some_requests(server.url)
    finally:
        log = server.stop()
    assert '"POST /rpc HTTP/1.1" 200' in log
    assert "access log on" in log


def test_json_logs_are_one_object_per_line(database_url: str) -> None:
    with serving(database_url, CCWEB_LOG_FORMAT="json", CCWEB_ACCESS_LOG="1") as server:
        some_requests(server.url)
        log = server.stop()
    lines = [json.loads(line) for line in log.splitlines()]  # every line parses
    assert all({"time", "level", "logger", "message"} <= line.keys() for line in lines)
    started = next(line for line in lines if "listening on" in line["message"])
    assert started["version"] == __version__
    assert started["listen"] == server.url
    assert started["accessLog"] is True
    posts = [line for line in lines if line["logger"] == "uvicorn.access"]
    rpc = next(line for line in posts if line["path"] == "/rpc")
    assert (rpc["method"], rpc["status"], rpc["httpVersion"]) == ("POST", 200, "1.1")
    assert lines[-1]["message"] == "ccweb-store stopped"


def test_the_log_format_flag_and_a_refusal_as_json() -> None:
    result = run_cli(
        "serve",
        "--log-format",
        "json",
        "--host",
        "0.0.0.0",
        env=server_env(CCWEB_DATABASE_URL="sqlite+aiosqlite:///unused.db"),
        timeout=30,
    )
    assert result.returncode == 2
    refusal = json.loads(result.stderr.splitlines()[0])
    assert refusal["level"] == "ERROR"
    assert "without a token" in refusal["message"]


def test_a_bad_log_format_is_refused() -> None:
    result = run_cli("serve", "--log-format", "yaml", timeout=30)
    assert result.returncode == 2
    assert "CCWEB_LOG_FORMAT" in result.stderr and "'text' or 'json'" in result.stderr


def test_the_startup_line_masks_the_database_password() -> None:
    settings = Settings(
        database_url="postgresql+asyncpg://ccweb:s3cret-pass@db.internal:5432/ccweb",
        host="::1",
        port=9000,
    )
    line, fields = startup_line(settings)
    assert "s3cret-pass" not in line and "s3cret-pass" not in json.dumps(fields)
    assert "postgresql+asyncpg://ccweb:***@db.internal:5432/ccweb" in line
    assert fields["listen"] == "http://[::1]:9000"


def test_a_json_line_carries_the_traceback_of_an_error() -> None:
    try:
        raise ValueError("boom")
    except ValueError:
        record = logging.LogRecord(
            "ccweb_store", logging.ERROR, __file__, 1, "failed: %s", ("x",), sys.exc_info()
        )
    line = json.loads(JsonFormatter().format(record))
    assert line["message"] == "failed: x" and line["level"] == "ERROR"
    assert "ValueError: boom" in line["exception"]
    assert "\n" not in JsonFormatter().format(record)
