"""The hostile-input generator and the checks the fuzzer applies to every answer, as pure
logic: what is aimed at, what is sent, and what counts as a wrong id, a -32603 or a body
shortened for a report. The server side is ``tests/test_reliability.py``."""

from __future__ import annotations

import pytest

from bench import fuzz_http
from bench.fuzz_checks import (
    expand,
    id_kind,
    id_problem,
    internal_error,
    parse_raw,
    request_ids,
    shorten,
)
from bench.hostile import (
    FAMILIES,
    HOLE,
    KEY_HOLE,
    PLACEHOLDER_IDS,
    TOOL_METHODS,
    HostileGenerator,
    Slot,
    Twice,
    Value,
    catalogue,
    host_params,
    nested,
    targets,
    write,
)
from ccweb_store.protocol import registry as rpc
from ccweb_store.protocol import registry as tools

KNOWN = {
    "session": ["fuzz-a", "fuzz-b", "fuzz-c"],
    "runid": ["run_1"],
    "requestid": ["req_1"],
    "promptid": ["prompt_1"],
    "credentialid": ["cred_1"],
    "targets": ["hostile-target-1", "hostile-target-2"],
}
LIMIT = 4 * 1024 * 1024


def generator(seed: int = 1) -> HostileGenerator:
    return HostileGenerator(seed, KNOWN, LIMIT, fuzz_http.RPC_PARAMS)


def test_the_generator_aims_at_every_host_method_and_every_tool_the_hidden_alias_too() -> None:
    pairs = targets(fuzz_http.RPC_PARAMS)
    every_tool = {tool.name for tool in tools.TOOLS}
    assert "ccweb_request_reply" in every_tool
    assert {t.method for t, _ in pairs if t.endpoint == "/rpc"} == set(rpc.METHODS)
    assert {t.tool for t, _ in pairs if t.method == "tools/call"} == every_tool
    for method in TOOL_METHODS:
        assert {t.tool for t, _ in pairs if t.method == method} == every_tool


def test_every_host_method_but_the_tool_calling_ones_has_a_valid_call_to_aim_from() -> None:
    calls = host_params(PLACEHOLDER_IDS, lambda: "new", "target")
    assert set(calls) | set(TOOL_METHODS) == set(rpc.METHODS)


def test_every_parameter_a_method_reads_and_every_tool_argument_is_a_slot() -> None:
    labels = {(t.method, t.tool, slot.label) for t, slot in targets(fuzz_http.RPC_PARAMS)}
    for method, names in fuzz_http.RPC_PARAMS.items():
        if method not in TOOL_METHODS:
            assert {(method, None, f"params.{name}") for name in names} <= labels
    for tool in tools.TOOLS:
        for argument in tool.input_schema.get("properties", {}):
            assert ("tools/call", tool.name, f"params.arguments.{argument}") in labels
            assert ("tools.call", tool.name, f"params.args.{argument}") in labels
    for place in ("params.metadata", "params.metadata.k", "params.cursor", "id"):
        assert any(label == place for _, _, label in labels), place
    assert ("tools/call", "ccweb_prompt_user", "params.arguments.questions[0].options") in labels


def test_the_values_hold_every_kind_the_issue_names() -> None:
    texts = {value.text for value in catalogue(LIMIT)}
    for text in (
        "9223372036854775807",
        "9223372036854775808",
        "18446744073709551616",
        "-9223372036854775809",
        "1" + "0" * 30,
        "1e20",
        "1e308",
        "5e-324",
        "-0.0",
        "NaN",
        "Infinity",
        "-Infinity",
        r'"\ud800"',
        r'"\u0000"',
        '{"a":1,"a":2}',
        nested("array", 2000),
        nested("object", 2000),
    ):
        assert text in texts, text[:40]
    longest = max(len(text) for text in texts if text.startswith('"') and len(text) <= LIMIT)
    assert LIMIT - 2048 < longest <= LIMIT


def test_nan_and_infinity_literals_must_be_answered_as_parse_errors_wherever_they_are() -> None:
    literals = [value for value in catalogue(LIMIT) if value.family == "non-finite"]
    assert {value.text for value in literals} == {"NaN", "Infinity", "-Infinity"}
    assert all(value.expect == ("parse_error",) for value in literals)


def test_each_cycle_of_the_walk_gives_every_pair_a_value_of_its_family() -> None:
    hostile = generator()
    count = len(hostile.pairs)
    sent = list(hostile.inputs(3 * count))
    for cycle, family in enumerate(FAMILIES[:3]):
        part = sent[cycle * count : (cycle + 1) * count]
        assert {(item.target, item.slot) for item in part} == set(hostile.pairs)
        families = {item.value.family for item in part if item.slot.mode != "key"}
        assert families == {family}
    assert hostile.walk == count * len(FAMILIES)


def test_the_same_seed_sends_the_same_bytes_and_another_seed_others() -> None:
    first = [item.body for item in generator(7).inputs(600)]
    assert first == [item.body for item in generator(7).inputs(600)]
    assert first != [item.body for item in generator(8).inputs(600)]


def test_a_hostile_body_is_the_valid_call_with_the_value_written_as_text_in_its_slot() -> None:
    message = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "message.append",
        "params": {
            "sessionId": "a",
            "metadata": {"k": HOLE},
            KEY_HOLE: 0,
            "role": Twice("u", True),
        },
    }
    body = write(message, "NaN")
    assert body == (
        '{"jsonrpc":"2.0","id":1,"method":"message.append","params":'
        '{"sessionId":"a","metadata":{"k":NaN},NaN:0,"role":"u","role":NaN}}'
    )


@pytest.mark.parametrize(
    ("value", "ids"),
    [
        ("18446744073709551616", ("18446744073709551616",)),
        ("-0.0", ("-0.0",)),
        (r'"\ud800"', (r'"\ud800"',)),
        ("null", ("null",)),
        ("NaN", ()),
        ('"\x01"', ()),
        ("[1]", ()),
        ('{"a":1,"a":2}', ()),
        (nested("array", 2000), ()),
    ],
)
def test_a_hostile_id_that_can_be_read_must_come_back_and_another_must_be_null(
    value: str, ids: tuple[str, ...]
) -> None:
    hostile = generator()
    target = next(target for target, _ in hostile.pairs if target.method == "tools.list")
    sent = hostile.one(41, target, Slot(("id",)), Value("test", "test", value))
    assert sent.ids == ids
    assert sent.body.startswith(b'{"jsonrpc":"2.0","id":' + value.encode() + b",")
    twice = hostile.one(41, target, Slot((), "twice"), Value("test", "test", value))
    if twice.body.count(b'"id":') == 2:  # the key written twice is the id
        assert set(twice.ids) == {"42", *ids}
    else:
        assert twice.ids == ("42",)
    other = hostile.one(41, target, Slot(("params",)), Value("test", "test", value))
    assert other.ids == ("42",)


@pytest.mark.parametrize(
    ("ids", "answer", "status", "problem"),
    [
        (("-9223372036854775809",), '{"id":-9223372036854775809,"result":1}', 200, None),
        (("-9223372036854775809",), '{"id":-9.223372036854776e+18,"result":1}', 200, "sent id"),
        (("18446744073709551616",), '{"id":1.8446744073709552e+19,"result":1}', 200, "sent id"),
        (("1",), '{"id":"1","result":1}', 200, "sent id"),
        (('"1"',), '{"id":1,"result":1}', 200, "sent id"),
        (('"\\ud83d\\ude00"',), '{"id":"😀","result":1}', 200, None),
        (("1.50",), '{"id":1.5,"result":1}', 200, None),
        (("1",), '{"id":null,"error":{"code":-32700,"message":"x"}}', 200, None),
        (("1",), '{"id":null,"error":{"code":-32600,"message":"x"}}', 200, None),
        (("1",), '{"id":null,"error":{"code":-32600,"message":"x"}}', 413, None),
        (("1",), '{"id":null,"error":{"code":-32000,"message":"x"}}', 200, "sent id"),
        (("1",), '{"id":null,"result":1}', 200, "sent id"),
        ((), '{"id":null,"error":{"code":-32600,"message":"x"}}', 200, None),
        ((), '{"id":5,"error":{"code":-32600,"message":"x"}}', 200, "sent id no readable"),
        (("1", "2"), '{"id":2,"result":1}', 200, None),
        (("1",), '{"jsonrpc":"2.0","result":1}', 200, None),
    ],
)
def test_an_answer_must_carry_its_request_id_exactly_as_written(
    ids: tuple[str, ...], answer: str, status: int, problem: str | None
) -> None:
    message = parse_raw(answer)
    code = message.get("error", {}).get("code")
    found = id_problem(ids, message, status, int(code) if code else None, "x")
    if problem is None:
        assert found is None
    else:
        assert found is not None and found.startswith(problem)


def test_an_answer_whose_id_the_json_rule_refused_may_carry_null() -> None:
    message = parse_raw('{"id":null,"error":{"code":-32602,"message":"x"}}')
    assert id_problem(("1e999",), message, 200, -32602, "invalid_json_value") is None
    assert id_problem(("1e999",), message, 200, -32602, "invalid_params") is not None


@pytest.mark.parametrize(
    ("body", "ids"),
    [
        (b'{"jsonrpc":"2.0","id":18446744073709551616,"method":"ping"}', ("18446744073709551616",)),
        (b'{"jsonrpc":"2.0","id":"x","method":"ping"}', ('"x"',)),
        (b'{"jsonrpc":"2.0","id":null,"method":"ping"}', ("null",)),
        (b'{"jsonrpc":"2.0","id":[1],"method":"ping"}', ()),
        (b'{"jsonrpc":"2.0","id":NaN,"method":"ping"}', ()),
        (b'{"jsonrpc":"2.0","method":"ping"}', None),
        (b'[{"jsonrpc":"2.0","id":1,"method":"ping"}]', None),
        (nested("array", 5000).encode(), None),
    ],
)
def test_the_ids_of_a_corpus_or_random_body_are_read_from_its_text(
    body: bytes, ids: tuple[str, ...] | None
) -> None:
    assert request_ids(body) == ids


@pytest.mark.parametrize(
    ("ids", "kind"),
    [
        (("7",), "an integer id"),
        (("-9223372036854775809",), "an integer id outside 64 bits"),
        (("1e-400",), "a number id"),
        (('"x"',), "a string id"),
        ((), "an id that cannot be read"),
    ],
)
def test_id_failures_of_corpus_and_random_inputs_are_grouped_by_the_kind_of_id(
    ids: tuple[str, ...], kind: str
) -> None:
    assert id_kind(ids) == kind


def test_a_32603_is_found_alone_in_a_batch_and_in_an_answer_too_deep_to_read_here() -> None:
    error = b'{"jsonrpc":"2.0","id":1,"error":{"code":-32603,"message":"internal error"}}'
    ok = b'{"jsonrpc":"2.0","id":2,"result":{"code":-32603}}'
    assert internal_error(parse_raw(error), error)
    assert internal_error(parse_raw(b"[" + ok + b"," + error + b"]"), b"")
    assert not internal_error(parse_raw(ok), ok)
    assert internal_error(None, error)


@pytest.mark.parametrize("shape", ["array", "object", "mixed"])
def test_a_body_shortened_for_a_report_fits_in_200_characters_and_expands_back(
    shape: str,
) -> None:
    body = (
        '{"jsonrpc":"2.0","id":1,"method":"message.append","params":{"sessionId":"fuzz-b",'
        f'"metadata":{{"k":{nested(shape, 990)}}},"content":"{"x" * 100_000}"}}}}'
    )
    short = shorten(body)
    assert len(short) <= 200
    assert expand(short) == body
