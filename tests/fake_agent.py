"""A stand-in for ``claude -p`` that ``ccweb-store worker`` runs as a real process in tests.

It reads its prompt (the last argument, else stdin), acts on it through the ccweb MCP tools
over plain HTTP JSON-RPC with the bound URL in ``CCWEB_MCP_URL``, and prints its answer:

- ``ASK <conversation> <one_way|return_and_continue>: <text>``: ``ccweb_send_message``;
- ``IMPERSONATE <conversation>``: the same send, claiming to be that conversation
  (``&sourceSessionId=…``); prints how the server answered;
- a cross-conversation message (the target prompt): answers it;
- a returned reply (the source's auto-run prompt): says what came back;
- ``PWD``: says where it runs;
- anything else: echoes it.

It refuses to run (exit 9) when its environment holds ``CCWEB_TOKEN`` or ``CCWEB_DATABASE_URL``:
the worker must never hand those to an agent.

Options (before the prompt): ``--sleep SECONDS`` first, ``--exit CODE`` (with a line on
stderr) instead of answering, ``--pid-file PATH``, ``--wait-for PATH`` (answer only once that
file exists, so a test decides when the command ends), ``--marks PATH`` (append
``start <conversation> <run>`` when it starts and ``end <conversation> <run>`` just before it
exits, so a test sees from their order which commands ran at the same time). Each run appends
its run id to ``$FAKE_AGENT_LOG`` when set. Standard library only.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
import time
import urllib.error
import urllib.request
from typing import Any

#: ``--wait-for`` gives up after this long: a test that failed never leaves an agent behind.
WAIT_FOR_AT_MOST = 120.0


def call_tool(url: str, name: str, arguments: dict[str, Any]) -> tuple[int, dict[str, Any]]:
    """``tools/call`` over HTTP: the status code and the JSON body."""
    body = json.dumps(
        {"jsonrpc": "2.0", "id": 1, "method": "tools/call",
         "params": {"name": name, "arguments": arguments}}
    ).encode()  # fmt: skip
    request = urllib.request.Request(
        url,
        data=body,
        headers={"Content-Type": "application/json", "Accept": "application/json"},
    )
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as error:
        return error.code, json.loads(error.read())


def section(prompt: str, heading: str) -> str:
    """The text after ``heading`` up to the next blank line."""
    after = prompt.split(heading, 1)[1].lstrip("\n")
    return after.split("\n\n", 1)[0].strip()


def answer(prompt: str) -> str:
    env = os.environ
    me = f"{env['CCWEB_CONVERSATION_ID']} (hop {env['CCWEB_HOP_COUNT']})"
    url = env["CCWEB_MCP_URL"]
    ask = re.search(r"^ASK (\S+) (one_way|return_and_continue): (.+)$", prompt, re.MULTILINE)
    if ask:
        target, mode, text = ask.groups()
        arguments = {"targetConversationId": target, "content": text, "replyMode": mode}
        status, body = call_tool(url, "ccweb_send_message", arguments)
        payload = body["result"]["structuredContent"]
        if body["result"]["isError"]:
            return f"{me} could not ask {target}: {payload['error']['code']}"
        return f"{me} asked {target} ({mode}), request {payload.get('requestId', '-')}"
    impersonate = re.search(r"^IMPERSONATE (\S+)$", prompt, re.MULTILINE)
    if impersonate:
        other = impersonate.group(1)
        arguments = {"targetConversationId": other, "content": "x", "replyMode": "one_way"}
        status, body = call_tool(f"{url}&sourceSessionId={other}", "ccweb_send_message", arguments)
        code = body.get("error", {}).get("data", {}).get("code", "accepted")
        return f"{me} tried to speak as {other}: HTTP {status} {code}"
    if prompt.strip() == "PWD":
        return f"{me} works in {os.getcwd()}"
    if "[Cross-conversation message]" in prompt:
        return f"{me} answers: done with {section(prompt, 'Message:')!r}"
    if "[Cross-conversation reply returned]" in prompt:
        return f"{me} got the reply: {section(prompt, 'Their reply:')}"
    return f"{me} says: {prompt.strip()}"


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--sleep", type=float, default=0)
    parser.add_argument("--exit", type=int, default=0)
    parser.add_argument("--pid-file")
    parser.add_argument("--wait-for")
    parser.add_argument("--marks")
    parser.add_argument("prompt", nargs="?")
    options = parser.parse_args()
    leaked = [name for name in ("CCWEB_TOKEN", "CCWEB_DATABASE_URL") if name in os.environ]
    if leaked:  # the agent must never hold what would let it act as anyone
        print(f"fake agent was given {', '.join(leaked)}", file=sys.stderr)
        return 9
    if options.pid_file:
        with open(options.pid_file, "w") as file:
            file.write(str(os.getpid()))
    prompt = options.prompt if options.prompt is not None else sys.stdin.read()
    mark(options.marks, "start")
    if os.environ.get("FAKE_AGENT_LOG"):
        with open(os.environ["FAKE_AGENT_LOG"], "a") as file:
            file.write(os.environ["CCWEB_RUN_ID"] + "\n")
    time.sleep(options.sleep)
    if options.wait_for:
        deadline = time.monotonic() + WAIT_FOR_AT_MOST
        while not os.path.exists(options.wait_for) and time.monotonic() < deadline:
            time.sleep(0.05)
    if options.exit:
        print(f"fake agent failing on purpose with {options.exit}", file=sys.stderr)
        mark(options.marks, "end")
        return options.exit
    print(answer(prompt))
    mark(options.marks, "end")
    return 0


def mark(path: str | None, what: str) -> None:
    """One line in ``path``, written at once (``O_APPEND``), so lines of commands running
    at the same time never interleave."""
    if path:
        line = f"{what} {os.environ['CCWEB_CONVERSATION_ID']} {os.environ['CCWEB_RUN_ID']}\n"
        descriptor = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            os.write(descriptor, line.encode())
        finally:
            os.close(descriptor)


if __name__ == "__main__":
    sys.exit(main())
