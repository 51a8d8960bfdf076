"""The real agent CLIs in tests: Claude Code and Codex as ``.ci/agents/install`` pins them, each
pointed at a model stand-in of its own (``tests/model_standins.py``), with homes of their own.

``.ci/agents/install`` puts the pinned CLIs in a cache folder this machine keeps
(``~/.cache/ccweb-store/agent-clis/<hash of the lock file>``); the tests look there, or in
``CCWEB_TEST_AGENT_BIN``. Without them the tests skip, unless ``CCWEB_REQUIRE_AGENTS`` is set
(CI sets it): then they fail.

``scripted_agent`` is the model behind both CLIs in the end-to-end tests: it acts on its prompt
the way ``tests/fake_agent.py`` does, but through the CLI's own MCP client and permission rules.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.model_standins import (
    AnthropicStandIn,
    Call,
    Exchange,
    ResponsesStandIn,
    Say,
    Script,
    running,
)
from tests.servers import ROOT

LOCK = ROOT / ".ci" / "agents" / "package-lock.json"
BIN_ENV = "CCWEB_TEST_AGENT_BIN"
REQUIRE_ENV = "CCWEB_REQUIRE_AGENTS"
#: What the stand-ins take as an API key (anything: they check none).
API_KEY = "stand-in-key"

ASK = re.compile(r"^ASK (\S+) (one_way|return_and_continue): (.+)$", re.MULTILINE)
WRITE = re.compile(r"^WRITE (\S+)$", re.MULTILINE)
TARGET_PROMPT = "[Cross-conversation message]"
REPLY_PROMPT = "[Cross-conversation reply returned]"


def cached_bin() -> Path:
    """Where ``.ci/agents/install`` puts the pinned CLIs' programs on this machine."""
    key = hashlib.sha256(LOCK.read_bytes()).hexdigest()[:16]
    cache = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    root = os.environ.get("CCWEB_AGENT_CACHE") or f"{cache}/ccweb-store/agent-clis"
    return Path(root) / key / "node_modules" / ".bin"


def agent_bin() -> Path:
    """The folder of the pinned ``claude`` and ``codex``; skips (fails under
    ``CCWEB_REQUIRE_AGENTS``) when they are not installed."""
    given = os.environ.get(BIN_ENV)
    folder = Path(given) if given else cached_bin()
    if (folder / "claude").exists() and (folder / "codex").exists():
        return folder
    message = (
        f"the real-agent tests need the pinned Claude Code and Codex in {folder}: run "
        f".ci/agents/install (npm), or set {BIN_ENV}"
    )
    if os.environ.get(REQUIRE_ENV):
        pytest.fail(f"{message}; {REQUIRE_ENV} is set, so they may not skip")
    pytest.skip(message)


def codex_config(model_url: str) -> str:
    """A ``config.toml`` that points Codex at the stand-in, as a self-hoster points it at a
    local model: a ``model_providers`` entry with a ``base_url``."""
    return (
        'model = "stand-in-model"\n'
        'model_provider = "standin"\n\n'
        "[model_providers.standin]\n"
        'name = "Stand-in"\n'
        f'base_url = "{model_url}/v1"\n'
        'wire_api = "responses"\n'
        'env_key = "STANDIN_API_KEY"\n'
    )


@dataclass
class Agents:
    """Both CLIs, each with its model stand-in and a home of its own."""

    bin: Path
    claude_model: AnthropicStandIn
    codex_model: ResponsesStandIn
    home: Path
    codex_home: Path

    def env(self) -> dict[str, str]:
        """The environment that runs the CLIs against the stand-ins (what a worker gets)."""
        return {
            "PATH": f"{self.bin}{os.pathsep}{os.environ.get('PATH', '')}",
            "HOME": str(self.home),
            "CODEX_HOME": str(self.codex_home),
            "ANTHROPIC_BASE_URL": self.claude_model.url,
            "ANTHROPIC_API_KEY": API_KEY,
            "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
            "DISABLE_AUTOUPDATER": "1",
            "STANDIN_API_KEY": API_KEY,
        }

    def model_of(self, agent: str) -> AnthropicStandIn | ResponsesStandIn:
        return self.claude_model if agent == "claude" else self.codex_model


@contextmanager
def agents(tmp_path: Path, claude: Script, codex: Script) -> Iterator[Agents]:
    """The pinned CLIs, Claude Code's model scripted by ``claude`` and Codex's by ``codex``."""
    folder = agent_bin()
    home, codex_home = tmp_path / "home", tmp_path / "codex-home"
    home.mkdir()
    codex_home.mkdir()
    with (
        running(AnthropicStandIn(claude)) as claude_model,
        running(ResponsesStandIn(codex)) as codex_model,
    ):
        (codex_home / "config.toml").write_text(codex_config(codex_model.url))
        yield Agents(folder, claude_model, codex_model, home, codex_home)


def payload_of(text: str) -> dict[str, object]:
    """The JSON payload in a tool result as the CLI hands it to the model (Codex puts a few
    lines of its own before it)."""
    start = text.index("{")
    value = json.loads(text[start:])
    assert isinstance(value, dict)
    return value


def scripted_agent(name: str) -> Script:
    """The model of the conversation ``name``: ``ASK <target> <mode>: <text>`` says a word of
    progress and calls ``ccweb_send_message``, then says what the call returned; ``WRITE
    <path>`` asks the CLI's shell tool to create that file, then says what the tool said; a
    cross-conversation message is answered; a returned reply is acknowledged with what came
    back; anything else is echoed."""

    def script(exchange: Exchange) -> list[Say | Call]:
        if exchange.results:
            result = exchange.results[-1]
            if not result.name.endswith("ccweb_send_message"):
                return [Say(f"{name}'s {result.name} said: {result.text}")]
            if result.is_error or '"ok":true' not in result.text:
                return [Say(f"{name} could not send: {result.text}")]
            sent = payload_of(result.text)
            return [Say(f"{name} sent it, request {sent.get('requestId', '-')}")]
        for text in exchange.prompts:
            if write := WRITE.search(text):
                path = write.group(1)
                if "Bash" in exchange.tools:
                    call = Call("Bash", {"command": f"touch {path}", "description": "Create it"})
                else:
                    call = Call("exec_command", {"cmd": f"touch {path}"})
                return [call]
            if ask := ASK.search(text):
                target, mode, content = ask.groups()
                arguments = {"targetConversationId": target, "content": content, "replyMode": mode}
                return [
                    Say(f"{name} is handing this to {target}."),  # progress, never the answer
                    Call(exchange.tool("ccweb_send_message"), arguments),
                ]
        if message := exchange.prompt_with(TARGET_PROMPT):
            asked = message.split("Message:\n", 1)[1].strip()
            return [Say(f"{name} answers: done with {asked!r}")]
        if reply := exchange.prompt_with(REPLY_PROMPT):
            answer = reply.split("Their reply:\n", 1)[1].split("\n\n", 1)[0].strip()
            return [Say(f"{name} got the reply: {answer}")]
        return [Say(f"{name} echoes: {exchange.prompts[-1] if exchange.prompts else ''}")]

    return script
