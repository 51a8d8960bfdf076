"""The real agents end to end: ``ccweb-store worker`` with no command runs the pinned Claude Code
and Codex (``tests/agent_clis.py``) against scripted model stand-ins, on a real server on both
backends.

What a fake agent cannot show, these do: the built-in command lines as the CLIs take them, the
CLIs' own MCP clients sending the credential as a header, their permission rules (the ccweb
tools allowed, nothing else widened), their output formats (the final answer only), and their
sessions (the source's auto-run resumes the source's agent session).
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest

from ccweb_store.protocol.registry import TOOLS
from tests.agent_clis import Agents, agent_bin, agents, scripted_agent
from tests.cli_support import run_cli
from tests.model_standins import AnthropicStandIn, ResponsesStandIn
from tests.servers import server_env
from tests.worker_support import Bench

pytestmark = pytest.mark.slow

PUBLIC_TOOLS = {tool.name for tool in TOOLS if tool.public}


def ccweb_tools_offered(model: AnthropicStandIn | ResponsesStandIn) -> set[frozenset[str]]:
    """The ccweb tools each of the model's requests offered, by their names in ccweb."""
    return {
        frozenset(tool.rsplit("__", 1)[1] for tool in exchange.tools if "ccweb" in tool)
        for exchange in model.exchanges
    }


def conversation(bench: Bench, conversation_id: str) -> dict[str, Any]:
    session: dict[str, Any] = bench.rpc("session.get", {"id": conversation_id})
    return session


def contents(bench: Bench, conversation_id: str) -> list[tuple[str, str]]:
    messages = bench.rpc("message.list", {"sessionId": conversation_id})["messages"]
    return [(message["role"], message["content"]) for message in messages]


def run_through(bench: Bench, team: Agents, runs: int) -> str:
    """Start a worker with no command, wait until ``runs`` runs completed and nothing is left,
    stop it; its log."""
    worker = bench.worker(command=None, **team.env())
    bench.wait_until(
        f"{runs} runs completed",
        lambda: len(bench.runs(status="completed")) == runs and bench.idle(),
    )
    worker.process.terminate()
    code, log = worker.finish()
    assert code == 0, log
    return log


@pytest.mark.parametrize(
    ("source_agent", "target_agent"), [("claude", "codex"), ("codex", "claude")]
)
def test_a_return_and_continue_between_claude_code_and_codex_continues_the_sources_session(
    bench: Bench, tmp_path: Path, source_agent: str, target_agent: str
) -> None:
    # Neither folder is a git repository: Codex runs in it all the same.
    for folder in ("planner-dir", "tester-dir"):
        (tmp_path / folder).mkdir()
    bench.conversation("planner", agent=source_agent, cwd=str(tmp_path / "planner-dir"))
    bench.conversation("tester", agent=target_agent, cwd=str(tmp_path / "tester-dir"))
    scripts = {source_agent: scripted_agent("planner"), target_agent: scripted_agent("tester")}
    with agents(tmp_path, claude=scripts["claude"], codex=scripts["codex"]) as team:
        bench.person_writes("planner", "ASK tester return_and_continue: run the suite")
        log = run_through(bench, team, runs=3)

    (reply,) = bench.rpc("reply.list", {})["replies"]
    answer = "tester answers: done with 'run the suite'"
    assert (reply["status"], reply["replyText"]) == ("returned", answer)
    # Each run's output is the agent's final answer: never its word of progress before the
    # tool call, never the CLI's log.
    assert contents(bench, "planner") == [
        ("user", "ASK tester return_and_continue: run the suite"),
        ("assistant", f"planner sent it, request {reply['requestId']}"),
        ("assistant", answer),
        ("assistant", f"planner got the reply: {answer}"),
    ]
    assert contents(bench, "tester") == [("user", "run the suite"), ("assistant", answer)]
    kinds = [(run["kind"], run["sessionId"]) for run in bench.runs()]
    assert sorted(kinds) == sorted(
        [("user_turn", "planner"), ("cross_conversation", "tester"), ("reply_auto_run", "planner")]
    )
    assert "could not resume" not in log
    # The auto-run resumed the planner's session: its model saw the earlier turn, and the
    # conversation kept one agent session.
    source_model = team.model_of(source_agent)
    (auto_run,) = [ex for ex in source_model.exchanges if ex.prompt_with("reply returned")]
    earlier = [text for text in auto_run.texts if "ASK tester return_and_continue" in text]
    assert earlier, auto_run.texts
    planner, tester = conversation(bench, "planner"), conversation(bench, "tester")
    assert planner["agentSessionId"] and tester["agentSessionId"]
    assert planner["agentSessionId"] != tester["agentSessionId"]
    # Both CLIs offered exactly the public ccweb tools, never the hidden alias.
    for model in (team.claude_model, team.codex_model):
        assert ccweb_tools_offered(model) == {frozenset(PUBLIC_TOOLS)}


def test_one_way_runs_the_target_and_never_the_source_again(bench: Bench, tmp_path: Path) -> None:
    bench.conversation("planner", agent="codex")
    bench.conversation("tester", agent="claude")
    with agents(tmp_path, claude=scripted_agent("tester"), codex=scripted_agent("planner")) as team:
        bench.person_writes("planner", "ASK tester one_way: the build is green")
        run_through(bench, team, runs=2)
    assert bench.rpc("reply.list", {})["replies"] == []
    assert contents(bench, "planner") == [
        ("user", "ASK tester one_way: the build is green"),
        ("assistant", "planner sent it, request -"),
    ]
    assert contents(bench, "tester")[-1] == (
        "assistant",
        "tester answers: done with 'the build is green'",
    )


@pytest.mark.parametrize("agent", ["claude", "codex"])
def test_a_session_that_cannot_be_resumed_starts_a_new_one_and_keeps_its_id(
    bench: Bench, tmp_path: Path, agent: str
) -> None:
    gone = "0f0e0d0c-0b0a-4909-8807-060504030201"
    bench.conversation("solo", agent=agent)
    bench.rpc("session.update", {"id": "solo", "agentSessionId": gone})
    with agents(tmp_path, claude=scripted_agent("solo"), codex=scripted_agent("solo")) as team:
        bench.person_writes("solo", "hello there")
        log = run_through(bench, team, runs=1)
    assert log.count("could not resume the conversation's session") == 1, log
    assert gone in log and "starting a new session" in log
    assert contents(bench, "solo")[-1] == ("assistant", "solo echoes: hello there")
    kept = conversation(bench, "solo")["agentSessionId"]
    assert kept and kept != gone


@pytest.mark.parametrize("agent", ["claude", "codex"])
def test_a_tool_that_is_not_ccweb_still_needs_permission(
    bench: Bench, tmp_path: Path, agent: str
) -> None:
    target = tmp_path / "written-by-the-agent"
    bench.conversation("solo", agent=agent, cwd=str(tmp_path))
    with agents(tmp_path, claude=scripted_agent("solo"), codex=scripted_agent("solo")) as team:
        bench.person_writes("solo", f"WRITE {target}")
        run_through(bench, team, runs=1)
    assert not target.exists()
    (answer,) = [content for role, content in contents(bench, "solo") if role == "assistant"]
    assert answer.startswith("solo's ")  # the tool answered the model, with a refusal


def test_a_conversation_of_another_agent_fails_saying_how_to_configure_it(
    bench: Bench, tmp_path: Path
) -> None:
    bench.conversation("odd", agent="gemini")
    with agents(tmp_path, claude=scripted_agent("x"), codex=scripted_agent("x")) as team:
        run = bench.person_writes("odd", "hello")
        worker = bench.worker("--once", command=None, **team.env())
        code, log = worker.finish()
    assert code == 1, log
    (failed,) = [r for r in bench.runs() if r["id"] == run]
    assert failed["status"] == "failed"
    assert "no command for conversation 'odd' (agent 'gemini')" in failed["error"]
    assert "[agents.gemini]" in failed["error"]


def test_doctor_reports_each_agent_cli_its_version_and_whether_the_tests_ran_it(
    database_url: str, tmp_path: Path
) -> None:
    pinned = agent_bin()
    other = tmp_path / "bin"
    other.mkdir()
    fake = other / "claude"
    fake.write_text("#!/bin/sh\necho '9.9.9 (Claude Code)'\n")
    fake.chmod(0o755)

    def agent_check(path: str) -> dict[str, Any]:
        env = server_env(CCWEB_DATABASE_URL=database_url, PATH=path)
        shown = run_cli("doctor", "--json", env=env)
        assert shown.returncode == 0, shown.stderr
        (check,) = [c for c in json.loads(shown.stdout)["checks"] if c["name"] == "agent CLIs"]
        return check

    tested = agent_check(f"{pinned}:{os.environ['PATH']}")
    assert tested["status"] == "ok"
    assert tested["items"] == [
        f"claude: Claude Code 2.1.197 at {pinned / 'claude'}, the tested version",
        f"codex: Codex 0.171.0 at {pinned / 'codex'}, the tested version",
    ]
    mixed = agent_check(f"{other}:/usr/bin:/bin")
    assert mixed["status"] == "warning"
    assert mixed["items"] == [
        f"claude: Claude Code 9.9.9 at {fake}; the tests ran 2.1.197",
        "codex: Codex (codex) is not on PATH; the worker fails runs of codex conversations",
    ]
    assert mixed["fix"] == (
        "npm install -g @anthropic-ai/claude-code@2.1.197; npm install -g @openai/codex@0.171.0"
    )
