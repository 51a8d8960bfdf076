"""Bad input against a real server: no 5xx, no -32603, only documented answers, each with its
request's id, no rows from a refusal, and every conversation still readable.

Starts a real server process (``ccweb-store serve``) on a fresh database, seeds a few
conversations, a reply request, a run and a prompt form, then sends over HTTP:

1. the corpus kept in ``tests/fuzz_corpus/*.jsonl`` (malformed JSON, wrong JSON-RPC shapes,
   huge strings, invalid UTF-8, wrong types in every tool argument, unknown methods,
   oversized and chunked bodies, wrong content types and Accept headers), each line with the
   class of answer it must get;
2. ``--inputs`` random inputs from a seeded generator: mutated and well-formed requests to
   every method with arguments of every type, random headers, methods and paths;
3. ``--hostile`` hostile inputs (``bench/hostile.py``): valid calls to every host method
   and every tool with one slot holding deep nesting, 64-bit edge and huge numbers, NaN and
   Infinity literals, duplicate keys, lone surrogates, NUL or a string near the body limit.

Every answer is classified (``classify``): a documented class (docs/reliability.md), or
undocumented; a -32603 anywhere in it is counted, and its id must be the request's exactly
(``fuzz_checks.id_problem``). Around every input the rows of every table are counted: an
input that was refused must leave them as they were. After each phase, and after every
``--round-size`` hostile inputs, every conversation is read back (``fuzz_checks.read_back``):
each ``message.list`` and ``reply.list`` page must answer a result. Exits 1 on any 5xx,
-32603, undocumented answer, wrong id, input answered with another class than it names, row
written by a refused call, or failed read; each distinct failure is printed once, with the
smallest body that caused it.

    python bench/fuzz_http.py [--inputs 20000] [--hostile 5000] [--round-size 250]
                              [--seed 1] [--seconds 600] [--no-corpus] [--backend all]
    python bench/fuzz_http.py --write-tool-corpus    # regenerate tool_arguments.jsonl
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import random
import sys
import time
from collections import Counter
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeGuard
from urllib.parse import quote

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import orjson

from bench.fuzz_checks import (
    ANSWER_SECONDS,
    ReadBack,
    error_code,
    id_kind,
    id_problem,
    internal_error,
    parse_raw,
    read_back,
    request_ids,
    shorten,
)
from bench.harness import (
    ROOT,
    Answer,
    Connection,
    Report,
    RpcClient,
    ServerGone,
    ServerProcess,
    command_line,
    finish,
    machine,
    on_each_backend,
    open_engine,
    options_from,
    row_counts,
)
from bench.hostile import FAMILIES, HostileGenerator, targets
from ccweb_store.domain import errors
from ccweb_store.protocol import registry as tools

CORPUS_DIR = ROOT / "tests" / "fuzz_corpus"
TOOL_CORPUS = CORPUS_DIR / "tool_arguments.jsonl"
#: The server's body limit during a fuzz run (the default, 4 MiB).
BODY_LIMIT = 4 * 1024 * 1024
SOURCE = "fuzz-a"

INVALID_JSON_VALUE = "invalid_json_value"
#: Codes of the JSON value rule and of a database file that is gone or a database that does
#: not answer: documented, and accepted whether or not ``errors`` names them.
RULE_AND_HEALTH_CODES = frozenset(
    {INVALID_JSON_VALUE, "database_file_missing", "database_unavailable"}
)
#: The ``data.code`` / ``error.code`` values the docs list: every code ``errors`` names.
DOCUMENTED_CODES = RULE_AND_HEALTH_CODES | frozenset(
    value
    for name, value in vars(errors).items()
    if name.isupper() and isinstance(value, str) and not name.startswith("_")
)
#: Answer classes that are not refusals: the call ran (and may have written rows).
ACCEPTED = frozenset({"ok", "no_content", "batch"})
#: Every documented error answer: (endpoint, HTTP status, JSON-RPC code) → its class. The
#: table in docs/reliability.md lists the same rows (a test compares them).
ERROR_ANSWERS: dict[tuple[str, int, int], str] = {
    ("/rpc", 200, -32700): "parse_error",
    ("/mcp", 400, -32700): "parse_error",
    ("/rpc", 200, -32600): "invalid_request",
    ("/mcp", 200, -32600): "invalid_request",
    ("/mcp", 400, -32600): "bad_request",
    ("/rpc", 200, -32601): "method_not_found",
    ("/mcp", 200, -32601): "method_not_found",
    ("/mcp", 404, -32601): "method_not_found",
    ("/rpc", 200, -32602): "invalid_params",
    ("/mcp", 200, -32602): "invalid_params",
    ("/mcp", 400, -32602): "invalid_params",
    ("/mcp", 400, -32020): "header_mismatch",
    ("/mcp", 400, -32022): "unsupported_version",
    ("/rpc", 401, -32001): "unauthorized",
    ("/mcp", 401, -32001): "unauthorized",
    ("/mcp", 403, -32003): "credential_mismatch",
    ("/rpc", 403, -32600): "forbidden",
    ("/mcp", 403, -32600): "forbidden",
    ("/rpc", 405, -32600): "method_not_allowed",
    ("/mcp", 405, -32600): "method_not_allowed",
    ("/mcp", 406, -32600): "not_acceptable",
    ("/rpc", 421, -32600): "host_not_allowed",
    ("/mcp", 421, -32600): "host_not_allowed",
    ("/rpc", 429, -32001): "too_many_attempts",
    ("/mcp", 429, -32001): "too_many_attempts",
    ("/rpc", 413, -32600): "too_large",
    ("/mcp", 413, -32600): "too_large",
    ("/rpc", 415, -32600): "unsupported_media_type",
    ("/mcp", 415, -32600): "unsupported_media_type",
}
#: A domain error: ``-32000`` with ``data.code`` on /rpc, a tool result with ``isError`` on /mcp.
DOMAIN_ERROR = -32000
INTERNAL_ERROR = -32603
INVALID_PARAMS = -32602
#: An error above whose ``data.code`` is ``invalid_json_value`` (with ``data.path``): a value
#: that breaks the JSON rule (-32602), or a message nested too deep (-32600).
JSON_RULE_ANSWERS = {-32602: INVALID_JSON_VALUE, -32600: "too_deep"}


# --- inputs ---------------------------------------------------------------------------------


@dataclass
class FuzzInput:
    """One HTTP request to send, and the answer classes it may get (empty: any documented)."""

    name: str
    path: str
    body: bytes = b""
    method: str = "POST"
    headers: dict[str, str] = field(default_factory=dict)
    chunked: bool = False
    expect: tuple[str, ...] = ()
    #: What a distinct failure is grouped by (empty: the name).
    signature: str = ""
    #: The ids the answer may carry (``fuzz_checks.id_problem``); None: read from the body.
    ids: tuple[str, ...] | None = None


DEFAULT_HEADERS = {"Content-Type": "application/json", "Accept": "application/json"}


def corpus_inputs(entry: Mapping[str, Any]) -> list[FuzzInput]:
    """The requests of one corpus line (one per path it names).

    Keys: ``name``; ``path`` (one or a list); ``method`` (POST); ``headers`` laid over
    ``DEFAULT_HEADERS`` (a null value removes one); the body as ``json`` (any value, written
    compactly), ``text`` (UTF-8), ``hex`` (raw bytes) or ``repeat`` (``{head, fill, times,
    tail}``); ``chunked``; ``expect`` (a class or a list of classes).
    """
    headers = {**DEFAULT_HEADERS, **entry.get("headers", {})}
    headers = {name: value for name, value in headers.items() if value is not None}
    if "json" in entry:
        body = json.dumps(entry["json"], separators=(",", ":"), ensure_ascii=False).encode()
    elif "text" in entry:
        body = entry["text"].encode()
    elif "hex" in entry:
        body = bytes.fromhex(entry["hex"])
    elif "repeat" in entry:
        spec = entry["repeat"]
        body = (spec.get("head", "") + spec["fill"] * spec["times"] + spec.get("tail", "")).encode()
    else:
        body = b""
    expect = entry.get("expect", ())
    paths = entry["path"] if isinstance(entry["path"], list) else [entry["path"]]
    return [
        FuzzInput(
            name=f"{entry['name']} {path[:80]}",
            path=quote(path, safe="/?&=%"),
            body=body,
            method=entry.get("method", "POST"),
            headers=headers,
            chunked=bool(entry.get("chunked")),
            expect=(expect,) if isinstance(expect, str) else tuple(expect),
        )
        for path in paths
    ]


def load_corpus(directory: Path = CORPUS_DIR) -> list[FuzzInput]:
    """Every request of every ``*.jsonl`` corpus file, in file and line order."""
    inputs: list[FuzzInput] = []
    for path in sorted(directory.glob("*.jsonl")):
        for number, line in enumerate(path.read_text().splitlines(), 1):
            if line.strip() and not line.lstrip().startswith("//"):
                try:
                    inputs += corpus_inputs(json.loads(line))
                except (ValueError, KeyError) as exc:
                    raise SystemExit(f"{path}:{number}: not a corpus line: {exc}") from exc
    return inputs


#: A value of every JSON type but the one a schema property wants (null is "absent").
WRONG_VALUES: dict[str, list[Any]] = {
    "string": [7, 1.5, True, ["x"], {"x": 1}],
    "integer": ["7", 1.5, True, [7], {"n": 7}],
    "number": ["7", True, [7], {"n": 7}],
    "boolean": ["true", 1, 0, ["x"], {"b": True}],
    "array": ["x", 7, True, {"x": 1}],
    "object": ["x", 7, True, ["x"]],
}


def tool_argument_corpus() -> list[dict[str, Any]]:
    """Corpus lines: every argument of every tool (the alias too) given each wrong JSON type,
    over ``/mcp`` (a tool error) and ``/rpc`` ``tools.call`` (a -32000 error)."""
    lines: list[dict[str, Any]] = []
    for tool in tools.TOOLS:
        for key, schema in tool.input_schema.get("properties", {}).items():
            for value in WRONG_VALUES[schema["type"]]:
                name = f"{tool.name}.{key} = {json.dumps(value)}"
                lines.append(
                    {
                        "name": name,
                        "path": f"/mcp?sourceSessionId={SOURCE}",
                        "json": _tools_call(tool.name, {key: value}),
                        "expect": "error:invalid_arguments",
                    }
                )
                lines.append(
                    {
                        "name": name,
                        "path": "/rpc",
                        "json": {
                            "jsonrpc": "2.0",
                            "id": 1,
                            "method": "tools.call",
                            "params": {"tool": tool.name, "args": {key: value}},
                        },
                        "expect": "error:invalid_arguments",
                    }
                )
        for item_key in ("id", "question", "options", "allowFreeText"):
            if tool.name != "ccweb_prompt_user":
                break
            lines.append(
                {
                    "name": f"{tool.name}.questions[0].{item_key} of a wrong type",
                    "path": f"/mcp?sourceSessionId={SOURCE}",
                    "json": _tools_call(
                        tool.name,
                        {"questions": [{"id": "q", "question": "Why?", item_key: 7}]},
                    ),
                    "expect": "error:invalid_arguments",
                }
            )
    return lines


def _tools_call(name: str, arguments: Any) -> dict[str, Any]:
    return {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "tools/call",
        "params": {"name": name, "arguments": arguments},
    }


def write_tool_corpus(path: Path = TOOL_CORPUS) -> int:
    lines = tool_argument_corpus()
    path.write_text("".join(json.dumps(line, ensure_ascii=False) + "\n" for line in lines))
    return len(lines)


# --- random inputs --------------------------------------------------------------------------

#: The parameters each host method reads (and the tool-calling ones), for the generator.
RPC_PARAMS: dict[str, tuple[str, ...]] = {
    "session.create": ("id", "title", "agent", "cwd"),
    "session.get": ("id",),
    "session.list": ("limit", "cursor"),
    "session.archive": ("id", "archived"),
    "session.update": ("id", "agentSessionId"),
    "message.append": ("sessionId", "role", "content", "metadata", "id"),
    "message.list": ("sessionId", "afterSeq", "limit"),
    "message.recent": ("sessionId", "beforeSeq", "limit", "role"),
    "run.start": ("sessionId", "kind", "runtimeText", "workerId"),
    "run.enqueue": ("sessionId", "kind", "runtimeText"),
    "run.claim": ("workerId", "leaseSeconds", "kinds"),
    "run.heartbeat": ("runId", "workerId", "leaseSeconds"),
    "run.complete": ("runId", "workerId", "status", "output", "error", "agentSessionId"),
    "run.list": ("sessionId", "status", "limit"),
    "run.requeue": ("runId", "workerId"),
    "run.cancel": ("runId", "reason", "force"),
    "reply.list": ("status", "sessionId", "limit", "cursor"),
    "events.list": ("after", "limit", "types", "conversation"),
    "reply.get": ("requestId",),
    "reply.retry": ("requestId",),
    "reply.fail": ("requestId", "reason"),
    "reply.expire": ("olderThanSeconds",),
    "prompt.respond": ("promptId", "answers"),
    "credential.mint": ("sessionId", "expiresInSeconds", "label", "hopCount", "replaceLabel"),
    "credential.list": ("sessionId", "includeInactive", "limit"),
    "credential.revoke": ("credentialId",),
    "operator.conversations": ("includeArchived", "query", "limit"),
    "operator.conversation": ("id",),
    "operator.pendingReplies": ("status", "sessionId", "olderThanSeconds", "limit"),
    "operator.replyStory": ("requestId",),
    "operator.doctor": (),
    "tools.list": (),
    "tools.dynamic": (),
    "tools.composerItems": (),
    "tools.call": ("tool", "name", "args", "arguments", "sourceSessionId", "sourceHopCount"),
    "tools.callDynamic": ("name", "arguments", "sourceSessionId", "sourceHopCount"),
}
MCP_METHODS = (
    "initialize",
    "ping",
    "tools/list",
    "tools/call",
    "notifications/initialized",
    "server/discover",
)
MODERN = "2026-07-28"
MODERN_VERSION_KEY = "io.modelcontextprotocol/protocolVersion"
MODERN_CAPABILITIES_KEY = "io.modelcontextprotocol/clientCapabilities"
#: Mcp-Name values that do not match the tool: another tool, bad base64, base64 of a name.
MODERN_NAMES = ("ccweb_prompt_user", "=?base64?!!!?=", "=?base64?Y2N3ZWJfc2VuZF9tZXNzYWdl?=")
CONTENT_TYPES = (
    "application/json",
    "application/json; charset=utf-8",
    "text/plain",
    "application/x-www-form-urlencoded",
    "multipart/form-data; boundary=x",
    "application/xml",
    "",
    "json",
    None,
)
ACCEPTS = (
    None,
    "application/json",
    "text/event-stream",
    "application/json, text/event-stream",
    "text/html",
    "*/*",
    "",
    "image/png;q=0.5",
)
ORIGINS = (None, "http://localhost:3000", "http://evil.example", "null", "not a url", "file://")
QUERIES = (
    "",
    f"?sourceSessionId={SOURCE}",
    "?sourceConversationId=fuzz-b",
    f"?sourceSessionId={SOURCE}&sourceHopCount=3",
    f"?sourceSessionId={SOURCE}&sourceHopCount=-1",
    f"?sourceSessionId={SOURCE}&sourceHopCount=" + "9" * 5000,
    "?sourceSessionId=nobody",
    "?sourceSessionId=%00%ff",
    "?sourceSessionId=" + "a" * 300,
)


def credential_queries(token: str) -> tuple[str, ...]:
    """Query strings with a conversation credential: the real one, alone or claiming another
    conversation, and altered, truncated or made up ones."""
    altered = token[:-2] + ("AA" if not token.endswith("AA") else "BB")
    return (
        f"?credential={token}",
        f"?credential={token}&sourceHopCount=2",
        f"?credential={token}&sourceSessionId=fuzz-b",
        f"?credential={altered}",
        f"?credential={token[:20]}",
        "?credential=ccw1.fuzz-a.cred_x.9999999999.0.AAAA",
        "?credential=",
    )


INVALID_UTF8 = (b"\xff", b"\xc3\x28", b"\xed\xa0\x80", b"\xf4\x90\x80\x80", b"\xc0\xaf", b"\x00")


def _header_value(value: object) -> TypeGuard[str]:
    """Whether ``value`` can be sent as an HTTP header value (printable ASCII): a request
    that breaks HTTP itself is uvicorn's to refuse (a plain 400), not the service's."""
    return isinstance(value, str) and value.isascii() and value.isprintable()


class InputGenerator:
    """Seeded random requests: well-formed calls with random arguments, and mutations."""

    def __init__(self, seed: int, known_ids: Mapping[str, list[str]]) -> None:
        self.rng = random.Random(seed)
        self.known = known_ids
        self.queries = QUERIES + tuple(
            query
            for token in known_ids.get("credentialtoken", [])
            for query in credential_queries(token)
        )

    def inputs(self, count: int) -> Iterator[FuzzInput]:
        for number in range(count):
            yield self.one(number)

    def one(self, number: int) -> FuzzInput:
        rng = self.rng
        to_mcp = rng.random() < 0.5
        path = "/mcp" + rng.choice(self.queries) if to_mcp else "/rpc"
        modern = to_mcp and rng.random() < 0.3  # MCP 2026-07-28: envelope and routing headers
        message = self.message(to_mcp)
        if modern:
            self.add_envelope(message)
        body = json.dumps(message, ensure_ascii=rng.random() < 0.5).encode()
        roll = rng.random()
        kind = "call"
        if roll < 0.15:
            body, kind = self.mutate(body), "mutated"
        elif roll < 0.2:
            body, kind = bytes(rng.getrandbits(8) for _ in range(rng.randint(0, 64))), "junk"
        headers = self.headers(to_mcp)
        if modern:
            headers.update(self.routing_headers(message))
        method = "POST" if rng.random() < 0.95 else rng.choice(["GET", "PUT", "DELETE", "PATCH"])
        return FuzzInput(
            name=f"random #{number} ({kind})",
            path=path,
            body=body,
            method=method,
            headers=headers,
            chunked=rng.random() < 0.1,
        )

    def headers(self, to_mcp: bool) -> dict[str, str]:
        rng = self.rng
        headers: dict[str, str] = {}
        content_type = "application/json" if rng.random() < 0.8 else rng.choice(CONTENT_TYPES)
        if content_type is not None:
            headers["Content-Type"] = content_type
        accept = "application/json" if rng.random() < 0.8 else rng.choice(ACCEPTS)
        if accept is not None:
            headers["Accept"] = accept
        if rng.random() < 0.05:
            origin = rng.choice(ORIGINS)
            if origin is not None:
                headers["Origin"] = origin
        if to_mcp and rng.random() < 0.05:
            headers["MCP-Protocol-Version"] = rng.choice(["2025-06-18", "1999-01-01", "x" * 50])
        return headers

    def add_envelope(self, message: Any) -> None:
        """The 2026-07-28 ``params._meta``: mostly whole, sometimes broken."""
        if not isinstance(message, dict) or not isinstance(message.get("params"), dict):
            return
        rng = self.rng
        meta: dict[str, Any] = {
            MODERN_VERSION_KEY: MODERN if rng.random() < 0.9 else rng.choice(["2025-06-18", 7]),
            MODERN_CAPABILITIES_KEY: {} if rng.random() < 0.9 else self.value(depth=1),
        }
        if rng.random() < 0.1:
            meta.pop(rng.choice(list(meta)))
        message["params"]["_meta"] = meta if rng.random() < 0.95 else self.value(depth=1)

    def routing_headers(self, message: Any) -> dict[str, str]:
        """``MCP-Protocol-Version``, ``Mcp-Method`` and ``Mcp-Name``: mostly right."""
        rng = self.rng
        method = message.get("method") if isinstance(message, dict) else None
        params = message.get("params") if isinstance(message, dict) else None
        headers = {"MCP-Protocol-Version": MODERN if rng.random() < 0.9 else "2025-11-25"}
        if _header_value(method) and rng.random() < 0.9:
            headers["Mcp-Method"] = method if rng.random() < 0.9 else "tools/list"
        name = params.get("name") if isinstance(params, dict) else None
        if _header_value(name) and rng.random() < 0.9:
            headers["Mcp-Name"] = name if rng.random() < 0.8 else rng.choice(MODERN_NAMES)
        return headers

    def message(self, to_mcp: bool) -> Any:
        rng = self.rng
        if rng.random() < 0.05:
            return [self.message(to_mcp) for _ in range(rng.randint(0, 4))]
        if to_mcp:
            method = rng.choice([*MCP_METHODS, "tools/call", "tools/call", "resources/list"])
            params: Any = self.tool_params() if method == "tools/call" else self.params(())
        else:
            method = rng.choice([*RPC_PARAMS, "no.such.method"])
            names = RPC_PARAMS.get(method, ())
            if method.startswith("tools.call") and rng.random() < 0.7:
                params = self.tool_params(rpc_style=True)
            else:
                params = self.params(names)
        message: dict[str, Any] = {"jsonrpc": "2.0", "id": rng.randint(1, 10**6), "method": method}
        message["params"] = params
        if rng.random() < 0.1:
            self.break_envelope(message)
        return message

    def break_envelope(self, message: dict[str, Any]) -> None:
        rng = self.rng
        key = rng.choice(["jsonrpc", "id", "method", "params"])
        if rng.random() < 0.3:
            message.pop(key, None)
        else:
            message[key] = self.value(depth=1)

    def tool_params(self, *, rpc_style: bool = False) -> dict[str, Any]:
        rng = self.rng
        tool = rng.choice(tools.TOOLS)
        name = tool.name if rng.random() < 0.95 else rng.choice(["", "ccweb_nope", 7])
        arguments = self.params(tuple(tool.input_schema.get("properties", {})))
        if tool.name == "ccweb_prompt_user" and isinstance(arguments, dict) and rng.random() < 0.6:
            arguments["questions"] = [
                self.params(("id", "question", "options", "allowFreeText"))
                for _ in range(rng.randint(0, 12))
            ]
        if not rpc_style:
            return {"name": name, "arguments": arguments}
        params: dict[str, Any] = {"tool": name, "args": arguments}
        if rng.random() < 0.9:
            params["sourceSessionId"] = self.string()
        if rng.random() < 0.3:
            params["sourceHopCount"] = self.value(depth=1)
        return params

    def params(self, names: tuple[str, ...]) -> Any:
        rng = self.rng
        if rng.random() < 0.05:
            return self.value(depth=1)
        params: dict[str, Any] = {}
        for name in names:
            if rng.random() < 0.7:
                params[name] = self.value_for(name)
        if rng.random() < 0.1:
            params[self.string()] = self.value(depth=1)
        return params

    def value_for(self, name: str) -> Any:
        """Mostly a plausible value for a parameter called ``name``, sometimes anything."""
        rng = self.rng
        if rng.random() < 0.3:
            return self.value(depth=2)
        lowered = name.lower()
        for key, pool in self.known.items():
            if key in lowered and pool and rng.random() < 0.7:
                return rng.choice(pool)
        if lowered in ("replymode",):
            return rng.choice(["one_way", "return_and_continue", "both", ""])
        if lowered in ("status", "kind", "role"):
            return rng.choice(
                ["completed", "failed", "queued", "user", "assistant", "user_turn", "ready", "x"]
            )
        if lowered in ("limit", "aftersq", "afterseq", "leaseseconds", "maxchars", "hopcount"):
            return self.number()
        if "seconds" in lowered:
            return self.number()
        return self.string()

    def number(self) -> Any:
        return self.rng.choice(
            [0, 1, -1, 7, 50, 2**31, 2**63 - 1, -(2**63), 2**64 - 1, 10**30, 0.5, -0.0, 1e308]
        )

    def string(self) -> str:
        rng = self.rng
        pool = [
            "",
            " ",
            SOURCE,
            "fuzz-b",
            "fuzz-c",
            "nobody",
            "a" * 129,
            "\x00",
            "nul\x00inside",
            "😀 emoji",
            "\u202eright-to-left",
            "'; DROP TABLE sessions; --",
            "%s%n",
            "../../etc/passwd",
            "x" * rng.choice([1000, 70_000]),
        ]
        return rng.choice(pool)

    def value(self, depth: int) -> Any:
        rng = self.rng
        kinds = ["null", "bool", "number", "string"] + (["list", "object"] if depth > 0 else [])
        kind = rng.choice(kinds)
        if kind == "null":
            return None
        if kind == "bool":
            return rng.random() < 0.5
        if kind == "number":
            return self.number()
        if kind == "string":
            return self.string()
        if kind == "list":
            return [self.value(depth - 1) for _ in range(rng.randint(0, 3))]
        return {self.string()[:20]: self.value(depth - 1) for _ in range(rng.randint(0, 3))}

    def mutate(self, body: bytes) -> bytes:
        rng = self.rng
        data = bytearray(body)
        for _ in range(rng.randint(1, 4)):
            choice = rng.random()
            position = rng.randint(0, len(data))
            if choice < 0.3 and data:
                data[min(position, len(data) - 1)] = rng.getrandbits(8)
            elif choice < 0.55:
                data[position:position] = rng.choice(INVALID_UTF8)
            elif choice < 0.75:
                del data[position:]
            else:
                data[position:position] = rng.choice([b"{", b"}", b"[", b'"', b",", b"\\"])
        return bytes(data)


# --- classifying answers --------------------------------------------------------------------


def classify(path: str, answer: Answer) -> str:
    """The documented class of an answer (docs/reliability.md), or ``undocumented: …``."""
    endpoint = "/mcp" if path.startswith("/mcp") else "/rpc"
    status = answer.status
    if status >= 500:
        return f"undocumented: HTTP {status}"
    if status in (202, 204):
        expected = 202 if endpoint == "/mcp" else 204
        return "no_content" if status == expected and not answer.body else _odd(answer)
    try:
        body = _json_body(answer)
    except ValueError:
        return _odd(answer)
    if isinstance(body, list):
        if status != 200 or not body:
            return _odd(answer)
        inner = [_classify_message(endpoint, status, item) for item in body]
        bad = [item for item in inner if item.startswith("undocumented")]
        return bad[0] if bad else "batch"
    return _classify_message(endpoint, status, body)


def _json_body(answer: Answer) -> Any:
    return orjson.loads(_json_text(answer))


def _json_text(answer: Answer) -> str | bytes:
    """The JSON text of an answer: its body, or the data of its one SSE message."""
    content_type = answer.headers.get("content-type", "")
    if content_type.startswith("text/event-stream"):
        text = answer.body.decode()
        data = [line[6:] for line in text.splitlines() if line.startswith("data: ")]
        if len(data) != 1 or not text.startswith("event: message\n"):
            raise ValueError("not one SSE message")
        return data[0]
    if not content_type.startswith("application/json"):
        raise ValueError(f"content type {content_type!r}")
    return answer.body


def _is_response(body: Any, endpoint: str) -> bool:
    """A JSON-RPC 2.0 response object: ``jsonrpc``, ``id`` and one of result or error. An
    MCP 2026-07-28 error answer leaves the id out when it has none to answer."""
    if not isinstance(body, dict) or body.get("jsonrpc") != "2.0":
        return False
    if ("result" in body) == ("error" in body):
        return False
    if "error" not in body:
        return "id" in body
    error = body["error"]
    return (
        ("id" in body or endpoint == "/mcp")
        and isinstance(error, dict)
        and isinstance(error.get("code"), int)
        and isinstance(error.get("message"), str)
    )


def _classify_message(endpoint: str, status: int, body: Any) -> str:
    if not _is_response(body, endpoint):
        return f"undocumented: HTTP {status}, not a JSON-RPC response: {str(body)[:200]}"
    if "result" in body:
        result = body["result"]
        if status != 200:
            return f"undocumented: a result with HTTP {status}"
        if endpoint == "/mcp" and isinstance(result, dict) and result.get("isError"):
            try:
                code = result["structuredContent"]["error"]["code"]
            except (KeyError, TypeError):
                return f"undocumented: a tool error without a code: {str(result)[:200]}"
            return f"error:{code}" if code in DOCUMENTED_CODES else f"undocumented: code {code}"
        return "ok"
    error = body["error"]
    code = error["code"]
    data = error.get("data")
    domain = data.get("code") if isinstance(data, dict) else None
    if code == DOMAIN_ERROR and endpoint == "/rpc" and status == 200:
        if domain in DOCUMENTED_CODES:
            return f"error:{domain}"
        return f"undocumented: -32000 with data {data!r}"
    known = ERROR_ANSWERS.get((endpoint, status, code))
    if known is None:
        return f"undocumented: JSON-RPC error {code} with HTTP {status} ({error['message'][:120]})"
    if domain == INVALID_JSON_VALUE and code in JSON_RULE_ANSWERS:
        # A value refused by the rule names its path; a body too deep to read has none.
        if code == INVALID_PARAMS and not isinstance(data.get("path"), str | list):
            return f"undocumented: {INVALID_JSON_VALUE} without data.path: {str(data)[:160]}"
        return JSON_RULE_ANSWERS[code]
    return known


def _odd(answer: Answer) -> str:
    return (
        f"undocumented: HTTP {answer.status} {answer.headers.get('content-type', '')!r}"
        f" {answer.body[:160]!r}"
    )


# --- running --------------------------------------------------------------------------------

#: The lists of ``Outcome`` that hold one line per failed input.
FAILURE_LISTS = (
    "server_errors",
    "internal_errors",
    "id_mismatches",
    "undocumented",
    "unexpected",
    "refusals_that_wrote",
    "connection_failures",
    "read_back_failures",
)


@dataclass
class Finding:
    """One distinct failure: how often it happened, and the smallest input that caused it."""

    what: str
    signature: str
    detail: str
    name: str
    body: bytes
    count: int = 1

    def render(self) -> str:
        times = f" (x{self.count:,})" if self.count > 1 else ""
        return (
            f"{self.what}{times}: {self.signature}: {self.detail[:300]}"
            f"\n      input: {self.name[:200]}"
            f"\n      body: {shorten(self.body.decode(errors='replace'))}"
        )


@dataclass
class Outcome:
    """What a batch of inputs got."""

    tried: int = 0
    classes: Counter[str] = field(default_factory=Counter)
    server_errors: list[str] = field(default_factory=list)
    internal_errors: list[str] = field(default_factory=list)
    id_mismatches: list[str] = field(default_factory=list)
    undocumented: list[str] = field(default_factory=list)
    unexpected: list[str] = field(default_factory=list)
    rows_written_by_refusals: int = 0
    refusals_that_wrote: list[str] = field(default_factory=list)
    connection_failures: list[str] = field(default_factory=list)
    read_back_rounds: int = 0
    read_back_calls: int = 0
    read_back_failures: list[str] = field(default_factory=list)
    stopped_early: bool = False
    #: Each distinct failure once, by (what, signature).
    findings: dict[tuple[str, str], Finding] = field(default_factory=dict)

    def add(self, other: Outcome) -> None:
        self.tried += other.tried
        self.classes.update(other.classes)
        for name in FAILURE_LISTS:
            getattr(self, name).extend(getattr(other, name))
        self.rows_written_by_refusals += other.rows_written_by_refusals
        self.read_back_rounds += other.read_back_rounds
        self.read_back_calls += other.read_back_calls
        self.stopped_early |= other.stopped_early
        for finding in other.findings.values():
            self.note(finding)

    def fail(
        self, listed: str, what: str, item: FuzzInput, detail: str, signature: str = ""
    ) -> None:
        """Record a failed input in the list ``listed`` and among the findings, grouped by
        ``signature`` (by default the input's)."""
        getattr(self, listed).append(f"{item.name}: {detail}")
        signature = signature or item.signature or item.name
        self.note(Finding(what, signature, detail, item.name, item.body))

    def note(self, finding: Finding) -> None:
        """Count a finding once per (what, signature), keeping the smallest body."""
        key = (finding.what, finding.signature)
        known = self.findings.get(key)
        if known is None:
            self.findings[key] = dataclasses.replace(finding)
            return
        known.count += finding.count
        if finding.body and (not known.body or len(finding.body) < len(known.body)):
            known.detail, known.name, known.body = finding.detail, finding.name, finding.body


def _raw_message(answer: Answer) -> Any:
    """The answer's JSON with its numbers as written (``fuzz_checks.parse_raw``), or None."""
    try:
        return parse_raw(_json_text(answer))
    except (ValueError, RecursionError):
        return None


def check_answer(outcome: Outcome, item: FuzzInput, answer: Answer) -> str:
    """Classify an answer, record what is wrong with it (status, -32603, class, id), and
    return its class."""
    kind = classify(item.path, answer)
    outcome.classes[kind.split(":", 1)[0] if kind.startswith("undoc") else kind] += 1
    message = _raw_message(answer)
    if answer.status >= 500:
        outcome.fail("server_errors", "5xx", item, kind)
    elif internal_error(message, answer.body):
        outcome.fail("internal_errors", "-32603", item, kind)
    elif kind.startswith("undocumented"):
        outcome.fail("undocumented", "undocumented", item, kind)
    elif item.expect and kind not in item.expect:
        expected = " or ".join(item.expect)
        outcome.fail("unexpected", "another class", item, f"got {kind}, expected {expected}")
    ids = item.ids if item.ids is not None else request_ids(item.body)
    if ids is not None and isinstance(message, dict):
        problem = id_problem(ids, message, answer.status, error_code(message), kind)
        if problem:  # the same for every method: grouped by the kind of id only
            family = item.signature.rpartition(" = ")[2]
            grouped = f"an id of the family {family}" if item.signature else id_kind(ids)
            outcome.fail("id_mismatches", "id", item, problem, grouped)
    return kind


async def send_inputs(
    port: int,
    database_url: str,
    inputs: Iterable[FuzzInput],
    deadline: float,
    round_size: int = 0,
    watched: Iterable[str] = (),
) -> Outcome:
    """Send each input on one connection (reopened when the server closes it), check the
    answer (``check_answer``) and count every table's rows around each one; after an input
    that wrote rows, read the newest messages of the conversations it names (``Poison``:
    the seeded ones, ``watched``, and those each read-back lists). After every
    ``round_size`` inputs (0: none) and after the last, read every conversation back
    (``read_back_round``)."""
    outcome = Outcome()
    connection = Connection(port)
    poison = Poison(ReadBack(Connection(port)), dict.fromkeys([*SEEDED, *watched], 0))
    recent: list[tuple[FuzzInput, bytes]] = []  # since the last read-back, with the answer
    async with open_engine(database_url) as engine:
        before = await row_counts(engine)
        for item in inputs:
            if time.monotonic() >= deadline:
                outcome.stopped_early = True
                break
            outcome.tried += 1
            try:
                answer = await asyncio.wait_for(
                    connection.request(
                        item.method, item.path, item.body, item.headers, chunked=item.chunked
                    ),
                    ANSWER_SECONDS,
                )
            except (ServerGone, TimeoutError) as exc:
                await connection.close()
                detail = str(exc) or f"no answer within {ANSWER_SECONDS:g} s"
                outcome.fail("connection_failures", "no answer", item, detail)
                continue
            kind = check_answer(outcome, item, answer)
            recent.append((_kept(item), answer.body[:4096]))
            after = await row_counts(engine)
            if after != before:
                await poison.check(outcome, item, answer.body[:4096])
            if kind not in ACCEPTED and after != before:
                written = sum(after.values()) - sum(before.values())
                outcome.rows_written_by_refusals += abs(written) or 1
                detail = f"{kind}: {before} -> {after}"
                outcome.fail("refusals_that_wrote", "a refusal wrote rows", item, detail)
            before = after
            if round_size and outcome.tried % round_size == 0:
                await read_back_round(port, outcome, recent, poison)
                recent = []
    await read_back_round(port, outcome, recent, poison)
    await connection.close()
    await poison.reads.connection.close()
    outcome.read_back_calls += poison.reads.calls
    return outcome


@dataclass
class Poison:
    """The conversations watched for poison rows between read-backs: the newest seq read of
    each, and the input after which each one's read failed."""

    reads: ReadBack
    seen: dict[str, int]
    culprits: dict[str, FuzzInput] = field(default_factory=dict)

    async def check(self, outcome: Outcome, item: FuzzInput, head: bytes) -> None:
        """Read the newest messages of each watched conversation that ``item`` (which wrote
        rows) names in its body or its answer's ``head``; one that fails is poisoned by it."""
        text = item.body[:4096] + item.body[-4096:] + head
        for conversation, newest in list(self.seen.items()):
            if conversation in self.culprits or json.dumps(conversation).encode() not in text:
                continue
            failed = len(self.reads.failures)
            read = await self.reads.messages(conversation, newest)
            if read is not None:
                self.seen[conversation] = read
                continue
            self.culprits[conversation] = item
            method, _, why = self.reads.failures[failed]
            detail = f"{method} of {conversation} fails after it: {why}"
            signature = item.signature or item.name
            outcome.note(Finding("poison row", signature, detail, item.name, item.body))


def _kept(item: FuzzInput, limit: int = 2**18) -> FuzzInput:
    """The input as kept until the next read-back: a body over ``limit`` bytes cut to its
    start and end, so that a round of huge inputs does not fill the memory."""
    if len(item.body) <= limit:
        return item
    cut = item.body[: limit // 2] + item.body[-limit // 2 :]
    return dataclasses.replace(item, name=f"{item.name} (body cut here)", body=cut)


async def read_back_round(
    port: int, outcome: Outcome, recent: list[tuple[FuzzInput, bytes]], poison: Poison
) -> None:
    """``read_back``; a read that fails is a poison row. One whose input ``poison`` found is
    counted; another is recorded with the smallest input, among those sent since the last
    round (answered or refused), that named its conversation in its body or its answer."""
    done, conversations = await read_back(port, SEEDED)
    outcome.read_back_rounds += 1
    outcome.read_back_calls += done.calls
    for conversation in conversations:
        poison.seen.setdefault(conversation, 0)
    for method, whose, why in done.failures:
        outcome.read_back_failures.append(f"{method} of {whose}: {why}")
        if whose in poison.culprits:
            continue
        named = json.dumps(whose).encode()
        suspects = [
            item for item, head in recent if whose == "*" or named in item.body or named in head
        ]
        suspect = min(suspects, key=lambda item: len(item.body), default=None)
        detail = f"{whose}; {len(suspects)} inputs since the last read-back named it"
        name = suspect.name if suspect else "none since the last read-back named it"
        body = suspect.body if suspect else b""
        outcome.note(Finding("read-back", f"{method}: {why[:100]}", detail, name, body))


SEEDED = (SOURCE, "fuzz-b", "fuzz-c")
#: The conversations hostile writes go to (``hostile.host_params``).
HOSTILE_TARGETS = tuple(f"hostile-target-{number}" for number in range(1, 9))


async def seed(port: int) -> dict[str, list[str]]:
    """Conversations, a reply request, a queued run and a prompt form for inputs to hit."""
    client = RpcClient(port)
    for conversation in (SOURCE, "fuzz-b", "fuzz-c"):
        await client.rpc("session.create", {"id": conversation, "title": conversation})
    sent = await client.tool(
        SOURCE,
        "ccweb_send_message",
        {"targetConversationId": "fuzz-b", "content": "hello", "replyMode": "return_and_continue"},
    )
    prompt = await client.tool(
        "fuzz-c", "ccweb_prompt_user", {"questions": [{"id": "q", "question": "Ready?"}]}
    )
    minted = await client.rpc("credential.mint", {"sessionId": SOURCE, "label": "fuzz"})
    await client.close()
    payload = sent["structuredContent"]
    return {
        "credentialtoken": [minted["token"]],
        "credentialid": [minted["credential"]["id"]],
        "session": [SOURCE, "fuzz-b", "fuzz-c"],
        "conversation": [SOURCE, "fuzz-b", "fuzz-c"],
        "runid": [payload["runId"]],
        "requestid": [payload["requestId"]],
        "promptid": [prompt["structuredContent"]["promptId"]],
        "id": [payload["messageId"], SOURCE],
    }


@dataclass
class FuzzOptions:
    inputs: int = 20_000
    hostile: int = 5_000
    round_size: int = 250
    seconds: float = 600.0
    seed: int = 1
    corpus: bool = True


def hostile_inputs(options: FuzzOptions, known: Mapping[str, list[str]]) -> Iterator[FuzzInput]:
    """``options.hostile`` requests of ``bench/hostile.py``, seeded by ``options.seed``."""
    generator = HostileGenerator(options.seed, known, BODY_LIMIT, RPC_PARAMS)
    for request in generator.inputs(options.hostile):
        yield FuzzInput(
            name=request.name,
            path=request.path,
            body=request.body,
            headers=dict(DEFAULT_HEADERS),
            expect=request.expect,
            signature=request.signature,
            ids=request.ids,
        )


async def fuzz_server(
    port: int, url: str, options: FuzzOptions
) -> tuple[Outcome, Outcome, Outcome]:
    """Seed the database behind a running server, then send the corpus, the random inputs
    and the hostile ones, reading every conversation back after each phase."""
    known = await seed(port)
    deadline = time.monotonic() + options.seconds
    corpus = Outcome()
    if options.corpus:
        corpus = await send_inputs(port, url, load_corpus(), deadline)
    generator = InputGenerator(options.seed, known)
    generated = await send_inputs(port, url, generator.inputs(options.inputs), deadline)
    hostile = Outcome()
    if options.hostile:
        client = RpcClient(port)
        for conversation in HOSTILE_TARGETS:
            await client.rpc("session.create", {"id": conversation, "title": conversation})
        await client.close()
        inputs = hostile_inputs(options, {**known, "targets": list(HOSTILE_TARGETS)})
        hostile = await send_inputs(
            port, url, inputs, deadline, options.round_size, HOSTILE_TARGETS
        )
    return corpus, generated, hostile


def fuzz_report(
    title: str, corpus: Outcome, generated: Outcome, hostile: Outcome, log: str
) -> Report:
    total = Outcome()
    for phase in (corpus, generated, hostile):
        total.add(phase)
    tracebacks = log.count("Traceback (most recent call last)")
    report = Report(title)
    report.add(
        "inputs tried (corpus + random + hostile)",
        f"{total.tried:,} ({corpus.tried:,} + {generated.tried:,} + {hostile.tried:,})",
    )
    refused = sum(count for name, count in total.classes.items() if name not in ACCEPTED)
    report.add("  of them refused (rows counted around each)", refused)
    report.add("5xx answers", len(total.server_errors), must=0)
    report.add("-32603 answers", len(total.internal_errors), must=0)
    report.add("answers whose id is not the request's", len(total.id_mismatches), must=0)
    report.add("answers that are not a documented error", len(total.undocumented), must=0)
    report.add("inputs answered with another class than they name", len(total.unexpected), must=0)
    report.add("rows written by refused calls", total.rows_written_by_refusals, must=0)
    report.add("read-back rounds / calls", f"{total.read_back_rounds} / {total.read_back_calls:,}")
    report.add("read-back calls that failed", len(total.read_back_failures), must=0)
    report.add("connections cut without an answer", len(total.connection_failures), must=0)
    report.add("tracebacks in the server log", tracebacks, must=0)
    report.add("stopped by the time cap (--seconds)", "yes" if total.stopped_early else "no")
    classes = ", ".join(f"{name} {count:,}" for name, count in total.classes.most_common())
    report.add(f"answers by class ({len(total.classes)} classes)", classes)
    pairs = len(targets(RPC_PARAMS))
    walked = min(len(FAMILIES), -(-hostile.tried // pairs))
    report.add(
        "hostile (target, slot) pairs x value families", f"{pairs} x {walked} of {len(FAMILIES)}"
    )
    report.add("distinct failures", len(total.findings))
    report.problems += [finding.render() for finding in total.findings.values()]
    report.shown = max(report.shown, len(report.problems) + 1)  # each distinct failure
    if tracebacks:
        report.problems.append("server log:\n" + log[-3000:])
    return report


def fuzz_backend(name: str, url: str, options: FuzzOptions) -> Report:
    server = ServerProcess(url, {"CCWEB_MAX_BODY_BYTES": str(BODY_LIMIT)}).start()
    try:
        corpus, generated, hostile = asyncio.run(fuzz_server(server.port, url, options))
    finally:
        server.stop()
    title = f"{name}: one server process"
    return fuzz_report(title, corpus, generated, hostile, server.log_text())


def main(argv: list[str] | None = None) -> int:
    helps = {
        "inputs": "random inputs",
        "hostile": "hostile inputs (bench/hostile.py)",
        "round_size": "read every conversation back after this many hostile inputs",
        "seconds": "cap on each backend's run",
        "corpus": "send the corpus first",
    }
    parser = command_line(__doc__, FuzzOptions(), helps)
    parser.add_argument(
        "--write-tool-corpus",
        action="store_true",
        help=f"rewrite {TOOL_CORPUS.relative_to(ROOT)} from the tool registry and exit",
    )
    args = parser.parse_args(argv)
    if args.write_tool_corpus:
        print(f"{write_tool_corpus()} lines written to {TOOL_CORPUS}")
        return 0
    options = options_from(args, FuzzOptions)
    reports = on_each_backend(
        args, "fuzz", lambda backend, url: fuzz_backend(backend, url, options)
    )
    header = (
        f"fuzz: corpus + {options.inputs:,} random inputs + {options.hostile:,} hostile ones"
        f" (seed {options.seed}); {machine()}\n"
        "(a body below writes a unit repeated N times as ⟪N×unit⟫: fuzz_checks.expand)"
    )
    return finish(reports, header)


if __name__ == "__main__":
    sys.exit(main())
