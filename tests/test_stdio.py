"""``ccweb-store mcp-stdio``: newline-delimited JSON-RPC on stdin/stdout, logs on stderr."""

from __future__ import annotations

import asyncio
import json
import sqlite3
import subprocess
from contextlib import closing
from pathlib import Path
from typing import Any

from ccweb_store.protocol.stdio_bridge import mcp_url, routing_headers_for
from tests.cli_support import run_cli
from tests.conftest import migrate_url
from tests.servers import free_port, server_env, serving


def _run(args: list[str], lines: list[str], database_url: str) -> subprocess.CompletedProcess[str]:
    return run_cli(
        "mcp-stdio",
        *args,
        env=server_env(CCWEB_DATABASE_URL=database_url),
        input="".join(line + "\n" for line in lines),
    )


def _request(method: str, params: dict[str, Any] | None = None, id: int = 1) -> str:
    return json.dumps({"jsonrpc": "2.0", "id": id, "method": method, "params": params or {}})


def test_stdio_answers_each_line_and_writes_only_json_on_stdout(database_url: str) -> None:
    completed = _run(
        ["--source-session", "me", "--hop-count", "1", "--log-level", "debug"],
        [
            _request("initialize", {"protocolVersion": "2025-03-26"}, id=1),
            json.dumps({"jsonrpc": "2.0", "method": "notifications/initialized"}),
            "",
            "{broken json",
            _request("tools/list", id=2),
            _request("tools/call", {"name": "ccweb_list_conversations", "arguments": {}}, id=3),
            _request("tools/call", {"name": "ccweb_unknown", "arguments": {}}, id=4),
            _request("tools/call", {"name": "ccweb_request_reply", "arguments": {}}, id=5),
        ],
        database_url,
    )
    assert completed.returncode == 0, completed.stderr
    answers = [json.loads(line) for line in completed.stdout.splitlines()]
    assert [a["id"] for a in answers] == [1, None, 2, 3, 4, 5]
    assert answers[0]["result"]["protocolVersion"] == "2025-03-26"
    assert answers[1]["error"]["code"] == -32700
    names = [tool["name"] for tool in answers[2]["result"]["tools"]]
    assert "ccweb_send_message" in names and "ccweb_request_reply" not in names
    assert answers[3]["result"]["structuredContent"] == {"conversations": [], "hasMore": False}
    assert answers[4]["error"]["code"] == -32602
    assert "error" not in answers[5]  # the hidden alias is a known tool
    assert "DEBUG" in completed.stderr or "INFO" in completed.stderr  # logs went to stderr


def test_stdio_requires_a_source_session(database_url: str) -> None:
    completed = _run([], [], database_url)
    assert completed.returncode == 2
    assert "--source-session" in completed.stderr
    assert completed.stdout == ""


def test_a_credential_needs_a_server_to_check_it(database_url: str) -> None:
    completed = _run(["--credential", "ccw1.me.cred_1.0.0.sig"], [], database_url)
    assert completed.returncode == 2
    assert "--credential needs --url" in completed.stderr
    assert completed.stdout == ""


def test_stdio_refuses_a_negative_hop_count(database_url: str) -> None:
    completed = _run(["--source-session", "me", "--hop-count", "-1"], [], database_url)
    assert completed.returncode == 2
    assert "--hop-count" in completed.stderr


def test_a_bridge_to_an_unreachable_server_answers_with_an_error(tmp_path: Path) -> None:
    port = free_port()  # nothing listens on it
    completed = _run(
        ["--source-session", "me", "--url", f"http://127.0.0.1:{port}"],
        [_request("ping", id=7), json.dumps({"jsonrpc": "2.0", "method": "notifications/x"})],
        f"sqlite+aiosqlite:///{tmp_path / 'unused.db'}",
    )
    assert completed.returncode == 0, completed.stderr
    answers = [json.loads(line) for line in completed.stdout.splitlines()]
    assert len(answers) == 1
    assert answers[0]["id"] == 7
    assert "cannot reach the ccweb-store server" in answers[0]["error"]["message"]
    assert not (tmp_path / "unused.db").exists()  # the bridge never opens a database


def test_the_bridge_url_may_name_the_server_or_the_endpoint() -> None:
    assert mcp_url("http://127.0.0.1:8787") == "http://127.0.0.1:8787/mcp"
    assert mcp_url("http://127.0.0.1:8787/") == "http://127.0.0.1:8787/mcp"
    assert mcp_url("http://127.0.0.1:8787/mcp") == "http://127.0.0.1:8787/mcp"


def test_stdio_migrates_an_older_database_before_answering(tmp_path: Path) -> None:
    database = tmp_path / "older.db"
    asyncio.run(migrate_url(f"sqlite+aiosqlite:///{database}", "0008"))
    completed = _run(
        ["--source-session", "me", "--database-url", f"sqlite+aiosqlite:///{database}"],
        [_request("tools/call", {"name": "ccweb_list_conversations", "arguments": {}})],
        "sqlite+aiosqlite:///ignored-because-the-flag-wins.db",
    )
    assert completed.returncode == 0, completed.stderr
    answer = json.loads(completed.stdout)
    assert answer["result"]["isError"] is False
    with closing(sqlite3.connect(database)) as db:
        assert db.execute("SELECT version_num FROM alembic_version").fetchone()[0] >= "0009"


def test_stdio_refuses_a_database_that_is_not_there(tmp_path: Path) -> None:
    database = tmp_path / "missing.db"
    completed = _run(
        ["--source-session", "me", "--database-url", f"sqlite+aiosqlite:///{database}"],
        [_request("tools/call", {"name": "ccweb_list_conversations", "arguments": {}})],
        "sqlite+aiosqlite:///ignored-because-the-flag-wins.db",
    )
    assert completed.returncode == 1
    assert f"no database at {database}" in completed.stderr
    assert not database.exists()


VERSION_KEY = "io.modelcontextprotocol/protocolVersion"
MODERN_META = {VERSION_KEY: "2026-07-28", "io.modelcontextprotocol/clientCapabilities": {}}


def _modern(method: str, params: dict[str, Any] | None = None, id: int = 1) -> str:
    return _request(method, {**(params or {}), "_meta": MODERN_META}, id=id)


def test_stdio_speaks_2026_07_28_per_request_without_headers(database_url: str) -> None:
    completed = _run(
        ["--source-session", "me"],
        [
            _modern("server/discover", id=1),
            _modern("tools/list", id=2),
            _modern("tools/call", {"name": "ccweb_list_conversations", "arguments": {}}, id=3),
            _modern("ping", id=4),
            _request("tools/list", {"_meta": {**MODERN_META, VERSION_KEY: "v9"}}, id=5),
            _request("tools/list", {"_meta": {VERSION_KEY: "2026-07-28"}}, id=6),
            json.dumps({"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {}}),
            _request("initialize", {"protocolVersion": "2025-11-25"}, id=7),
        ],
        database_url,
    )
    assert completed.returncode == 0, completed.stderr
    answers = {answer["id"]: answer for answer in map(json.loads, completed.stdout.splitlines())}
    assert sorted(answers) == [1, 2, 3, 4, 5, 6, 7]  # nothing for the notification
    assert "2026-07-28" in answers[1]["result"]["supportedVersions"]
    assert answers[2]["result"]["resultType"] == "complete"
    assert "ccweb_request_reply" not in [tool["name"] for tool in answers[2]["result"]["tools"]]
    assert answers[3]["result"]["structuredContent"] == {"conversations": [], "hasMore": False}
    assert answers[4]["error"]["code"] == -32601
    assert answers[5]["error"]["code"] == -32022
    assert answers[5]["error"]["data"]["requested"] == "v9"
    assert answers[6]["error"]["code"] == -32602
    assert answers[7]["result"]["protocolVersion"] == "2025-11-25"  # the same process, both eras


def test_the_bridge_sends_the_routing_headers_a_2026_07_28_request_needs(
    database_url: str,
) -> None:
    token = "bridge-token-for-stdio-tests"
    with serving(database_url, CCWEB_TOKEN=token) as server:
        completed = _run(
            ["--source-session", "me", "--url", server.url, "--token", token],
            [
                _modern("tools/call", {"name": "ccweb_list_conversations", "arguments": {}}, id=1),
                _modern("tools/call", {"name": "ccweb_naïve", "arguments": {}}, id=2),
                _modern("server/discover", id=3),
            ],
            "sqlite+aiosqlite:///unused.db",
        )
    assert completed.returncode == 0, completed.stderr
    answers = [json.loads(line) for line in completed.stdout.splitlines()]
    assert answers[0]["result"]["isError"] is False
    # The non-ASCII name went as =?base64?…?= and matched the body: an unknown tool, no mismatch.
    assert answers[1]["error"]["code"] == -32602
    assert answers[2]["result"]["supportedVersions"][0] == "2026-07-28"


def test_the_bridge_leaves_legacy_messages_without_routing_headers() -> None:
    assert routing_headers_for({"jsonrpc": "2.0", "id": 1, "method": "tools/list"}) == {}
    assert routing_headers_for([{"jsonrpc": "2.0", "id": 1, "method": "ping"}]) == {}
    modern = json.loads(_modern("tools/call", {"name": "ccweb_x", "arguments": {}}))
    assert routing_headers_for(modern) == {
        "MCP-Protocol-Version": "2026-07-28",
        "Mcp-Method": "tools/call",
        "Mcp-Name": "ccweb_x",
    }


EXACT_IDS = ["-9223372036854775809", "18446744073709551616", "1e-400", '"abc"']


def _exact_id_lines() -> list[str]:
    deep = '{"a":' * 70 + "1" + "}" * 70
    lines = [f'{{"jsonrpc":"2.0","id":{request_id},"method":"ping"}}' for request_id in EXACT_IDS]
    lines.append(
        '{"jsonrpc":"2.0","id":18446744073709551616,"method":"tools/call","params":'
        f'{{"name":"ccweb_list_user_inputs","arguments":{{"limit":{deep}}}}}}}'
    )
    return lines


def _check_exact_ids(stdout: str) -> None:
    answers = stdout.splitlines()
    assert len(answers) == len(EXACT_IDS) + 1, answers
    for request_id, answer in zip(EXACT_IDS, answers, strict=False):
        assert f'"id":{request_id}' in answer
        assert '"result":{}' in answer
    refused = json.loads(answers[-1])
    assert '"id":18446744073709551616' in answers[-1]
    assert refused["error"]["code"] == -32602
    assert refused["error"]["data"]["code"] == "invalid_json_value"


def test_stdio_echoes_every_id_exactly_and_refuses_a_value_too_deep(database_url: str) -> None:
    completed = _run(["--source-session", "me"], _exact_id_lines(), database_url)
    assert completed.returncode == 0, completed.stderr
    _check_exact_ids(completed.stdout)


def test_the_bridge_echoes_every_id_exactly_and_passes_on_the_servers_refusal(
    database_url: str,
) -> None:
    with serving(database_url) as server:
        completed = _run(
            ["--source-session", "me", "--url", server.url],
            _exact_id_lines(),
            "sqlite+aiosqlite:///unused.db",
        )
    assert completed.returncode == 0, completed.stderr
    _check_exact_ids(completed.stdout)
