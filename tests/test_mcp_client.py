"""Real MCP clients: the official ``mcp`` package against a real ``uvicorn`` process over
Streamable HTTP (with a bearer token), and against ``ccweb-store mcp-stdio`` (straight on the
database, and bridged to the running server), each in ``auto`` mode (which negotiates
2026-07-28 through ``server/discover``) and in ``legacy`` mode (the ``initialize`` handshake)."""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import httpx2
import pytest
from mcp import Client, StdioServerParameters
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client
from mcp.shared.exceptions import MCPError

from tests.servers import server_env, serving

# The tests share one server process (the module's fixture): under pytest-xdist's
# --dist loadgroup they run on one worker, which starts it once.
pytestmark = pytest.mark.xdist_group("mcp_client_server")

REPO_ROOT = Path(__file__).resolve().parents[1]
TOKEN = "client-test-token"
PUBLIC = {
    "ccweb_send_message",
    "ccweb_create_conversation",
    "ccweb_list_conversations",
    "ccweb_get_pending_reply",
    "ccweb_list_user_inputs",
    "ccweb_prompt_user",
}


def _env(database_url: str) -> dict[str, str]:
    return server_env(CCWEB_DATABASE_URL=database_url)


class Server:
    def __init__(self, url: str, database_url: str) -> None:
        self.url = url
        self.database_url = database_url

    def rpc(self, method: str, params: dict[str, Any]) -> Any:
        response = httpx.post(
            f"{self.url}/rpc",
            json={"jsonrpc": "2.0", "id": 1, "method": method, "params": params},
            headers={"Authorization": f"Bearer {TOKEN}"},
        )
        body = response.json()
        assert "result" in body, body
        return body["result"]

    def claim(self, worker_id: str, kinds: list[str]) -> dict[str, Any] | None:
        """``run.claim``: the claimed run, or None when nothing is queued."""
        claimed = self.rpc("run.claim", {"workerId": worker_id, "kinds": kinds})
        run: dict[str, Any] | None = claimed["run"]
        return run


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    """``ccweb-store serve`` in a real uvicorn process on a free port, a temp SQLite file."""
    database_url = f"sqlite+aiosqlite:///{tmp_path_factory.mktemp('srv') / 'ccweb.db'}"
    with serving(database_url, CCWEB_TOKEN=TOKEN, CCWEB_LOG_LEVEL="warning") as process:
        started = Server(process.url, database_url)
        started.rpc("session.create", {"id": "client-src", "title": "Client source"})
        started.rpc("session.create", {"id": "other", "title": "Other"})
        yield started


def _payload(result: Any) -> dict[str, Any]:
    assert result.is_error is False
    text = result.content[0].text
    payload: dict[str, Any] = json.loads(text)
    assert result.structured_content == payload
    return payload


def _assert_negotiated(client: Client, mode: str) -> None:
    """Auto mode speaks 2026-07-28 natively (server/discover, no initialize fallback); legacy
    mode completes the initialize handshake at the newest 2025 revision."""
    if mode == "auto":
        assert client.protocol_version == "2026-07-28"
        assert client.session.discover_result is not None
        assert client.session.initialize_result is None  # no fallback to the handshake
        assert "2026-07-28" in client.session.discover_result.supported_versions
    else:
        assert client.protocol_version == "2025-11-25"
        assert client.session.initialize_result is not None
        assert client.session.discover_result is None


async def _exercise(client: Client, mode: str) -> None:
    """What every transport must do in either mode: negotiate, list the tools and call them."""
    _assert_negotiated(client, mode)
    assert client.server_info is not None
    assert client.server_info.name == "ccweb-store"
    assert client.server_capabilities.tools is not None
    listed = await client.list_tools()
    assert {tool.name for tool in listed.tools} == PUBLIC
    send = next(tool for tool in listed.tools if tool.name == "ccweb_send_message")
    assert send.input_schema["properties"]["replyMode"]["enum"] == [
        "one_way",
        "return_and_continue",
    ]
    payload = _payload(await client.call_tool("ccweb_list_conversations", {}))
    by_id = {c["conversationId"]: c for c in payload["conversations"]}
    assert set(by_id) >= {"client-src", "other"}
    assert by_id["client-src"]["isSource"] is True
    assert by_id["other"]["isSource"] is False
    # The hidden alias is callable although it is listed nowhere.
    alias = await client.call_tool(
        "ccweb_request_reply", {"targetConversationId": "other", "content": "hi"}
    )
    assert isinstance(alias.is_error, bool)
    # A domain error is a tool result the model reads, in either era.
    to_self = await client.call_tool(
        "ccweb_send_message",
        {"targetConversationId": "client-src", "content": "x", "replyMode": "one_way"},
    )
    assert to_self.is_error is True
    assert to_self.structured_content["error"]["code"] == "cannot_target_self"
    with pytest.raises(MCPError) as unknown:
        await client.call_tool("ccweb_no_such_tool", {})
    assert unknown.value.error.code == -32602


def _http_client(sent: list[str]) -> httpx2.AsyncClient:
    """An HTTP client with the bearer token that records the JSON-RPC method of every POST."""

    async def record(request: httpx2.Request) -> None:
        if request.method == "POST":
            sent.append(json.loads(request.content)["method"])

    return httpx2.AsyncClient(
        headers={"Authorization": f"Bearer {TOKEN}"},
        timeout=httpx2.Timeout(30.0),
        event_hooks={"request": [record]},
    )


@pytest.mark.parametrize("mode", ["auto", "legacy"])
async def test_the_official_client_works_over_streamable_http_with_a_token(
    server: Server, mode: str
) -> None:
    sent: list[str] = []
    http = _http_client(sent)
    transport = streamable_http_client(
        f"{server.url}/mcp?sourceSessionId=client-src", http_client=http
    )
    async with http, Client(transport, mode=mode) as client:
        await _exercise(client, mode)
    if mode == "auto":  # on the wire: the probe, then plain requests, never the handshake
        assert sent[0] == "server/discover"
        assert "initialize" not in sent and "notifications/initialized" not in sent
    else:
        assert sent[:2] == ["initialize", "notifications/initialized"]
        assert "server/discover" not in sent


@pytest.mark.parametrize("mode", ["auto", "legacy"])
async def test_the_official_client_works_with_a_conversation_credential_alone(
    server: Server, mode: str
) -> None:
    """The URL `ccweb-store conversation-url` prints is all a client needs: no operator token
    (the server has one), no sourceSessionId."""
    token = server.rpc("credential.mint", {"sessionId": "client-src"})["token"]
    async with Client(f"{server.url}/mcp?credential={token}", mode=mode) as client:
        await _exercise(client, mode)
    http = create_mcp_http_client(headers={"Authorization": f"Bearer {token}"})
    async with (
        http,
        Client(streamable_http_client(f"{server.url}/mcp", http_client=http), mode=mode) as client,
    ):
        await _exercise(client, mode)


@pytest.mark.parametrize("mode", ["auto", "legacy"])
async def test_the_official_client_is_refused_with_a_revoked_credential(
    server: Server, mode: str
) -> None:
    minted = server.rpc("credential.mint", {"sessionId": "client-src"})
    server.rpc("credential.revoke", {"credentialId": minted["credential"]["id"]})
    with pytest.raises(BaseException) as caught:
        async with Client(f"{server.url}/mcp?credential={minted['token']}", mode=mode) as client:
            await client.list_tools()
    messages = [str(leaf) for leaf in _leaves(caught.value)]
    assert any("was revoked" in message for message in messages), messages


def _leaves(error: BaseException) -> list[BaseException]:
    if isinstance(error, BaseExceptionGroup):
        return [leaf for inner in error.exceptions for leaf in _leaves(inner)]
    return [error]


@pytest.mark.parametrize("mode", ["auto", "legacy"])
async def test_the_official_client_is_refused_without_the_token(server: Server, mode: str) -> None:
    with pytest.raises(BaseException) as caught:
        async with Client(f"{server.url}/mcp?sourceSessionId=client-src", mode=mode) as client:
            await client.list_tools()
    messages = [str(leaf) for leaf in _leaves(caught.value)]
    assert any("missing bearer token" in message for message in messages), messages


def _stdio(args: list[str], database_url: str) -> StdioServerParameters:
    return StdioServerParameters(
        command=sys.executable,
        args=["-m", "ccweb_store", "mcp-stdio", "--source-session", "client-src", *args],
        env=_env(database_url),
        cwd=REPO_ROOT,
    )


@pytest.mark.parametrize("mode", ["auto", "legacy"])
async def test_the_official_client_works_over_stdio_on_the_database(
    server: Server, mode: str
) -> None:
    params = _stdio(["--database-url", server.database_url], server.database_url)
    async with Client(params, mode=mode) as client:
        await _exercise(client, mode)


@pytest.mark.parametrize("mode", ["auto", "legacy"])
async def test_the_official_client_works_over_stdio_bridged_to_the_server(
    server: Server, mode: str
) -> None:
    params = _stdio(["--url", server.url, "--token", TOKEN], "sqlite+aiosqlite:///unused.db")
    async with Client(params, mode=mode) as client:
        await _exercise(client, mode)


@pytest.mark.parametrize("mode", ["auto", "legacy"])
async def test_the_official_client_works_over_stdio_bridged_with_a_credential(
    server: Server, mode: str
) -> None:
    token = server.rpc("credential.mint", {"sessionId": "client-src"})["token"]
    params = StdioServerParameters(
        command=sys.executable,
        args=["-m", "ccweb_store", "mcp-stdio", "--url", server.url, "--credential", token],
        env=_env("sqlite+aiosqlite:///unused.db"),
        cwd=REPO_ROOT,
    )
    async with Client(params, mode=mode) as client:
        await _exercise(client, mode)


async def test_a_return_and_continue_round_trip_with_the_official_client(server: Server) -> None:
    """An agent's real MCP client asks another conversation for work; a worker does it over
    /rpc; the answer comes back to the asking conversation, which is queued to run again."""
    server.rpc("session.create", {"id": "round-trip-target", "title": "Tester"})
    http = create_mcp_http_client(headers={"Authorization": f"Bearer {TOKEN}"})
    transport = streamable_http_client(
        f"{server.url}/mcp?sourceSessionId=client-src", http_client=http
    )
    async with http, Client(transport) as client:
        sent = _payload(
            await client.call_tool(
                "ccweb_send_message",
                {
                    "targetConversationId": "round-trip-target",
                    "content": "Run the tests and report back.",
                    "replyMode": "return_and_continue",
                },
            )
        )
        assert (sent["status"], sent["replyDelivery"]) == ("waiting", "automatic")

        # A worker drains the cross-conversation queue (other tests of this module queue too).
        worked_on: dict[str, Any] = {}
        while run := server.claim("w1", ["cross_conversation"]):
            worked_on[run["id"]] = run
            server.rpc(
                "run.complete",
                {
                    "runId": run["id"],
                    "workerId": "w1",
                    "status": "completed",
                    "output": "All 42 tests pass.",
                },
            )
        assert sent["requestId"] in worked_on[sent["runId"]]["runtimeText"]

        reply = _payload(
            await client.call_tool("ccweb_get_pending_reply", {"requestId": sent["requestId"]})
        )
    assert (reply["status"], reply["replyText"]) == ("returned", "All 42 tests pass.")
    assert reply["originalRequest"] == "Run the tests and report back."
    queued = server.rpc("run.list", {"sessionId": "client-src", "status": ["queued"]})["runs"]
    auto_runs = [run for run in queued if run["replyRequestId"] == sent["requestId"]]
    assert [run["kind"] for run in auto_runs] == ["reply_auto_run"]
    assert "All 42 tests pass." in auto_runs[0]["runtimeText"]
