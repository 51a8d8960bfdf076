"""The setups ``conversation-url --client`` prints, applied by the real ``claude mcp add-json``
and ``codex mcp add`` exactly as printed, against a server started with ``serve --port N``: the
CLI's model (a stand-in) is offered the ccweb tools and a send goes through as the
conversation the credential names, on both backends."""

from __future__ import annotations

import multiprocessing
import subprocess
from pathlib import Path
from urllib.parse import urlsplit

import pytest

from bench.event_writers import forward, wait_for_forwarder
from bench.harness import free_port
from tests.agent_clis import Agents, agents, payload_of, scripted_agent
from tests.cli_support import run_cli
from tests.servers import server_env
from tests.worker_support import TOKEN, Bench

pytestmark = pytest.mark.slow

#: What the agent runs once its client is set up: one turn that sends a message.
ASKING = "ASK tester one_way: the build is green"


def printed_setup(bench: Bench, client: str, *flags: str, **env: str) -> list[str]:
    """The lines ``conversation-url planner --client CLIENT`` prints (its stdout)."""
    shown = run_cli(
        "conversation-url", "planner", "--client", client, *flags,
        env=server_env(CCWEB_TOKEN=TOKEN, CCWEB_DATABASE_URL=bench.database_url, **env),
    )  # fmt: skip
    assert shown.returncode == 0, shown.stderr
    assert "warning" not in shown.stderr
    return shown.stdout.splitlines()


def apply_and_ask(team: Agents, client: str, lines: list[str], cwd: Path, **env: str) -> str:
    """Run the printed lines in a shell, as a person pastes them, then one turn of the client
    in that shell (``env`` added to its environment); what the client's listing of MCP servers
    said."""
    ask = {
        "claude": f"claude -p {ASKING!r} --allowedTools mcp__ccweb --output-format json",
        "codex": f"codex exec --skip-git-repo-check --json {ASKING!r}",
    }[client]
    if lines[0].startswith("[mcp_servers."):  # lines for Codex's config.toml
        with (team.codex_home / "config.toml").open("a") as config:
            config.write("\n" + "\n".join(lines) + "\n")
        lines = []
    script = "\n".join(["set -e", *lines, f"{client} mcp list", ask])
    done = subprocess.run(
        ["bash", "-c", script],
        cwd=cwd, env={**team.env(), **env}, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout


@pytest.mark.parametrize("stdio", [False, True], ids=["http", "stdio"])
@pytest.mark.parametrize("client", ["claude", "codex"])
def test_each_printed_setup_connects_as_printed_to_a_server_on_any_port(
    bench: Bench, tmp_path: Path, client: str, stdio: bool
) -> None:
    bench.conversation("planner")
    bench.conversation("tester")
    lines = printed_setup(
        bench, client, *(["--stdio"] if stdio else []), "--server", bench.server.url
    )
    token = next(part for line in lines for part in line.split() if "ccw1." in part)
    with agents(
        tmp_path, claude=scripted_agent("planner"), codex=scripted_agent("planner")
    ) as team:
        listing = apply_and_ask(team, client, lines, tmp_path)
        model = team.model_of(client)
    assert token.split("ccw1.", 1)[1] not in listing  # the list never shows the credential
    offered = {tool.rsplit("__", 1)[-1] for tool in model.exchanges[0].tools if "ccweb" in tool}
    assert "ccweb_send_message" in offered and "ccweb_request_reply" not in offered
    sent = payload_of(model.exchanges[-1].results[-1].text)
    assert sent["ok"] is True and sent["targetConversationId"] == "tester"
    tester = bench.rpc("message.list", {"sessionId": "tester"})["messages"]
    assert [m["content"] for m in tester] == ["the build is green"]
    assert tester[0]["metadata"]["crossConversation"]["sourceConversationId"] == "planner"


def test_the_url_names_ccweb_url_else_the_settings_and_warns_when_nothing_answers(
    bench: Bench, tmp_path: Path
) -> None:
    bench.conversation("planner")
    bench.conversation("tester")
    from_env = printed_setup(bench, "claude", CCWEB_URL=bench.server.url)
    assert f"{bench.server.url}/mcp" in from_env[0]
    with agents(tmp_path, claude=scripted_agent("planner"), codex=scripted_agent("x")) as team:
        apply_and_ask(team, "claude", from_env, tmp_path)
    assert len(bench.rpc("message.list", {"sessionId": "tester"})["messages"]) == 1

    # Started with --port and told nothing: the settings' port, and a warning that says so.
    nowhere = run_cli(
        "conversation-url", "planner", "--client", "codex",
        env=server_env(CCWEB_DATABASE_URL=bench.database_url, CCWEB_PORT="1"),
    )  # fmt: skip
    assert nowhere.returncode == 0, nowhere.stderr
    assert "http://127.0.0.1:1/mcp" in nowhere.stdout
    (warning,) = [line for line in nowhere.stderr.splitlines() if "warning" in line]
    assert "no ccweb-store server answers at http://127.0.0.1:1" in warning
    assert "--server URL" in warning


@pytest.mark.parametrize("backend", ["sqlite"], indirect=True)
def test_claude_waits_for_a_slow_server_before_its_first_turn(bench: Bench, tmp_path: Path) -> None:
    """Claude Code connects its MCP servers in the background, and ``claude -p`` asks the model
    at once: the printed setup makes it wait for ccweb's tools (``alwaysLoad``) when every
    chunk to and from the server comes half a second late. The wait's cap is raised from
    Claude Code's 5 s so that a loaded machine cannot make the test fail; without
    ``alwaysLoad`` there is no wait, and the first request has no ccweb tool."""
    bench.conversation("planner")
    bench.conversation("tester")
    port = free_port()
    forwarder = multiprocessing.get_context("spawn").Process(
        target=forward, args=(port, "127.0.0.1", urlsplit(bench.server.url).port, 0.5), daemon=True
    )
    forwarder.start()
    try:
        wait_for_forwarder(port)
        slow = f"http://127.0.0.1:{port}"
        lines = printed_setup(bench, "claude", "--server", slow)
        with agents(tmp_path, claude=scripted_agent("planner"), codex=scripted_agent("x")) as team:
            apply_and_ask(team, "claude", lines, tmp_path, MCP_CONNECT_TIMEOUT_MS="60000")
            first = team.claude_model.exchanges[0]
    finally:
        forwarder.terminate()
        forwarder.join()
    assert "mcp__ccweb__ccweb_send_message" in first.tools
    assert len(bench.rpc("message.list", {"sessionId": "tester"})["messages"]) == 1
