"""``worker/agents.py``: how the built-in commands read Claude Code's and Codex's
machine-readable output (the final answer, the agent's session, a failure, a session that could
not be resumed), as pure logic on output the real CLIs print. The CLIs themselves run in
``tests/test_real_agents.py``."""

from __future__ import annotations

import json

from ccweb_store.worker.agents import AGENTS, Reading, resume_refused
from tests.servers import ROOT

CLAUDE, CODEX = AGENTS["claude"], AGENTS["codex"]


def test_the_pinned_clis_are_the_versions_the_worker_calls_tested() -> None:
    pinned = json.loads((ROOT / ".ci" / "agents" / "package.json").read_text())["dependencies"]
    assert pinned == {agent.package: agent.tested_version for agent in AGENTS.values()}


def test_claude_codes_answer_is_its_result_and_its_session_id() -> None:
    stdout = json.dumps(
        {"type": "result", "subtype": "success", "is_error": False, "result": "All green.",
         "session_id": "a4464764-1500-412f-874d-4033c9ac9c07", "num_turns": 2}
    )  # fmt: skip
    assert CLAUDE.read(stdout) == Reading(
        "All green.", "a4464764-1500-412f-874d-4033c9ac9c07", None, started=True
    )


def test_a_claude_code_error_result_is_a_failure_that_keeps_the_session() -> None:
    stdout = json.dumps(
        {"type": "result", "subtype": "success", "is_error": True, "session_id": "s-1",
         "result": "API Error: 500 overloaded"}
    )  # fmt: skip
    reading = CLAUDE.read(stdout)
    assert (reading.answer, reading.session_id) == (None, "s-1")
    assert reading.error == "Claude Code reported: API Error: 500 overloaded"


def test_codexs_answer_is_its_last_agent_message_never_the_progress_before_it() -> None:
    events = [
        {"type": "thread.started", "thread_id": "01a24a42-1bd6-7390-bfdf-34ee63d0f8bc"},
        {"type": "item.completed", "item": {"type": "error", "message": "Model metadata …"}},
        {"type": "turn.started"},
        {"type": "item.completed", "item": {"type": "agent_message", "text": "Looking…"}},
        {"type": "item.completed", "item": {"type": "mcp_tool_call", "tool": "ccweb_send_message"}},
        {"type": "item.completed", "item": {"type": "agent_message", "text": "Sent it."}},
        {"type": "turn.completed", "usage": {}},
    ]
    stdout = "WARNING: a line that is not JSON\n" + "\n".join(map(json.dumps, events))
    assert CODEX.read(stdout) == Reading(
        "Sent it.", "01a24a42-1bd6-7390-bfdf-34ee63d0f8bc", None, started=True
    )


def test_a_failed_codex_turn_is_a_failure() -> None:
    events = [
        {"type": "thread.started", "thread_id": "t-1"},
        {"type": "turn.started"},
        {"type": "error", "message": "Reconnecting... 1/5"},
        {"type": "turn.failed", "error": {"message": "stream disconnected before completion"}},
    ]
    reading = CODEX.read("\n".join(map(json.dumps, events)))
    assert (reading.answer, reading.session_id, reading.started) == (None, "t-1", True)
    assert reading.error == "Codex reported: stream disconnected before completion"


def test_a_resume_is_refused_when_the_cli_stopped_before_a_turn_naming_the_session() -> None:
    gone = "0f0e0d0c-0b0a-4909-8807-060504030201"
    nothing = Reading(None, None, None, started=False)
    claude_said = f"No conversation found with session ID: {gone}"
    codex_said = f"Error: thread/resume failed: no rollout found for thread id {gone}"
    assert resume_refused(nothing, 1, claude_said, gone)
    assert resume_refused(nothing, 1, codex_said, gone)
    # Anything else is the run's own failure, never a reason to start over.
    assert not resume_refused(nothing, 1, "Invalid API key", gone)
    assert not resume_refused(Reading(None, gone, "x", started=True), 1, codex_said, gone)
    assert not resume_refused(nothing, 0, claude_said, gone)


def test_the_built_in_commands_pass_the_credential_by_variable_and_resume_by_id() -> None:
    endpoint = "http://127.0.0.1:8787/mcp"
    claude = CLAUDE.command("claude", endpoint=endpoint, resume="s-1", args=["--model", "x"])
    assert claude[:7] == ["claude", "-p", "--output-format", "json", "--resume", "s-1", "--model"]
    config = json.loads(claude[claude.index("--mcp-config") + 1])
    assert config == {
        "mcpServers": {
            "ccweb": {
                "type": "http",
                "url": endpoint,
                "headers": {"Authorization": "Bearer ${CCWEB_CREDENTIAL}"},
                "alwaysLoad": True,
            }
        }
    }
    assert claude[claude.index("--allowedTools") + 1] == "mcp__ccweb"
    codex = CODEX.command("codex", endpoint=endpoint, resume="t-1", args=["-s", "workspace-write"])
    assert codex[:4] == ["codex", "exec", "--json", "--skip-git-repo-check"]
    assert codex[-5:] == ["-s", "workspace-write", "resume", "t-1", "-"]
    overrides = [codex[i + 1] for i, arg in enumerate(codex) if arg == "-c"]
    assert overrides == [
        f'mcp_servers.ccweb.url="{endpoint}"',
        'mcp_servers.ccweb.bearer_token_env_var="CCWEB_CREDENTIAL"',
        'mcp_servers.ccweb.default_tools_approval_mode="approve"',
        "mcp_servers.ccweb.required=true",
    ]
    assert not any("ccw1." in arg for arg in claude + codex)
