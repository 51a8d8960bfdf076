"""Property tests: whatever arguments a tool or a host method gets, it answers a payload or a
documented error, never an unexpected exception, and a call it refuses writes no row.

Through the real service on a real database (both backends). Examples are few and the same
each run in the suite; ``CCWEB_HYPOTHESIS_PROFILE=deep`` draws thousands of new ones.
"""

from __future__ import annotations

from typing import Any

import orjson
import pytest
from hypothesis import given
from hypothesis import strategies as st

from bench.fuzz_http import DOCUMENTED_CODES, RPC_PARAMS
from ccweb_store.domain.context import Source
from ccweb_store.domain.errors import DomainError
from ccweb_store.http import rpc as http_rpc
from ccweb_store.protocol import jsonrpc
from ccweb_store.protocol import registry as rpc
from ccweb_store.protocol import registry as tools
from ccweb_store.store.uow import Store
from tests.lifecycle_support import table_row_counts

JSON_SCALARS = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**64), max_value=2**64)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=40)
)
JSON_VALUES = st.recursive(
    JSON_SCALARS,
    lambda children: (
        st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=12), children, max_size=4)
    ),
    max_leaves=12,
)
#: Values that pass the type checks and reach the database: real ids, enum members, edges.
PLAUSIBLE = st.sampled_from(
    [
        "conv-a",
        "conv-b",
        "nobody",
        "",
        " ",
        "a" * 129,
        "one_way",
        "return_and_continue",
        "completed",
        "failed",
        "user",
        "assistant",
        "user_turn",
        "cross_conversation",
        "waiting",
        "text with\nlines",
        0,
        1,
        -1,
        7,
        2**31,
        2**63 - 1,
        0.5,
        True,
        False,
        [],
        {},
    ]
)
VALUES = PLAUSIBLE | JSON_VALUES
SOURCES = st.builds(
    Source,
    st.sampled_from([None, "conv-a", "conv-b", "nobody", "bad id!"]),
    st.integers(min_value=0, max_value=6),
)


def arguments(names: list[str]) -> st.SearchStrategy[dict[str, Any]]:
    """Objects with any of ``names`` (and sometimes an unknown key), each any value."""
    known = st.fixed_dictionaries({}, optional=dict.fromkeys(names, VALUES))
    extra = st.dictionaries(st.text(max_size=12), JSON_VALUES, max_size=2)
    return st.builds(lambda a, b: {**b, **a}, known, extra)


QUESTIONS = st.lists(
    arguments(["id", "question", "options", "allowFreeText"]), min_size=0, max_size=11
)


def tool_arguments(tool: tools.Operation) -> st.SearchStrategy[Any]:
    names = list(tool.input_schema.get("properties", {}))
    drawn = arguments(names)
    if tool.name == "ccweb_prompt_user":
        drawn = st.builds(lambda a, q: {**a, "questions": q}, drawn, QUESTIONS) | drawn
    return drawn | JSON_VALUES


def _assert_documented(exc: DomainError) -> None:
    assert exc.code in DOCUMENTED_CODES, f"undocumented code {exc.code!r}: {exc.message}"
    assert exc.message


@pytest.mark.parametrize("name", [tool.name for tool in tools.TOOLS])
@given(data=st.data())
async def test_any_tool_arguments_get_a_payload_or_a_documented_error_and_refusals_write_nothing(
    pair: Store, name: str, data: st.DataObject
) -> None:
    tool = tools.get_tool(name)
    args = data.draw(tool_arguments(tool), label="arguments")
    source = data.draw(SOURCES, label="source")
    before = await table_row_counts(pair)
    try:
        payload = await tools.call_tool(pair, source, name, args)
    except DomainError as exc:
        _assert_documented(exc)
        assert await table_row_counts(pair) == before
        return
    assert isinstance(payload, dict)
    orjson.dumps(payload)  # it can be sent


@given(data=st.data())
async def test_any_host_method_params_get_a_result_or_a_documented_error_and_refusals_write_nothing(
    pair: Store, data: st.DataObject
) -> None:
    method = data.draw(st.sampled_from(sorted(rpc.METHODS)), label="method")
    params = data.draw(arguments(list(RPC_PARAMS[method])), label="params")
    before = await table_row_counts(pair)
    try:
        result = await http_rpc.dispatcher(pair)(method, params)
    except DomainError as exc:
        _assert_documented(exc)
        assert await table_row_counts(pair) == before
        return
    except jsonrpc.RpcError as exc:  # tools.call of a tool that does not exist
        assert exc.code == jsonrpc.INVALID_PARAMS
        assert await table_row_counts(pair) == before
        return
    orjson.dumps(result, option=orjson.OPT_NON_STR_KEYS)


def test_the_property_tests_know_every_host_method() -> None:
    assert set(RPC_PARAMS) == set(rpc.METHODS)
