"""Hostile parameters for every host method and every tool, written as request text.

``bench/fuzz_http.py --hostile N`` sends what ``HostileGenerator`` makes to a real server. Each
request is a valid call with exactly one slot replaced by a hostile value, so that an answer
that goes wrong names its cause: the target (every entry of ``rpc.METHODS`` over ``/rpc``;
every tool of ``tools.TOOLS``, the hidden alias too, over ``/mcp`` ``tools/call`` and over
``/rpc`` ``tools.call`` and ``tools.callDynamic``; MCP ``initialize``, ``ping`` and
``tools/list``), the slot, and the value.

- Slots (``Slot``): the JSON-RPC ``id`` and ``method``; the whole ``params``; each parameter
  the method reads (``metadata`` and a key inside it, page ``cursor``, tool ``name``, tool
  ``arguments``, each argument and each field of a prompt question); an unknown parameter; a
  key written twice (the valid value first or last); a hostile key.
- Values (``catalogue``): objects, arrays and both mixed nested 64 to 2,000 deep; integers at
  and beyond the signed and unsigned 64-bit edges and 10**30; 1e20, 1e308, 5e-324, -0.0 and
  numbers that overflow or underflow a double; the literals ``NaN``, ``Infinity`` and
  ``-Infinity`` (not JSON: the answer must be -32700); objects with a duplicate key; lone
  and reversed UTF-16 surrogates as ``\\ud800`` escapes, U+0000, a raw control character,
  noncharacters; strings up to the body limit and just past it; arrays and objects with
  tens of thousands of members.

Bodies are written as text (``write``), not by ``json.dumps`` of a Python value, because
several of these have no Python value: non-finite literals, duplicate keys, lone surrogates,
and integers that the server's parser reads differently from Python's.

A seeded ``random.Random`` rather than Hypothesis: the requests go to one server whose
database fills as they are answered, so shrinking (which sends variants again against the
changed state) does not find a smaller failing input. Instead the same seed sends the same
bytes; the (target, slot) pairs are walked in cycles, cycle ``c`` giving each pair a value of
the family ``FAMILIES[c]`` (nesting first, the costliest last), so a short run aims at every
pair and a run of ``HostileGenerator.walk`` requests gives each pair every family; and the
fuzzer reports each distinct failure once with its smallest body. What the answers are
checked against beyond their class (the id echo, -32603, the read-back of every
conversation) is ``bench/fuzz_checks.py``.
"""

from __future__ import annotations

import copy
import json
import random
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from bench.fuzz_checks import parse_raw
from ccweb_store.protocol import registry as rpc
from ccweb_store.protocol import registry as tools

#: Host methods that call a tool: aimed at with each tool in turn.
TOOL_METHODS = ("tools.call", "tools.callDynamic")
#: A valid call to each MCP method aimed at besides ``tools/call``.
MCP_PARAMS: dict[str, dict[str, Any]] = {
    "initialize": {
        "protocolVersion": "2025-06-18",
        "capabilities": {},
        "clientInfo": {"name": "fuzz", "version": "1"},
    },
    "ping": {},
    "tools/list": {"cursor": "0"},
}


# --- values ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class Value:
    """A hostile value as JSON text (possibly not JSON at all)."""

    family: str  # what a distinct failure is grouped by: "nesting", "integer", …
    kind: str  # this value: "array nested 990 deep"
    text: str
    #: The answer classes it must get wherever it is sent (empty: any documented one).
    expect: tuple[str, ...] = ()

    @property
    def is_string(self) -> bool:
        return self.text.startswith('"')


#: Depths a parser takes and a writer may not (orjson reads 1,024 levels, writes 254).
NEST_DEPTHS = (255, 256, 300, 500, 990, 1023, 1024)
#: Depths at the edges: the JSON rule's limit (64), orjson's writer's and reader's, and past.
EDGE_DEPTHS = (64, 65, 254, 1025, 2000)
INTEGERS = {
    "2**63-1": "9223372036854775807",
    "2**63": "9223372036854775808",
    "2**64-1": "18446744073709551615",
    "2**64": "18446744073709551616",
    "-(2**63)": "-9223372036854775808",
    "-(2**63)-1": "-9223372036854775809",
    "10**30": "1" + "0" * 30,
    "-(10**30)": "-1" + "0" * 30,
    "of 400 digits": "9" * 400,
    "-0": "-0",
}
FLOATS = (
    "1e20",
    "1e308",
    "5e-324",
    "-0.0",
    "1.7976931348623157e308",
    "1e309",
    "1e-400",
    "1E+2",
    "0.1",
    "123456789012345678901234567890.5",
)
#: Literals some encoders write and JSON does not have: refused as -32700 wherever they are.
NON_FINITE = ("NaN", "Infinity", "-Infinity")
STRINGS = {
    "a lone high surrogate": r'"\ud800"',
    "a lone low surrogate": r'"\udfff"',
    "a surrogate inside text": r'"a\ud800b"',
    "surrogates in reverse order": r'"\udc00\ud800"',
    "a high surrogate before a letter": r'"\ud800\u0041"',
    "a surrogate pair": r'"\ud83d\ude00"',
    "U+0000": r'"\u0000"',
    "U+0000 inside text": r'"nul\u0000inside"',
    "noncharacter U+FFFF": r'"\uffff"',
    "noncharacter U+FDD0": r'"\ufdd0"',
    "right-to-left override": r'"\u202eevil"',
    "empty": '""',
    "129 characters": '"' + "a" * 129 + '"',
    "70,000 characters": '"' + "x" * 70_000 + '"',
}
DUPLICATES = {
    "two equal keys": '{"a":1,"a":2}',
    "a key twice, object then array": '{"a":{"b":1},"a":[2]}',
    "the empty key twice": '{"":0,"":1}',
    "a key twice, nested": '{"a":{"b":1,"b":{"c":2,"c":3}}}',
}
PLAIN = ("null", "true", "false", "0", "-1", "[]", "{}", '"hostile"', '[""]', '{"a":null}')
#: The walk's order: every (target, slot) pair gets a value of the first family, then every
#: pair one of the second, and so on (the costliest last).
FAMILIES = (
    "nesting",
    "integer",
    "float",
    "string",
    "edge nesting",
    "duplicate keys",
    "non-finite",
    "plain",
    "wide",
    "huge",
)


def nested(shape: str, depth: int) -> str:
    """``depth`` levels of arrays, objects or both alternating, around a 0."""
    openers = {"array": ("[",), "object": ('{"a":',), "mixed": ("[", '{"a":')}[shape]
    closers = {"[": "]", '{"a":': "}"}
    opened = [openers[level % len(openers)] for level in range(depth)]
    return "".join(opened) + "0" + "".join(closers[opener] for opener in reversed(opened))


def catalogue(body_limit: int) -> list[Value]:
    """Every hostile value, in a fixed order; huge ones sized by the server's body limit."""
    values = [
        Value(family, f"{shape} nested {depth} deep", nested(shape, depth))
        for family, depths in (("nesting", NEST_DEPTHS), ("edge nesting", EDGE_DEPTHS))
        for depth in depths
        for shape in ("array", "object", "mixed")
    ]
    values += [Value("integer", f"integer {name}", text) for name, text in INTEGERS.items()]
    values += [Value("float", f"number {text[:24]}", text) for text in FLOATS]
    values += [
        Value("non-finite", f"literal {text}", text, ("parse_error",)) for text in NON_FINITE
    ]
    values += [Value("string", f"string: {name}", text) for name, text in STRINGS.items()]
    values.append(Value("string", "string: a raw control character", '"\x01"', ("parse_error",)))
    values += [Value("duplicate keys", name, text) for name, text in DUPLICATES.items()]
    values += [Value("plain", f"plain {text}", text) for text in PLAIN]
    near = body_limit - 1024  # the rest of the body stays under 1 KiB
    values += [
        Value("huge", f"string of {near:,} characters", '"' + "x" * near + '"'),
        Value("huge", "string of 1,000,000 characters", '"' + "y" * 1_000_000 + '"'),
        Value("huge", f"string of {near // 6:,} escaped é", '"' + r"\u00e9" * (near // 6) + '"'),
        Value(
            "huge",
            f"string of {near // 12:,} escaped surrogate pairs",
            '"' + r"\ud83d\ude00" * (near // 12) + '"',
        ),
        Value(
            "huge",
            f"string of {body_limit + 1:,} characters (over the limit)",
            '"' + "z" * (body_limit + 1) + '"',
            ("too_large",),
        ),
        Value("wide", "array of 100,000 zeros", "[" + ",".join(["0"] * 100_000) + "]"),
        Value(
            "wide",
            "object of 20,000 keys",
            "{" + ",".join(f'"k{index}":0' for index in range(20_000)) + "}",
        ),
        Value("wide", "array of 10,000 empty objects", "[" + ",".join(["{}"] * 10_000) + "]"),
    ]
    return values


# --- writing bodies ---------------------------------------------------------------------------


class _Hole:
    """Where the hostile value goes, as a value or as a key."""

    def __repr__(self) -> str:
        return "HOLE"


HOLE = _Hole()
KEY_HOLE = _Hole()


@dataclass
class Twice:
    """A key written twice: with its valid value and with the hostile one, in this order."""

    valid: Any
    hostile_last: bool


def write(value: Any, hole: str) -> str:
    """Compact JSON text of ``value``, with ``hole`` written where ``HOLE`` or ``KEY_HOLE`` is."""
    if value is HOLE:
        return hole
    if isinstance(value, dict):
        pairs: list[str] = []
        for key, item in value.items():
            name = hole if key is KEY_HOLE else json.dumps(key)
            if isinstance(item, Twice):
                written = [f"{name}:{write(item.valid, hole)}", f"{name}:{hole}"]
                pairs += written if item.hostile_last else written[::-1]
            else:
                pairs.append(f"{name}:{write(item, hole)}")
        return "{" + ",".join(pairs) + "}"
    if isinstance(value, list):
        return "[" + ",".join(write(item, hole) for item in value) + "]"
    return json.dumps(value)


# --- targets and slots ------------------------------------------------------------------------


@dataclass(frozen=True)
class Slot:
    """Where in the message the hostile value goes: at ``path`` (``replace``), as a key of the
    object at ``path`` (``key``), or as a second value of one of its keys (``twice``)."""

    path: tuple[str | int, ...]
    mode: str = "replace"

    @property
    def label(self) -> str:
        text = "".join(f"[{part}]" if isinstance(part, int) else f".{part}" for part in self.path)
        text = text.lstrip(".") or "message"
        return text if self.mode == "replace" else f"{text} ({self.mode})"


@dataclass(frozen=True)
class Target:
    """A method on an endpoint, and the tool it calls (``tools/call``, ``tools.call``)."""

    endpoint: str  # "/rpc" or "/mcp"
    method: str
    tool: str | None = None

    @property
    def label(self) -> str:
        return f"{self.endpoint} {self.method}" + (f" {self.tool}" if self.tool else "")


#: Slots of every target.
ENVELOPE_SLOTS = (Slot(("id",)), Slot(("params",)), Slot(("params",), "twice"))
#: Slots whose answer does not depend on the method: aimed at through one target per endpoint.
ENDPOINT_SLOTS = (
    Slot(("method",)),
    Slot((), "twice"),
    Slot(("params",), "key"),
    Slot(("params", "x")),
)
ENDPOINT_TARGETS = (("/rpc", "session.get"), ("/mcp", "ping"))


def tool_slots(tool: tools.Operation, arguments: str) -> list[Slot]:
    """Every place in a tool's ``arguments`` (spelled ``arguments``): the whole object, each
    argument, each field of an array's objects, an unknown one, a twice-written one, a key."""
    base: tuple[str | int, ...] = ("params", arguments)
    slots = [Slot(base), Slot((*base, "x")), Slot(base, "twice"), Slot(base, "key")]
    for key, schema in tool.input_schema.get("properties", {}).items():
        slots.append(Slot((*base, key)))
        items = schema.get("items", {})
        if schema.get("type") == "array" and items.get("type") == "object":
            item: tuple[str | int, ...] = (*base, key, 0)
            slots += [Slot((*item, field)) for field in items.get("properties", {})]
            slots += [Slot((*item, "x")), Slot(item, "twice")]
    return slots


def host_params(
    known: Mapping[str, list[str]], fresh: Callable[[], str], target: str
) -> dict[str, dict[str, Any]]:
    """A valid call to every host method but the tool-calling ones, on the seeded data; the
    writes go to the conversation ``target``."""
    source = known["session"][0]
    worker = "hostile-worker"
    run, request = known["runid"][0], known["requestid"][0]
    return {
        "session.create": {"id": fresh(), "title": "hostile"},
        "session.get": {"id": source},
        "session.list": {"limit": 5, "cursor": None},
        "session.archive": {"id": target, "archived": False},
        "session.update": {"id": target, "agentSessionId": "hostile-session"},
        "message.append": {
            "sessionId": target,
            "role": "user",
            "content": "hostile",
            "metadata": {"k": "v"},
        },
        "message.list": {"sessionId": source, "afterSeq": 0, "limit": 5},
        "message.recent": {"sessionId": source, "limit": 5, "role": "user"},
        "run.start": {"sessionId": target, "kind": "user_turn", "workerId": worker},
        "run.enqueue": {"sessionId": target, "kind": "user_turn"},
        "run.claim": {"workerId": worker, "leaseSeconds": 3600},
        "run.heartbeat": {"runId": run, "workerId": worker, "leaseSeconds": 3600},
        "run.complete": {"runId": run, "status": "completed", "output": "hostile"},
        "run.list": {"sessionId": source, "limit": 5},
        "run.requeue": {"runId": run},
        "run.cancel": {"runId": run},
        "reply.list": {"sessionId": source, "limit": 5, "cursor": None},
        "events.list": {"after": 0, "limit": 5, "types": ["run.queued"], "conversation": source},
        "reply.get": {"requestId": request},
        "reply.retry": {"requestId": request},
        "reply.fail": {"requestId": request, "reason": "hostile"},
        "reply.expire": {"olderThanSeconds": 86_400},
        "prompt.respond": {"promptId": known["promptid"][0], "answers": {"q": "yes"}},
        "credential.mint": {"sessionId": source, "label": "hostile"},
        "credential.list": {"sessionId": source},
        "credential.revoke": {"credentialId": known["credentialid"][0]},
        "operator.conversations": {"includeArchived": True, "query": "fuzz", "limit": 5},
        "operator.conversation": {"id": source},
        "operator.pendingReplies": {"status": "waiting", "sessionId": source, "limit": 5},
        "operator.replyStory": {"requestId": request},
        "operator.doctor": {},
        "tools.list": {},
        "tools.dynamic": {},
        "tools.composerItems": {},
    }


def plausible(
    key: str, schema: Mapping[str, Any], known: Mapping[str, list[str]], target: str
) -> Any:
    """A valid value for a tool argument, from its schema and the seeded data (a
    conversation id: ``target``)."""
    if schema.get("enum"):
        return schema["enum"][0]
    kind = schema.get("type")
    if kind == "string":
        if key.endswith("ConversationId"):
            return target
        if key == "requestId":
            return known["requestid"][0]
        return "hostile"
    if kind in ("integer", "number"):
        return schema.get("minimum", 1)
    if kind == "boolean":
        return False
    if kind == "array":
        items = schema.get("items", {})
        if items.get("type") == "object":
            required = items.get("required", [])
            properties = items["properties"]
            return [{name: plausible(name, properties[name], known, target) for name in required}]
        return [plausible(key, items, known, target)]
    return {}


def tool_arguments(
    tool: tools.Operation, known: Mapping[str, list[str]], target: str
) -> dict[str, Any]:
    """A valid ``arguments`` object: every required argument, and every array of objects."""
    properties = tool.input_schema.get("properties", {})
    required = set(tool.input_schema.get("required", []))
    return {
        key: plausible(key, schema, known, target)
        for key, schema in properties.items()
        if key in required or schema.get("items", {}).get("type") == "object"
    }


def targets(param_names: Mapping[str, Iterable[str]]) -> list[tuple[Target, Slot]]:
    """Every (target, slot) pair, in a fixed order: each host method (with each parameter of
    ``host_params`` and ``param_names``), each tool over ``/mcp`` and over both tool-calling
    host methods, and three MCP methods."""
    pairs: list[tuple[Target, Slot]] = []
    calls = host_params(PLACEHOLDER_IDS, lambda: "x", "b")
    for method in rpc.METHODS:
        if method in TOOL_METHODS:
            for tool in tools.TOOLS:
                target = Target("/rpc", method, tool.name)
                pairs += [(target, slot) for slot in ENVELOPE_SLOTS]
                for name in ("tool", "name", "args", "arguments", *SOURCE_PARAMS):
                    pairs.append((target, Slot(("params", name))))
                pairs += [(target, slot) for slot in tool_slots(tool, "args")]
            continue
        target = Target("/rpc", method)
        names = {*calls.get(method, {}), *param_names.get(method, ())}
        pairs += [(target, slot) for slot in ENVELOPE_SLOTS]
        pairs += [(target, Slot(("params", name))) for name in sorted(names)]
        if method == "message.append":
            pairs.append((target, Slot(("params", "metadata", "k"))))
    for tool in tools.TOOLS:
        target = Target("/mcp", "tools/call", tool.name)
        pairs += [(target, slot) for slot in ENVELOPE_SLOTS]
        pairs += [(target, Slot(("params", name))) for name in ("name", "arguments", "_meta")]
        pairs += [(target, slot) for slot in tool_slots(tool, "arguments")]
    for method, params in MCP_PARAMS.items():
        target = Target("/mcp", method)
        pairs += [(target, slot) for slot in ENVELOPE_SLOTS]
        pairs += [(target, Slot(("params", name))) for name in params]
    for endpoint, method in ENDPOINT_TARGETS:
        pairs += [(Target(endpoint, method), slot) for slot in ENDPOINT_SLOTS]
    return pairs


SOURCE_PARAMS = ("sourceSessionId", "sourceHopCount")
#: Stand-ins for the seeded ids, to list the parameters of ``host_params``.
PLACEHOLDER_IDS: dict[str, list[str]] = {
    "session": ["a", "b"],
    **{name: ["x"] for name in ("runid", "requestid", "promptid", "credentialid")},
}


# --- the generator ----------------------------------------------------------------------------


@dataclass(frozen=True)
class Hostile:
    """One request: where it goes, its body, and what its answer is checked against."""

    target: Target
    slot: Slot
    value: Value
    name: str
    path: str
    body: bytes
    #: What a distinct failure is grouped by: endpoint, method, slot and value family (the
    #: tool is left out: a slot that fails for one tool fails for the others alike).
    signature: str
    #: The ids the answer may carry (the request's, or either of two written); none: null.
    ids: tuple[str, ...]
    expect: tuple[str, ...]


class HostileGenerator:
    """Seeded hostile requests. The (target, slot) pairs are walked in cycles, each cycle in a
    new shuffled order; cycle ``c`` gives every pair a value of ``FAMILIES[c]`` (a key slot:
    a string), the member drawn at random. The same seed gives the same bytes."""

    def __init__(
        self,
        seed: int,
        known: Mapping[str, list[str]],
        body_limit: int,
        param_names: Mapping[str, Iterable[str]],
    ) -> None:
        self.rng = random.Random(seed)
        self.known = known
        self.values = catalogue(body_limit)
        self.by_family: dict[str, list[Value]] = {}
        for value in self.values:
            self.by_family.setdefault(value.family, []).append(value)
        self.keys = [value for value in self.values if value.is_string and len(value.text) < 10**5]
        self.pairs = targets(param_names)
        self.created = 0

    @property
    def walk(self) -> int:
        """How many requests give every pair a value of every family."""
        return len(self.pairs) * len(FAMILIES)

    def inputs(self, count: int) -> Iterator[Hostile]:
        order: list[tuple[Target, Slot]] = []
        for number in range(count):
            if not order:
                order = list(self.pairs)
                self.rng.shuffle(order)
            family = FAMILIES[number // len(self.pairs) % len(FAMILIES)]
            target, slot = order.pop()
            pool = self.keys if slot.mode == "key" else self.by_family[family]
            yield self.one(number, target, slot, self.rng.choice(pool))

    def fresh(self) -> str:
        self.created += 1
        return f"hostile-{self.created}"

    def one(self, number: int, target: Target, slot: Slot, value: Value) -> Hostile:
        message = {"jsonrpc": "2.0", "id": number + 1, "method": target.method}
        message["params"] = self.params(target, slot)
        where = self.place(message, slot)
        path = "/rpc"
        if target.endpoint == "/mcp":
            path = f"/mcp?sourceSessionId={self.known['session'][0]}"
        return Hostile(
            target=target,
            slot=slot,
            value=value,
            name=f"hostile #{number} {target.label} {where} = {value.kind}",
            path=path,
            body=write(message, value.text).encode(),
            signature=f"{target.endpoint} {target.method} {slot.label} = {value.family}",
            ids=_ids(message["id"], value.text),
            expect=value.expect,
        )

    def params(self, target: Target, slot: Slot) -> dict[str, Any]:
        if target.endpoint == "/mcp" and target.tool is None:
            return copy.deepcopy(MCP_PARAMS[target.method])
        # Writes go to one of several conversations, so that one a poison row breaks does
        # not hide the next.
        written = self.rng.choice(self.known.get("targets", self.known["session"][1:2]))
        if target.tool is None:
            return host_params(self.known, self.fresh, written)[target.method]
        tool = tools.get_tool(target.tool)
        arguments = tool_arguments(tool, self.known, written)
        if target.endpoint == "/mcp":
            return {"name": tool.name, "arguments": arguments}
        # tools.call reads "tool" or "name", "args" or "arguments": the slot's spelling.
        spellings = (("tool", "args"), ("name", "arguments"))
        names = next((pair for pair in spellings if set(pair) & set(slot.path)), None)
        if names is None:
            names = self.rng.choice(spellings)
        return {
            names[0]: tool.name,
            names[1]: arguments,
            "sourceSessionId": self.known["session"][0],
        }

    def place(self, message: dict[str, Any], slot: Slot) -> str:
        """Put ``HOLE`` (or ``KEY_HOLE``, or a ``Twice``) where ``slot`` says; what it did."""
        container: Any = message
        for part in slot.path[: -1 if slot.mode == "replace" else None]:
            if isinstance(container, dict) and not isinstance(container.get(part), dict | list):
                container[part] = {}
            container = container[part]
        if slot.mode == "replace":
            container[slot.path[-1]] = HOLE
            return slot.label
        if slot.mode == "key":
            container[KEY_HOLE] = 0
            return slot.label
        present = [key for key in container if key is not KEY_HOLE]
        key = self.rng.choice(present) if present else "x"
        hostile_last = self.rng.random() < 0.5
        container[key] = Twice(container.get(key, "hostile"), hostile_last)
        order = "valid then hostile" if hostile_last else "hostile then valid"
        return f"{slot.label.split(' (')[0]}.{key} written twice ({order})"


def _ids(written: Any, hole: str) -> tuple[str, ...]:
    """The ids an answer may echo: each id written that is a string, number or null."""
    candidates = [written.valid, HOLE] if isinstance(written, Twice) else [written]
    texts = [hole if item is HOLE else json.dumps(item) for item in candidates]
    return tuple(text for text in texts if _readable_id(text))


def _readable_id(text: str) -> bool:
    try:
        value = parse_raw(text)
    except (ValueError, RecursionError):
        return False
    return value is None or isinstance(value, str)
