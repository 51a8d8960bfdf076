"""Local stand-ins of the two model APIs the real agent CLIs call, scripted per test.

``AnthropicStandIn`` speaks the Anthropic Messages API (``POST /v1/messages``, streamed as
Server-Sent Events or answered whole), which Claude Code calls at ``ANTHROPIC_BASE_URL``.
``ResponsesStandIn`` speaks the OpenAI Responses API (``POST /v1/responses``, streamed), which
Codex calls through a ``model_providers`` entry with a ``base_url``.

A test gives each a *script*: a function from what the model is asked (an ``Exchange``, the same
shape for both APIs) to what it answers: ``Say`` text and ``Call`` tool calls. A model turn that
calls tools is followed by the CLI's next request with the results, so a script reads the
results it got (``Exchange.results``) and decides what comes next. Every request is kept
(``requests``, and read as ``exchanges``), so a test can read what the CLI sent: the tools it
offered, the earlier turns of a resumed session. A request that offers no tools at all is the
CLI's own errand (a title), answered apart (``errands``).

Standard library only; each stand-in serves on 127.0.0.1 in a thread of its own.
"""

from __future__ import annotations

import contextlib
import http.server
import itertools
import json
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

from tests.servers import free_port


@dataclass(frozen=True)
class Say:
    """The model says ``text``."""

    text: str


@dataclass(frozen=True)
class Call:
    """The model calls the tool ``name`` (as the CLI named it) with ``arguments``."""

    name: str
    arguments: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Result:
    """The result of one of the model's tool calls, as the CLI sent it back."""

    name: str
    text: str
    is_error: bool


@dataclass(frozen=True)
class Exchange:
    """One request to the model, read the same way for both APIs."""

    #: The names of the tools the CLI offers the model.
    tools: tuple[str, ...]
    #: Every text of the conversation so far, in order: the person's (the prompts), the
    #: model's earlier answers, and the CLI's own reminders.
    texts: tuple[str, ...]
    #: The results of the tool calls the model's last turn made (empty: it made none, and the
    #: person spoke last).
    results: tuple[Result, ...]
    #: The texts of the newest message a person (the worker's prompt) wrote, with whatever
    #: reminders the CLI put beside it.
    prompts: tuple[str, ...]

    def tool(self, suffix: str) -> str:
        """The full name of the offered tool whose name ends with ``suffix``."""
        (name,) = [tool for tool in self.tools if tool.endswith(suffix)]
        return name

    def prompt_with(self, marker: str) -> str | None:
        """The text of the newest prompt that holds ``marker``, or None."""
        return next((text for text in self.prompts if marker in text), None)


Script = Callable[[Exchange], list[Say | Call]]


def say(text: str) -> Script:
    """A script that answers every request with ``text``."""
    return lambda exchange: [Say(text)]


class _StandIn:
    """A threaded HTTP server that records each request and answers it from the script."""

    #: The path the CLI posts its model requests to.
    path = ""

    def __init__(self, script: Script) -> None:
        self.script = script
        self.requests: list[dict[str, Any]] = []
        self.exchanges: list[Exchange] = []
        self.errands: list[dict[str, Any]] = []
        self.lock = threading.Lock()
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self._ids = itertools.count(1)
        self._server = http.server.ThreadingHTTPServer(("127.0.0.1", self.port), self._handler())
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()

    def next_id(self, prefix: str) -> str:
        return f"{prefix}_{next(self._ids)}"

    def answer(self, body: dict[str, Any]) -> list[Say | Call]:
        """What the model answers: the script's answer to a turn of the agent. A request that
        offers no tool is the CLI's own errand (Claude Code asks for a title): it gets a
        short text, and the script never sees it."""
        if not body.get("tools"):
            with self.lock:
                self.errands.append(body)
            return [Say("A title")]
        exchange = self.read(body)
        with self.lock:
            self.requests.append(body)
            self.exchanges.append(exchange)
        return self.script(exchange)

    def read(self, body: dict[str, Any]) -> Exchange:
        raise NotImplementedError

    def reply(self, handler: http.server.BaseHTTPRequestHandler, body: dict[str, Any]) -> None:
        raise NotImplementedError

    def _handler(self) -> type[http.server.BaseHTTPRequestHandler]:
        stand_in = self

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, format: str, *args: Any) -> None:
                pass

            def do_GET(self) -> None:
                self._json(404, {"error": {"type": "not_found_error", "message": self.path}})

            do_HEAD = do_GET

            def do_POST(self) -> None:
                size = int(self.headers.get("Content-Length") or 0)
                raw = self.rfile.read(size)
                if self.path.split("?")[0] != stand_in.path:
                    self._json(404, {"error": {"type": "not_found_error", "message": self.path}})
                    return
                stand_in.reply(self, json.loads(raw))

            def _json(self, status: int, body: dict[str, Any]) -> None:
                data = json.dumps(body).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

        return Handler


def send_events(
    handler: http.server.BaseHTTPRequestHandler, events: list[tuple[str, dict[str, Any]]]
) -> None:
    """A whole Server-Sent Events stream, then the connection closes."""
    handler.send_response(200)
    handler.send_header("Content-Type", "text/event-stream")
    handler.send_header("Cache-Control", "no-cache")
    handler.send_header("Connection", "close")
    handler.end_headers()
    for name, data in events:
        handler.wfile.write(f"event: {name}\ndata: {json.dumps(data)}\n\n".encode())
    handler.wfile.flush()
    handler.close_connection = True


def send_json(handler: http.server.BaseHTTPRequestHandler, body: dict[str, Any]) -> None:
    data = json.dumps(body).encode()
    handler.send_response(200)
    handler.send_header("Content-Type", "application/json")
    handler.send_header("Content-Length", str(len(data)))
    handler.end_headers()
    handler.wfile.write(data)


def _text_of(content: Any) -> str:
    """The text of a message's or a tool result's content: a string, or text blocks."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "\n".join(
            str(block.get("text", ""))
            for block in content
            if isinstance(block, dict) and "text" in block
        )
    return ""


class AnthropicStandIn(_StandIn):
    """The Anthropic Messages API: ``text`` and ``tool_use`` blocks."""

    path = "/v1/messages"

    def read(self, body: dict[str, Any]) -> Exchange:
        texts: list[str] = []
        results: list[Result] = []
        prompts: list[str] = []
        names: dict[str, str] = {}
        for message in body.get("messages", []):
            content = message.get("content")
            blocks = content if isinstance(content, list) else [{"type": "text", "text": content}]
            said = [block["text"] for block in blocks if block.get("type") == "text"]
            returned = [
                Result(
                    names.get(block.get("tool_use_id", ""), ""),
                    _text_of(block.get("content")),
                    bool(block.get("is_error")),
                )
                for block in blocks
                if block.get("type") == "tool_result"
            ]
            for block in blocks:
                if block.get("type") == "tool_use":
                    names[block["id"]] = block["name"]
            texts.extend(said)
            if message.get("role") == "user":
                results = returned
                if said and not returned:
                    prompts = said
        tools = tuple(tool["name"] for tool in body.get("tools", []) if "name" in tool)
        return Exchange(tools, tuple(texts), tuple(results), tuple(prompts))

    def reply(self, handler: http.server.BaseHTTPRequestHandler, body: dict[str, Any]) -> None:
        blocks: list[dict[str, Any]] = []
        for part in self.answer(body):
            if isinstance(part, Say):
                blocks.append({"type": "text", "text": part.text})
            else:
                blocks.append(
                    {
                        "type": "tool_use",
                        "id": self.next_id("toolu"),
                        "name": part.name,
                        "input": part.arguments,
                    }
                )
        stop = "tool_use" if any(block["type"] == "tool_use" for block in blocks) else "end_turn"
        message = {
            "id": self.next_id("msg"),
            "type": "message",
            "role": "assistant",
            "model": body.get("model", "stand-in"),
            "content": blocks,
            "stop_reason": stop,
            "stop_sequence": None,
            "usage": {"input_tokens": 10, "output_tokens": 10},
        }
        if not body.get("stream"):
            send_json(handler, message)
            return
        events: list[tuple[str, dict[str, Any]]] = [
            ("message_start", {"type": "message_start", "message": {**message, "content": []}})
        ]
        for index, block in enumerate(blocks):
            if block["type"] == "text":
                start = {"type": "text", "text": ""}
                delta = {"type": "text_delta", "text": block["text"]}
            else:
                start = {**block, "input": {}}
                delta = {"type": "input_json_delta", "partial_json": json.dumps(block["input"])}
            events += [
                ("content_block_start",
                 {"type": "content_block_start", "index": index, "content_block": start}),
                ("content_block_delta",
                 {"type": "content_block_delta", "index": index, "delta": delta}),
                ("content_block_stop", {"type": "content_block_stop", "index": index}),
            ]  # fmt: skip
        events += [
            ("message_delta",
             {"type": "message_delta", "delta": {"stop_reason": stop, "stop_sequence": None},
              "usage": {"output_tokens": 10}}),
            ("message_stop", {"type": "message_stop"}),
        ]  # fmt: skip
        send_events(handler, events)


class ResponsesStandIn(_StandIn):
    """The OpenAI Responses API: ``message`` and ``function_call`` output items."""

    path = "/v1/responses"

    def __init__(self, script: Script) -> None:
        super().__init__(script)
        #: A tool in a namespace, by the name ``Exchange.tools`` gives it: (namespace, name).
        self.namespaces: dict[str, tuple[str, str]] = {}

    def read(self, body: dict[str, Any]) -> Exchange:
        texts: list[str] = []
        results: list[Result] = []
        prompts: list[str] = []
        names: dict[str, str] = {}
        for item in body.get("input", []):
            kind = item.get("type", "message")
            if kind == "message":
                text = _text_of(item.get("content"))
                texts.append(text)
                if item.get("role") == "user":
                    prompts, results = [text], []
            elif kind == "function_call":
                name = item.get("name", "")
                if item.get("namespace"):
                    name = f"{item['namespace']}__{name}"
                names[item.get("call_id", "")] = name
                results = []
            elif kind == "function_call_output":
                output = item.get("output")
                text = output if isinstance(output, str) else _text_of(output)
                results.append(Result(names.get(item.get("call_id", ""), ""), text, False))
        tools: list[str] = []
        for tool in body.get("tools", []):
            if tool.get("type") == "namespace":
                # A namespace (Codex puts each MCP server's tools in one) holds its tools.
                for inner in tool.get("tools", []):
                    name = f"{tool['name']}__{inner['name']}"
                    self.namespaces[name] = (tool["name"], inner["name"])
                    tools.append(name)
            elif "name" in tool:
                tools.append(tool["name"])
        return Exchange(tuple(tools), tuple(texts), tuple(results), tuple(prompts))

    def reply(self, handler: http.server.BaseHTTPRequestHandler, body: dict[str, Any]) -> None:
        items: list[dict[str, Any]] = []
        for part in self.answer(body):
            if isinstance(part, Say):
                items.append(
                    {
                        "type": "message",
                        "id": self.next_id("msg"),
                        "role": "assistant",
                        "status": "completed",
                        "content": [{"type": "output_text", "text": part.text, "annotations": []}],
                    }
                )
            else:
                call = {
                    "type": "function_call",
                    "id": self.next_id("fc"),
                    "call_id": self.next_id("call"),
                    "name": part.name,
                    "arguments": json.dumps(part.arguments),
                    "status": "completed",
                }
                if part.name in self.namespaces:
                    call["namespace"], call["name"] = self.namespaces[part.name]
                items.append(call)
        response_id = self.next_id("resp")
        response = {"id": response_id, "object": "response", "status": "in_progress", "output": []}
        events: list[tuple[str, dict[str, Any]]] = [
            ("response.created", {"type": "response.created", "response": response})
        ]
        for index, item in enumerate(items):
            events += [
                ("response.output_item.added",
                 {"type": "response.output_item.added", "output_index": index, "item": item}),
                ("response.output_item.done",
                 {"type": "response.output_item.done", "output_index": index, "item": item}),
            ]  # fmt: skip
        usage = {
            "input_tokens": 10,
            "input_tokens_details": {"cached_tokens": 0},
            "output_tokens": 10,
            "output_tokens_details": {"reasoning_tokens": 0},
            "total_tokens": 20,
        }
        completed = {**response, "status": "completed", "output": items, "usage": usage}
        events.append(("response.completed", {"type": "response.completed", "response": completed}))
        send_events(handler, events)


@contextlib.contextmanager
def running(stand_in: _StandIn) -> Iterator[Any]:
    """Serve ``stand_in`` for the ``with`` block."""
    stand_in.start()
    try:
        yield stand_in
    finally:
        stand_in.stop()
