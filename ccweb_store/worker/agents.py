"""The agents the worker runs itself: Claude Code for conversations whose agent is ``claude``,
Codex for ``codex``.

Each built-in command finds its CLI on ``PATH``, passes the run's prompt on stdin, and gives the
agent the ccweb MCP server for this run only: the server's ``/mcp`` URL, with the run's
credential sent as ``Authorization: Bearer`` from the ``CCWEB_CREDENTIAL`` variable (never in
the URL or on the command line). It allows the ccweb tools, and only those, without asking;
every other permission stays as the user's own configuration of the CLI sets it. It runs
non-interactively in the conversation's directory, a git repository or not, reads the CLI's
machine-readable output, and records the agent's final answer (never its progress log) and the
agent's own session id, which the conversation's next run resumes.
"""

from __future__ import annotations

import json
import re
import shlex
import shutil
import subprocess
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

#: The name the ccweb MCP server has in each run's configuration (its tools are
#: ``mcp__ccweb__<tool>`` to Claude Code).
SERVER_NAME = "ccweb"
#: The variable that holds the run's credential in the agent's environment.
CREDENTIAL_VARIABLE = "CCWEB_CREDENTIAL"
#: How long ``--version`` may take.
VERSION_TIMEOUT_SECONDS = 20.0


@dataclass(frozen=True)
class Reading:
    """What a built-in agent's machine-readable output says of its run."""

    #: The agent's final answer (None: it gave none).
    answer: str | None
    #: The agent's own session (a Claude Code session id, a Codex thread id), when it told.
    session_id: str | None
    #: Why the run failed, when the CLI said so.
    error: str | None
    #: Whether a turn started at all (False: the CLI stopped before the model was asked).
    started: bool


@dataclass(frozen=True)
class BuiltinAgent:
    """One agent CLI the worker knows how to run."""

    #: The conversation's ``agent`` this CLI runs.
    name: str
    #: What people call it.
    title: str
    #: Its program on ``PATH``.
    program: str
    #: The npm package it installs from, and the version the tests run.
    package: str
    tested_version: str

    def find(self, path: str | None = None) -> str | None:
        """The CLI's full path on ``path`` (the worker's ``PATH`` when None), or None."""
        return shutil.which(self.program, path=path)

    def command(
        self, program: str, *, endpoint: str, resume: str | None, args: Sequence[str] = ()
    ) -> list[str]:
        """The command line of a run (its prompt goes on stdin): ``program`` found on ``PATH``,
        ``endpoint`` the server's ``/mcp``, ``resume`` the agent session to continue, ``args``
        the user's own extra arguments."""
        raise NotImplementedError

    def read(self, stdout: str) -> Reading:
        """What the CLI's machine-readable output says of the run."""
        raise NotImplementedError

    def install_hint(self) -> str:
        return f"npm install -g {self.package}@{self.tested_version}"


def _json_objects(stdout: str) -> list[dict[str, Any]]:
    """The JSON objects of ``stdout``, one per line (other lines are skipped)."""
    objects = []
    for line in stdout.splitlines():
        line = line.strip()
        if not line.startswith("{"):
            continue
        try:
            value = json.loads(line)
        except ValueError:
            continue
        if isinstance(value, dict):
            objects.append(value)
    return objects


def claude_server(server: dict[str, object]) -> dict[str, object]:
    """Claude Code's entry for the ccweb MCP server, connected before a turn starts
    (``alwaysLoad``): Claude Code connects MCP servers in the background, and one that answers
    after the first model request is missing from the turn, with every ccweb tool."""
    return {**server, "alwaysLoad": True}


class ClaudeCode(BuiltinAgent):
    """``claude -p``: the prompt on stdin, one JSON result (``--output-format json``), the ccweb
    server from an inline ``--mcp-config`` whose header Claude Code fills in from the
    environment and which it connects before the turn, its tools allowed with
    ``--allowedTools mcp__ccweb``."""

    def command(
        self, program: str, *, endpoint: str, resume: str | None, args: Sequence[str] = ()
    ) -> list[str]:
        server = claude_server(
            {
                "type": "http",
                "url": endpoint,
                "headers": {"Authorization": f"Bearer ${{{CREDENTIAL_VARIABLE}}}"},
            }
        )
        config = json.dumps({"mcpServers": {SERVER_NAME: server}}, separators=(",", ":"))
        return [
            program,
            "-p",
            "--output-format",
            "json",
            *(["--resume", resume] if resume else []),
            *args,
            # Both options take several values: they come last, and the prompt is on stdin.
            "--allowedTools",
            f"mcp__{SERVER_NAME}",
            "--mcp-config",
            config,
        ]

    def read(self, stdout: str) -> Reading:
        results = [item for item in _json_objects(stdout) if item.get("type") == "result"]
        if not results:
            return Reading(None, None, None, started=False)
        result = results[-1]
        text = result.get("result")
        text = text if isinstance(text, str) else None
        session = result.get("session_id")
        session = session if isinstance(session, str) and session else None
        if result.get("is_error") or result.get("subtype") not in (None, "success"):
            why = text or str(result.get("subtype") or "an error")
            return Reading(None, session, f"Claude Code reported: {why}", started=True)
        return Reading(text, session, None, started=True)


class Codex(BuiltinAgent):
    """``codex exec``: the prompt on stdin (``-``), JSON Lines events (``--json``), outside a
    git repository too (``--skip-git-repo-check``), the ccweb server from ``-c`` overrides with
    its bearer token read from the environment, its tools approved, and required."""

    def command(
        self, program: str, *, endpoint: str, resume: str | None, args: Sequence[str] = ()
    ) -> list[str]:
        server = f"mcp_servers.{SERVER_NAME}"
        return [
            program,
            "exec",
            "--json",
            "--skip-git-repo-check",
            "-c",
            f"{server}.url={json.dumps(endpoint)}",
            "-c",
            f'{server}.bearer_token_env_var="{CREDENTIAL_VARIABLE}"',
            "-c",
            f'{server}.default_tools_approval_mode="approve"',
            # Required: Codex waits for it rather than starting the turn without its tools.
            "-c",
            f"{server}.required=true",
            *args,
            *(["resume", resume] if resume else []),
            "-",
        ]

    def read(self, stdout: str) -> Reading:
        answer = session = error = None
        started = False
        for event in _json_objects(stdout):
            kind = event.get("type")
            if kind == "thread.started" and isinstance(event.get("thread_id"), str):
                session = event["thread_id"]
            elif kind == "turn.started":
                started = True
            elif kind == "item.completed":
                item = event.get("item")
                if isinstance(item, dict) and item.get("type") == "agent_message":
                    text = item.get("text")
                    answer = text if isinstance(text, str) else answer
            elif kind == "turn.failed":
                failure = event.get("error")
                message = failure.get("message") if isinstance(failure, dict) else None
                error = f"Codex reported: {message or 'the turn failed'}"
        if error is not None:
            answer = None
        return Reading(answer, session, error, started)


AGENTS: dict[str, BuiltinAgent] = {
    agent.name: agent
    for agent in (
        ClaudeCode("claude", "Claude Code", "claude", "@anthropic-ai/claude-code", "2.1.197"),
        Codex("codex", "Codex", "codex", "@openai/codex", "0.171.0"),
    )
}


def resume_refused(reading: Reading, code: int | None, output: str, resumed: str) -> bool:
    """Whether a run that asked to resume ``resumed`` ended because the CLI could not find that
    session (another machine, a cleared cache): it failed before any turn and named it."""
    return code != 0 and not reading.started and resumed in output


def version_of(program: str) -> str | None:
    """The version ``program --version`` prints (``2.1.197``), or None when it does not run."""
    try:
        shown = subprocess.run(
            [program, "--version"],
            capture_output=True,
            text=True,
            timeout=VERSION_TIMEOUT_SECONDS,
            check=False,
        )
    except (OSError, subprocess.SubprocessError):
        return None
    found = re.search(r"\d+\.\d+\.\d+\S*", shown.stdout + shown.stderr)
    return found.group(0) if found else None


def shown(argv: Sequence[str]) -> str:
    """A command line as a shell would take it."""
    return shlex.join(argv)
