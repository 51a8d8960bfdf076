"""The JSON value rule (``json_values``): what breaks it, and keeping such a value as text."""

from __future__ import annotations

import json
import math
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from ccweb_store.domain import json_values
from ccweb_store.domain.json_values import KEPT_AS_TEXT, MAX_DEPTH, find_problem, keep_as_text
from tests.json_support import depth, nested


@pytest.mark.parametrize(
    "value",
    [
        None,
        True,
        0,
        2**63 - 1,
        -(2**63),
        1e308,
        5e-324,
        -0.0,
        "héllo 🙂",
        nested(MAX_DEPTH),
        {"list": [1, [2, [3]]], "text": "ok"},
    ],
)
def test_values_within_the_rule_have_no_problem(value: Any) -> None:
    assert find_problem(value, "metadata") is None


@pytest.mark.parametrize(
    ("value", "path", "limit"),
    [
        ({"x": 2**63}, "metadata.x", f"{-(2**63)}..{2**63 - 1}"),
        ({"x": [0, -(2**63) - 1]}, "metadata.x[1]", f"{-(2**63)}..{2**63 - 1}"),
        ({"x": math.nan}, "metadata.x", "finite numbers only"),
        ({"x": -math.inf}, "metadata.x", "finite numbers only"),
        ({"x": "a\ud800b"}, "metadata.x", "valid Unicode (no lone surrogates)"),
        ({"\udfff": 1}, "metadata", "valid Unicode (no lone surrogates)"),
        (nested(MAX_DEPTH + 1), "metadata" + ".a" * MAX_DEPTH, f"{MAX_DEPTH} levels"),
    ],
)
def test_a_value_that_breaks_the_rule_is_found_with_its_path_and_limit(
    value: Any, path: str, limit: str
) -> None:
    problem = find_problem(value, "metadata")
    assert problem is not None
    assert (problem.path, problem.limit) == (path, limit)
    error = problem.error()
    assert error.code == "invalid_json_value"
    assert error.rpc_code == -32602
    assert error.data == {"path": path, "limit": limit}


def test_a_value_nested_far_beyond_the_recursion_limit_is_measured_not_a_recursion_error() -> None:
    value: Any = 1
    for _ in range(100_000):
        value = [value]
    problem = find_problem(value, "v")
    assert problem is not None
    assert problem.limit == f"{MAX_DEPTH} levels"


@pytest.mark.parametrize(
    "value",
    [
        {"big": 2**64, "fine": 1},
        {"deep": nested(300), "fine": [1, 2]},
        {"nan": math.nan, "inf": [math.inf]},
        {"text": "lone \ud800", "\udc00key": "v"},
        [nested(MAX_DEPTH - 1, leaf=[1])],
    ],
)
def test_keep_as_text_keeps_the_value_losslessly_and_within_the_rule(value: Any) -> None:
    kept, replaced = keep_as_text(value)
    assert replaced
    assert find_problem(kept, "kept") is None
    assert depth(kept) <= MAX_DEPTH

    assert json.dumps(json_values.restored(kept)) == json.dumps(value)


def test_keep_as_text_leaves_a_value_within_the_rule_as_it_is() -> None:
    value = {"a": [1, 2.5, "x", None, True]}
    kept, replaced = keep_as_text(value)
    assert kept is value
    assert replaced == []


def test_stored_text_that_cannot_be_read_back_comes_back_as_its_text() -> None:
    text = "[" * 5000 + "]" * 5000
    assert json_values.loads_stored(text) == {KEPT_AS_TEXT: text}
    assert json_values.loads_stored('{"x": 18446744073709551616}') == {"x": 2**64}


json_leaves = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**70), max_value=2**70),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(alphabet=st.characters(min_codepoint=0, max_codepoint=0xDFFF), max_size=4),
)


@given(
    st.recursive(
        json_leaves,
        lambda children: (
            st.lists(children, max_size=3)
            | st.dictionaries(st.text(max_size=3), children, max_size=3)
        ),
        max_leaves=20,
    ),
    st.integers(min_value=0, max_value=MAX_DEPTH + 2),
)
def test_the_quick_check_and_the_path_finder_agree(value: Any, wrapping: int) -> None:
    for _ in range(wrapping):
        value = [value]
    assert json_values.keeps_rule(value) == (find_problem(value, "v") is None)
