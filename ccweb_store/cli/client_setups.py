"""What ``conversation-url --client`` prints: the lines that set up Claude Code or Codex to speak
MCP as one conversation, each as that client takes it.

The credential travels in a header or an environment variable, never in the URL, so that
``claude mcp list`` or ``codex mcp list`` and a proxy's log never show it:

- Claude Code: ``claude mcp add-json ccweb '{…}'``, over HTTP with an ``Authorization``
  header, over stdio with ``ccweb-store mcp-stdio --url SERVER`` reading ``CCWEB_CREDENTIAL``
  from the server's ``env``. Both say ``"alwaysLoad": true``: Claude Code connects its MCP
  servers in the background, and ``claude -p`` would otherwise start a turn without the ccweb
  tools when the server answers later than the first model request;
- Codex over HTTP: ``codex mcp add ccweb --url URL --bearer-token-env-var CCWEB_CREDENTIAL``,
  with the credential exported in the environment Codex runs in;
- Codex over stdio: the ``[mcp_servers.ccweb]`` table of ``config.toml`` with ``command``,
  ``args``, ``env`` and ``required = true``: Codex gives a stdio server that is not required
  about a second to start before the turn goes on without its tools.
"""

from __future__ import annotations

import json
import shlex
import shutil
import sys
from pathlib import Path

from ccweb_store.worker.agents import CREDENTIAL_VARIABLE, SERVER_NAME, claude_server

#: The MCP clients ``conversation-url --client`` writes a setup for.
CLIENTS = ("claude", "codex")


def setup_lines(client: str, *, server: str, token: str, stdio: bool) -> list[str]:
    """The lines that configure ``client`` (``claude`` or ``codex``) for the credential
    ``token`` on the server at ``server`` (its base URL), over HTTP or through the stdio
    bridge."""
    endpoint = f"{server}/mcp"
    if stdio:
        bridge = [*ccweb_store_command(), "mcp-stdio", "--url", server]
        program, args = bridge[0], bridge[1:]
        if client == "codex":
            return [
                f"[mcp_servers.{SERVER_NAME}]",
                f"command = {json.dumps(program)}",
                f"args = {json.dumps(args)}",
                f"env = {{ {CREDENTIAL_VARIABLE} = {json.dumps(token)} }}",
                "required = true",
            ]
        env = {CREDENTIAL_VARIABLE: token}
        return [claude_add({"type": "stdio", "command": program, "args": args, "env": env})]
    if client == "claude":
        headers = {"Authorization": f"Bearer {token}"}
        return [claude_add({"type": "http", "url": endpoint, "headers": headers})]
    add = ["codex", "mcp", "add", SERVER_NAME, "--url", endpoint]
    return [
        f"export {CREDENTIAL_VARIABLE}={shlex.quote(token)}",
        shlex.join([*add, "--bearer-token-env-var", CREDENTIAL_VARIABLE]),
    ]


def claude_add(server: dict[str, object]) -> str:
    """``claude mcp add-json`` of ``server``, connected before a turn starts."""
    config = json.dumps(claude_server(server), separators=(",", ":"))
    return shlex.join(["claude", "mcp", "add-json", SERVER_NAME, config])


def ccweb_store_command() -> list[str]:
    """How to run this ccweb-store from anywhere: its script's absolute path, else
    ``python -m ccweb_store`` with this interpreter."""
    script = Path(sys.argv[0])
    if script.name == "ccweb-store" and script.exists():
        return [str(script.absolute())]
    found = shutil.which("ccweb-store")
    return [found] if found else [sys.executable, "-m", "ccweb_store"]
